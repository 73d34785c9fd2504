package watchstream

import (
	"context"
	"runtime"
	"time"
)

// Gate bounds how many watches write at once. When an event reaches
// thousands of watches, each watch's goroutine becomes runnable at once,
// and Go's scheduler runs them in turn: a request readied meanwhile (its
// body read, etcd's answer arrived) waits behind all of them, tens to
// hundreds of milliseconds on two CPUs. A watch passes the gate before it
// writes a batch and leaves after the flush; the others wait for a slot
// parked, not runnable, so a request waits behind a few writes at most.
//
// A write blocked on a client that is slow to read must not keep its
// slot: a Pass gives its slot back by itself once it has held it for the
// gate's patience, whatever its goroutine is doing, and a watch whose
// write took that long passes by the gate until a write of its is quick
// again. So a blocked write delays the others by at most the patience,
// once, and the gate bounds the watches writing at once only among those
// whose clients keep up.
//
// A Gate is safe for concurrent use; each watch has a Pass of its own.
type Gate struct {
	slots    chan struct{}
	patience time.Duration
}

// NewGate returns a gate of n slots, each given back at the latest after
// patience.
func NewGate(n int, patience time.Duration) *Gate {
	return &Gate{slots: make(chan struct{}, max(1, n)), patience: patience}
}

// Pass is one watch's use of a Gate. It belongs to the goroutine serving
// the watch, which must call Leave before it waits for events and before
// it returns. The zero Pass of a nil Gate lets everything through.
type Pass struct {
	g      *Gate
	timer  *time.Timer // gives the slot back after the patience
	inside bool        // a slot is held (by the Pass or its timer)
	// slow: the last write took longer than the patience; the watch
	// passes by the gate (bypass, since began) until one is quick.
	slow, bypass bool
	began        time.Time
}

// NewPass returns a pass through g (nil: no gate).
func NewPass(g *Gate) *Pass { return &Pass{g: g} }

// Enter takes a slot, waiting until one is free or ctx ends (then it
// returns ctx's error and holds none). Entering again while inside does
// nothing.
func (p *Pass) Enter(ctx context.Context) error {
	if p.g == nil || p.inside || p.bypass {
		return nil
	}
	if p.slow {
		p.bypass, p.began = true, time.Now()
		return nil
	}
	select {
	case p.g.slots <- struct{}{}:
	default:
		select {
		case p.g.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		// The watch that left readied this goroutine to run next on its
		// CPU, in the rest of its time slice: so one watch after another
		// would run there for up to the scheduler's 10 ms slice while a
		// request readied meanwhile waits in the queue. Going to the back
		// of the scheduler's queues first lets every other runnable
		// goroutine go before this write.
		runtime.Gosched()
	}
	p.inside = true
	if p.timer == nil {
		p.timer = time.AfterFunc(p.g.patience, p.g.release)
	} else {
		p.timer.Reset(p.g.patience)
	}
	return nil
}

// Leave gives the slot back, unless the patience ran out and the timer
// did (then the watch is slow).
func (p *Pass) Leave() {
	switch {
	case p.bypass:
		p.bypass = false
		p.slow = time.Since(p.began) >= p.g.patience
	case p.inside:
		p.inside = false
		if p.timer.Stop() {
			p.g.release()
		} else {
			p.slow = true
		}
	}
}

func (g *Gate) release() { <-g.slots }
