package client

import (
	"net/url"
	"testing"
	"time"
)

// TestFailbackDelaySpread: the time away from the preferred server before
// a failback probe is failbackDelay plus up to half of it, drawn anew
// each time requests leave it, so clients moved together come back
// spread.
func TestFailbackDelaySpread(t *testing.T) {
	defer SetFailoverTimes(time.Millisecond, time.Millisecond, time.Minute)()
	a, _ := url.Parse("https://a")
	b, _ := url.Parse("https://b")
	var spreads []float64
	for range 50 {
		s := newServers([]*url.URL{a, b})
		now := time.Now()
		s.mu.Lock()
		s.setCur(1, now)
		s.left = now.Add(-time.Minute) // failbackDelay ago
		s.mu.Unlock()
		s.spread = 0.25
		if c := s.pick(nil); c.probe {
			t.Fatalf("probed a quarter of the delay too early (spread %.2f)", s.spread)
		}
		s.left = now.Add(-90 * time.Second) // the longest the spread allows
		if c := s.pick(nil); !c.probe || c.server != 0 {
			t.Fatalf("no probe of the preferred server 1.5 failback delays after leaving it: %+v", c)
		}
		s.mu.Lock()
		s.setCur(0, now)
		s.setCur(1, now)
		if s.spread < 0 || s.spread >= 0.5 {
			t.Fatalf("spread %v outside [0, 0.5)", s.spread)
		}
		spreads = append(spreads, s.spread)
		s.mu.Unlock()
	}
	lo, hi := spreads[0], spreads[0]
	for _, f := range spreads {
		lo, hi = min(lo, f), max(hi, f)
	}
	if hi-lo < 0.1 {
		t.Errorf("50 departures drew spreads within %.3f of each other: not random", hi-lo)
	}
}
