package servertest

import (
	"bufio"

	"context"

	"net/http"

	"testing"
	"time"
)

// WatchLines reads n watch events from path (a watch URL).
func WatchLines(t *testing.T, a *API, path string, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", a.Host+path, nil)
	resp, err := a.C.Do(req)
	if err != nil {
		t.Fatalf("watch %s: %v", path, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var out []string
	for len(out) < n && sc.Scan() {
		out = append(out, sc.Text())
	}
	if len(out) < n {
		t.Fatalf("watch %s: %d events (%v), want %d", path, len(out), sc.Err(), n)
	}
	return out
}
