package client

import "time"

// SetServiceAccountDir moves the in-cluster service-account directory for a
// test and returns a function restoring it.
func SetServiceAccountDir(dir string) func() {
	old := serviceAccountDir
	serviceAccountDir = dir
	return func() { serviceAccountDir = old }
}

// SetPingTimeouts shortens the HTTP/2 health check for a test and returns
// a function restoring it.
func SetPingTimeouts(after, timeout time.Duration) func() {
	a, t := pingAfter, pingTimeout
	pingAfter, pingTimeout = after, timeout
	return func() { pingAfter, pingTimeout = a, t }
}
