package servertest

import (
	"net/http"

	"testing"
	"time"
)

// WaitServed waits until path lists.
func WaitServed(t *testing.T, a *API, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for a.JSON("GET", path, "").Code != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("%s not served within 10 s", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
