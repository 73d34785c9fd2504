package watchstream

import (
	"context"
	"runtime"
	"sync/atomic"
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
// A gate may keep one of its slots from new writes (Keep): for requests,
// while other users than the one whose writes are being delivered are
// active. A write already in that slot finishes.
//
// A Gate is safe for concurrent use; each watch has a Pass of its own.
type Gate struct {
	slots chan struct{}
	// spare is the slot Keep keeps (nil in a gate of one slot);
	// new writes may take it while kept is false.
	spare    chan struct{}
	kept     atomic.Bool
	patience time.Duration
}

// NewGate returns a gate of n slots, each given back at the latest after
// patience.
func NewGate(n int, patience time.Duration) *Gate {
	g := &Gate{slots: make(chan struct{}, max(1, n-1)), patience: patience}
	if n > 1 {
		g.spare = make(chan struct{}, 1)
	}
	return g
}

// Keep keeps one slot from new writes (keep true) or gives it back to
// them. A gate of one slot keeps none.
func (g *Gate) Keep(keep bool) { g.kept.Store(keep) }

// Open is how many slots new writes may take: all of them, one fewer
// while a slot is kept.
func (g *Gate) Open() int {
	n := cap(g.slots)
	if g.spare != nil && !g.kept.Load() {
		n++
	}
	return n
}

// Pass is one watch's use of a Gate. It belongs to the goroutine serving
// the watch, which must call Leave before it waits for events and before
// it returns. The zero Pass of a nil Gate lets everything through.
type Pass struct {
	g *Gate
	// held is the slot taken (g.slots or g.spare) while inside; a timer
	// of each kind (timer) gives it back after the patience.
	held                  chan struct{}
	slotTimer, spareTimer *time.Timer
	inside                bool // a slot is held (by the Pass or its timer)
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
	spare := p.g.spare
	if p.g.kept.Load() {
		spare = nil // a send on nil is never chosen
	}
	select {
	case p.g.slots <- struct{}{}:
		p.held = p.g.slots
	case spare <- struct{}{}:
		p.held = spare
	default:
		for {
			select {
			case p.g.slots <- struct{}{}:
				p.held = p.g.slots
			case spare <- struct{}{}:
				p.held = spare
			case <-ctx.Done():
				return ctx.Err()
			}
			if p.held != p.g.spare || !p.g.kept.Load() {
				break
			}
			// Kept while this write waited for it: give it back and
			// wait for the other slots only (the next waiter for the
			// spare does the same, once).
			<-p.g.spare
			spare = nil
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
	if t := p.timer(); *t == nil {
		slot := p.held
		*t = time.AfterFunc(p.g.patience, func() { <-slot })
	} else {
		(*t).Reset(p.g.patience)
	}
	return nil
}

// timer is the timer that gives the held slot back after the patience:
// one per slot kind, made once (a timer's function cannot change, and one
// still running from an earlier batch must release what that batch held).
func (p *Pass) timer() **time.Timer {
	if p.held == p.g.spare {
		return &p.spareTimer
	}
	return &p.slotTimer
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
		if (*p.timer()).Stop() {
			<-p.held
		} else {
			p.slow = true
		}
	}
}
