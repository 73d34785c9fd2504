package watchstream

import (
	"context"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestNextWindow(t *testing.T) {
	const base, most = 10 * time.Millisecond, 80 * time.Millisecond
	for _, c := range []struct {
		cur   time.Duration
		share float64
		want  time.Duration
	}{
		{base, 0.2, base},                   // idle stays at base
		{base, 0.9, 2 * base},               // saturated doubles
		{base, 1.0, 2 * base},               //
		{60 * time.Millisecond, 0.95, most}, // up to most
		{most, 0.99, most},
		{most, 0.75, most / 2},                              // room: halves
		{15 * time.Millisecond, 0, base},                    // down to base
		{40 * time.Millisecond, 0.8, 40 * time.Millisecond}, // between: holds
	} {
		if got := nextWindow(c.cur, base, most, c.share); got != c.want {
			t.Errorf("nextWindow(%v, busy %.2f) = %v, want %v", c.cur, c.share, got, c.want)
		}
	}
}

// The pacer follows the machine's busy share as read: a saturated machine
// grows the window to its maximum within a few periods, one with room
// brings it back to the base.
func TestPacerFollowsBusyShare(t *testing.T) {
	p := NewPacer(10*time.Millisecond, 80*time.Millisecond)
	var busy atomic.Uint64 // per mille of each period's ticks
	var clock cpuTimes
	var mu sync.Mutex
	p.read = func() (cpuTimes, error) {
		mu.Lock()
		defer mu.Unlock()
		clock.total += 1000
		clock.busy += busy.Load()
		return clock, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	defer func() { cancel(); <-done }()

	busy.Store(950)
	waitWindow(t, p, 80*time.Millisecond)
	for range 20 {
		if w := p.Batch(); w < 40*time.Millisecond || w > 80*time.Millisecond {
			t.Fatalf("jittered window %v outside [40ms, 80ms]", w)
		}
	}
	busy.Store(800) // between the thresholds: holds
	time.Sleep(3 * pacerPeriod)
	if w := p.Window(); w != 80*time.Millisecond {
		t.Fatalf("window %v at 80%% busy, want it held at 80ms", w)
	}
	busy.Store(300)
	waitWindow(t, p, 10*time.Millisecond)
}

// On Linux the pacer reads real CPU times: with more goroutines spinning
// than there are CPUs, the busy share it reads is over busyShare.
func TestPacerReadsMachineCPU(t *testing.T) {
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc/stat: the pacer keeps the base window here")
	}
	stop := make(chan struct{})
	var spin sync.WaitGroup
	for range 4 * runtime.NumCPU() {
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
	defer func() { close(stop); spin.Wait() }()
	if runtime.GOMAXPROCS(0) < runtime.NumCPU() {
		t.Skip("GOMAXPROCS below the CPU count: spinning cannot saturate the machine")
	}
	r := newCPUReader(procFS{})
	prev, err := r.read()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	now, err := r.read()
	if err != nil {
		t.Fatal(err)
	}
	if share, ok := now.busySince(prev); !ok || share < busyShare {
		t.Fatalf("busy share while spinning on every CPU: %.2f (ok %v), want ≥ %.2f", share, ok, busyShare)
	}
}

func waitWindow(t *testing.T, p *Pacer, want time.Duration) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.Window() != want {
		if time.Now().After(deadline) {
			t.Fatalf("window %v, want %v (last busy share %.3f)", p.Window(), want, float64(p.busy.Load())/1e6)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPacerFixedWindow(t *testing.T) {
	p := NewPacer(10*time.Millisecond, time.Millisecond) // max below base: fixed
	p.Run(context.Background())                          // returns at once
	if p.Window() != 10*time.Millisecond {
		t.Fatalf("window %v", p.Window())
	}
}
