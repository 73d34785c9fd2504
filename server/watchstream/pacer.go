package watchstream

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Pacer chooses how long busy watches batch their output before a
// flush (the flush window), from how busy the machine's CPUs are.
//
// Each flush of a watch costs a write system call, a TLS record and, over
// loopback, the receiver's share of the TCP work: with one event per flush
// Go's net/http and a light reader spend ~20 µs per event, with ten 3.3–4.9 µs
// (BenchmarkDeliveryFloor). While the CPUs have room, output goes out
// within the base window for the least latency. Once they are saturated,
// every watch and every write request queues for a CPU, and delivering
// each event in its own write makes that queue longer: batching more
// events per flush then lowers the latency as well as the CPU per event.
//
// Every pacerPeriod the pacer reads the share of the CPU time available to
// the server that was busy (see cpuReader: the machine's CPUs the process
// may run on, and a cgroup CPU quota if one is lower). At busyShare or more it doubles the window (up to
// max); at idleShare or less it halves it (down to base); between, it
// holds. So under a sustained overload it settles on a window that keeps
// the machine just below saturation, and after a burst of CPU use (say,
// a thousand watches starting) latency is back to the base window within
// a few periods. Where the CPU time cannot be read (not Linux) the window
// stays at base. The share counts every process on those CPUs on purpose:
// a co-located etcd or another process saturating them makes every
// delivery wait too.
//
// Window and Batch may be called from any goroutine; Run belongs to the
// server's Run and ends with its context.
type Pacer struct {
	base, max time.Duration
	cur       atomic.Int64  // the window, nanoseconds
	busy      atomic.Uint64 // the last period's busy share, in millionths
	read      func() (cpuTimes, error)
}

const (
	pacerPeriod = 100 * time.Millisecond
	busyShare   = 0.90
	idleShare   = 0.75
)

func NewPacer(base, most time.Duration) *Pacer {
	p := &Pacer{base: base, max: max(base, most), read: newCPUReader(procFS{}).read}
	p.cur.Store(int64(base))
	return p
}

// Window is the current flush window.
func (p *Pacer) Window() time.Duration { return time.Duration(p.cur.Load()) }

// Batch is a flush window for one batch: the current one, shortened by a
// random part of up to half. Watches that see the same events then flush
// at different moments instead of all together at the end of a common
// window, which would queue every goroutine behind a thousand writes.
func (p *Pacer) Batch() time.Duration {
	w := p.Window()
	return w - rand.N(w/2+1)
}

// Run adjusts the window every pacerPeriod until ctx ends. It returns at
// once when the window cannot vary or the CPU times cannot be read.
func (p *Pacer) Run(ctx context.Context) {
	if p.max <= p.base {
		return
	}
	prev, err := p.read()
	if err != nil {
		return
	}
	t := time.NewTicker(pacerPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.cur.Store(int64(p.base))
			return
		case <-t.C:
			now, err := p.read()
			if err != nil {
				continue
			}
			share, ok := now.busySince(prev)
			prev = now
			if !ok {
				continue
			}
			p.busy.Store(uint64(share * 1e6))
			p.cur.Store(int64(nextWindow(p.Window(), p.base, p.max, share)))
		}
	}
}

// nextWindow is the window after a period in which share of the CPU time
// was busy.
func nextWindow(cur, base, most time.Duration, share float64) time.Duration {
	switch {
	case share >= busyShare:
		return min(most, 2*cur)
	case share <= idleShare:
		return max(base, cur/2)
	}
	return cur
}
