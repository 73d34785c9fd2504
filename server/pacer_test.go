package server

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

func TestNextWindow(t *testing.T) {
	const base, most = 10 * time.Millisecond, 50 * time.Millisecond
	for _, c := range []struct {
		cur, delay, want time.Duration
	}{
		{base, 0, base},             // idle stays at base
		{base, busyDelay, 2 * base}, // busy doubles
		{40 * time.Millisecond, 30 * time.Millisecond, most}, // up to most
		{most, 5 * time.Millisecond, most},
		{most, idleDelay, most - most/4},                                       // idle shrinks by a quarter
		{12 * time.Millisecond, 0, base},                                       // down to base
		{20 * time.Millisecond, 500 * time.Microsecond, 20 * time.Millisecond}, // between: holds
	} {
		if got := nextWindow(c.cur, base, most, c.delay); got != c.want {
			t.Errorf("nextWindow(%v, delay %v) = %v, want %v", c.cur, c.delay, got, c.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	bounds := []float64{0, 1e-6, 1e-3, 1e-2, 1e300}
	for _, c := range []struct {
		counts []uint64
		q      float64
		want   time.Duration
		ok     bool
	}{
		{[]uint64{0, 0, 0, 0}, 0.9, 0, false},
		{[]uint64{10, 0, 0, 0}, 0.9, time.Microsecond, true},
		{[]uint64{90, 10, 0, 0}, 0.9, time.Millisecond, true}, // the 91st of 100 is in bucket 1
		{[]uint64{91, 9, 0, 0}, 0.9, time.Microsecond, true},
		{[]uint64{0, 0, 0, 5}, 0.9, 10 * time.Millisecond, true}, // +Inf bucket: its lower bound
	} {
		var total uint64
		for _, n := range c.counts {
			total += n
		}
		got, ok := percentile(c.counts, bounds, total, c.q)
		if got != c.want || ok != c.ok {
			t.Errorf("percentile(%v) = %v, %v; want %v, %v", c.counts, got, ok, c.want, c.ok)
		}
	}
}

// TestPacerFollowsCPUPressure keeps more goroutines runnable than there
// are CPUs for Go to run them on: the window must grow to its maximum,
// and return to the base once they stop.
func TestPacerFollowsCPUPressure(t *testing.T) {
	const base, most = 10 * time.Millisecond, 80 * time.Millisecond
	p := newFlushPacer(base, most)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.run(ctx) }()
	defer func() { cancel(); <-done }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: window %v, last p90 scheduling delay %v", what, p.Window(), time.Duration(p.delay.Load()))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	stop := make(chan struct{})
	var spin sync.WaitGroup
	for range 8 * runtime.GOMAXPROCS(0) {
		spin.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := 0; i < 1e5; i++ {
					_ = i * i
				}
			}
		})
	}
	waitFor("under CPU pressure", func() bool { return p.Window() == most })
	for range 20 {
		if w := p.window(); w < most/2 || w > most {
			t.Fatalf("jittered window %v outside [%v, %v]", w, most/2, most)
		}
	}
	close(stop)
	spin.Wait()
	waitFor("after the pressure", func() bool { return p.Window() == base })
}

func TestPacerFixedWindow(t *testing.T) {
	p := newFlushPacer(10*time.Millisecond, time.Millisecond) // max below base: fixed
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.run(ctx) // returns at once
	if p.Window() != 10*time.Millisecond {
		t.Fatalf("window %v", p.Window())
	}
}
