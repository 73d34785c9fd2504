package servertest

import (
	"errors"
	"fmt"

	"strconv"
	"strings"

	"time"
)

// WaitOpenWatches waits up to 10 s for the server's open-watch gauge of
// ConfigMaps to read n.
func WaitOpenWatches(a *API, n int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := OpenWatches(a)
		if got == n {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("open watches: " + fmt.Sprint(got) + ", want " + fmt.Sprint(n))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// MetricValue reads one series of the server's metrics (0 when absent).
func MetricValue(a *API, series string) int {
	a.T.Helper()
	r := a.Do("GET", "/metrics", "", nil)
	for line := range strings.Lines(string(r.Body)) {
		if v, ok := strings.CutPrefix(line, series); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				a.T.Fatalf("metric %s%s: %v", series, v, err)
			}
			return int(n)
		}
	}
	return 0
}
