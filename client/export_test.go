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

// SetCertFileRefresh changes how often client certificate files are
// re-read for a test and returns a function restoring it.
func SetCertFileRefresh(d time.Duration) func() {
	old := certFileRefresh
	certFileRefresh = d
	return func() { certFileRefresh = old }
}

// RateLimit returns r's token bucket; ok is false without one.
func RateLimit(r *REST) (qps float64, burst int, ok bool) {
	if r.limiter == nil {
		return 0, 0, false
	}
	return float64(r.limiter.Limit()), r.limiter.Burst(), true
}

// SetFailoverTimes changes the backoff of failed servers (failedFor,
// doubling up to failedForMax) and the failback delay for a test and
// returns a function restoring them. Call it while no request runs.
func SetFailoverTimes(failed, failedMax, failback time.Duration) func() {
	f, m, b := failedFor, failedForMax, failbackDelay
	failedFor, failedForMax, failbackDelay = failed, failedMax, failback
	return func() { failedFor, failedForMax, failbackDelay = f, m, b }
}
