package watchstream

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestGateBoundsWritersAtOnce: of many watches entering together, no more
// than the gate's slots are inside at once, and every one gets through.
func TestGateBoundsWritersAtOnce(t *testing.T) {
	g := NewGate(3, time.Minute)
	if m := mostInside(t, g, 64, 50*time.Microsecond); m > 3 || m == 0 {
		t.Errorf("%d watches inside at once, want at most 3 (the slots)", m)
	}
	if n := len(g.slots) + len(g.spare); n != 0 {
		t.Errorf("%d slots still taken after every watch left", n)
	}
}

// mostInside has n watches enter g 20 times each, staying inside for
// d, and returns how many were inside at once at most.
func mostInside(t *testing.T, g *Gate, n int, d time.Duration) int32 {
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			p := NewPass(g)
			for range 20 {
				if err := p.Enter(t.Context()); err != nil {
					t.Error(err)
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(d)
				inside.Add(-1)
				p.Leave()
			}
		})
	}
	wg.Wait()
	return most.Load()
}

// TestGateKeep: a kept slot takes no new write, so one fewer watch is
// inside at once; given back, it is used again. A gate of one slot keeps
// none.
func TestGateKeep(t *testing.T) {
	most := func(g *Gate) int32 { return mostInside(t, g, 16, 200*time.Microsecond) }
	g := NewGate(3, time.Minute)
	g.Keep(true)
	if m, open := most(g), g.Open(); m != 2 || open != 2 {
		t.Errorf("kept: %d watches inside at once, %d slots open, want 2 and 2 (3 slots, one kept)", m, open)
	}
	g.Keep(false)
	if m, open := most(g), g.Open(); m != 3 || open != 3 {
		t.Errorf("given back: %d watches inside at once, %d slots open, want 3 and 3", m, open)
	}
	one := NewGate(1, time.Minute)
	one.Keep(true)
	if m, open := most(one), one.Open(); m != 1 || open != 1 {
		t.Errorf("a gate of one slot, kept: %d inside at once, %d open, want 1 and 1", m, open)
	}
}

// TestGatePatienceOfTheSpare: a write holding the spare slot past the
// patience gives that slot back (not another), so the gate's slots are
// all free again once every watch left.
func TestGatePatienceOfTheSpare(t *testing.T) {
	g := NewGate(2, 10*time.Millisecond)
	first, second := NewPass(g), NewPass(g)
	for _, p := range []*Pass{first, second} {
		if err := p.Enter(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if len(g.slots) != 1 || len(g.spare) != 1 {
		t.Fatalf("two inside: slots %d, spare %d taken, want 1 and 1", len(g.slots), len(g.spare))
	}
	time.Sleep(50 * time.Millisecond) // both patiences run out
	if len(g.slots) != 0 || len(g.spare) != 0 {
		t.Errorf("after the patience: slots %d, spare %d still taken", len(g.slots), len(g.spare))
	}
	first.Leave()
	second.Leave()
	if len(g.slots) != 0 || len(g.spare) != 0 {
		t.Errorf("after leaving: slots %d, spare %d taken", len(g.slots), len(g.spare))
	}
}

// TestGatePatience: a watch that keeps its slot past the patience (a
// write blocked on its client) loses it, so the others go on; its next
// batch passes by the gate, and a quick one brings it back in line.
func TestGatePatience(t *testing.T) {
	g := NewGate(1, 20*time.Millisecond)
	blocked := NewPass(g)
	if err := blocked.Enter(t.Context()); err != nil {
		t.Fatal(err)
	}
	other := NewPass(g)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := other.Enter(ctx); err != nil {
		t.Fatalf("the other watch never got the slot: %v", err)
	}
	if d := time.Since(t0); d < 15*time.Millisecond {
		t.Errorf("the other watch got the slot after %v, before the patience", d)
	}
	blocked.Leave() // its write returns at last: the slot is not its to give
	if n := len(g.slots); n != 1 {
		t.Fatalf("%d slots taken, want 1 (the other watch's)", n)
	}
	// The slow watch passes by while the slot is taken...
	if err := blocked.Enter(ctx); err != nil || !blocked.bypass {
		t.Fatalf("slow watch: %v, bypassing %v", err, blocked.bypass)
	}
	blocked.Leave() // quick
	other.Leave()
	// ...and waits in line again after a quick write.
	if err := blocked.Enter(ctx); err != nil || !blocked.inside {
		t.Fatalf("after a quick write: %v, inside %v", err, blocked.inside)
	}
	blocked.Leave()
	if n := len(g.slots); n != 0 {
		t.Errorf("%d slots still taken", n)
	}
}

// TestGateWaitEndsWithContext: a watch waiting for a slot stops waiting
// when its context ends, holding none.
func TestGateWaitEndsWithContext(t *testing.T) {
	g := NewGate(1, time.Minute)
	a := NewPass(g)
	if err := a.Enter(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	b := NewPass(g)
	if err := b.Enter(ctx); err == nil {
		t.Fatal("entered a full gate")
	}
	b.Leave() // nothing to give back
	a.Leave()
	if n := len(g.slots); n != 0 {
		t.Errorf("%d slots still taken", n)
	}
}

func TestNilGate(t *testing.T) {
	p := NewPass(nil)
	if err := p.Enter(t.Context()); err != nil {
		t.Fatal(err)
	}
	p.Leave()
}

// TestGateKeepWhileWaiting: a write already waiting when the slot is kept
// does not take it when it frees: it waits for the other slots.
func TestGateKeepWhileWaiting(t *testing.T) {
	g := NewGate(2, time.Minute)
	a, b := NewPass(g), NewPass(g)
	for _, p := range []*Pass{a, b} {
		if err := p.Enter(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	entered := make(chan *Pass, 2)
	for range 2 {
		go func() {
			p := NewPass(g)
			if err := p.Enter(t.Context()); err == nil {
				entered <- p
			}
		}()
	}
	time.Sleep(20 * time.Millisecond) // both wait for a slot
	g.Keep(true)
	held := a
	if a.held != g.spare {
		held = b
	}
	held.Leave() // frees the spare
	select {
	case p := <-entered:
		t.Errorf("a waiting write took the kept slot (the spare: %v)", p.held == g.spare)
	case <-time.After(50 * time.Millisecond):
	}
	other := a
	if held == a {
		other = b
	}
	other.Leave() // frees the other slot: one waiter enters
	select {
	case p := <-entered:
		if p.held == g.spare {
			t.Error("the waiter entered through the kept slot")
		}
		p.Leave()
	case <-time.After(5 * time.Second):
		t.Fatal("no waiter entered when a slot not kept freed")
	}
	select {
	case p := <-entered:
		p.Leave()
	case <-time.After(5 * time.Second):
		t.Fatal("the second waiter never entered")
	}
}
