package endpoints

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestFairQueueOrder: freed seats go to the users' flows in turn, FIFO
// within a flow, a newcomer after every flow already waiting.
func TestFairQueueOrder(t *testing.T) {
	q := newFairQueue(1)
	hold, err := q.acquire(context.Background(), "h")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"a1", "a2", "a3", "b1", "b2", "c1"}
	var waiters []*waiter
	var flows []*flow
	q.mu.Lock()
	for _, n := range names {
		f := q.flowLocked(n[:1])
		waiters, flows = append(waiters, q.enqueueLocked(f)), append(flows, f)
	}
	q.mu.Unlock()
	hold(0)
	var got []string
	for range names {
		i := slices.IndexFunc(waiters, func(w *waiter) bool { return w.granted })
		if i < 0 {
			t.Fatalf("after %v no request holds the seat", got)
		}
		got = append(got, names[i])
		waiters[i] = &waiter{}
		q.releaser(flows[i])(0)
	}
	if want := []string{"a1", "b1", "c1", "a2", "b2", "a3"}; !slices.Equal(got, want) {
		t.Errorf("dispatch order %v, want %v", got, want)
	}
	if len(q.ring) != 0 || q.free != 1 {
		t.Errorf("after all dispatched: ring %d, free %d", len(q.ring), q.free)
	}
}

// TestFairQueueGiveUp: a request whose wait ends leaves its queue, and a
// seat freed later stays free.
func TestFairQueueGiveUp(t *testing.T) {
	q := newFairQueue(1)
	hold, err := q.acquire(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := q.acquire(ctx, "b"); err == nil {
		t.Fatal("acquire with an ended context took a seat")
	}
	if len(q.ring) != 0 || len(q.flows["b"].waiting) != 0 {
		t.Errorf("the given-up request is still queued: ring %d, waiting %d", len(q.ring), len(q.flows["b"].waiting))
	}
	hold(0)
	if q.free != 1 {
		t.Errorf("free seats %d, want 1", q.free)
	}
}

// TestFairQueueShare: a user alone takes every seat; while another user
// is active each executes at most its share (half the CPUs), and a seat
// of the other's share stays free for it; once the other has been idle for activeFor,
// the first may take every seat again.
func TestFairQueueShare(t *testing.T) {
	now := time.Unix(1000, 0)
	q := newFairQueue(4)
	q.now, q.shared = func() time.Time { return now }, 4 // as on 4 CPUs
	ctx := context.Background()
	var a []func(time.Duration)
	for range 4 {
		r, err := q.acquire(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		a = append(a, r)
	}
	bDone := make(chan func(time.Duration))
	go func() {
		r, _ := q.acquire(ctx, "b")
		bDone <- r
	}()
	waitFor(t, "b queued", func() bool { return q.ringLen() == 1 })
	a[0](0) // a: 3 executing; b gets the seat
	b := <-bDone
	a[1](0) // a: 2, its share: this seat stays free for b
	aDone := make(chan func(time.Duration))
	go func() {
		r, _ := q.acquire(ctx, "a")
		aDone <- r
	}()
	waitFor(t, "a queued", func() bool { return q.ringLen() == 1 })
	q.mu.Lock()
	if q.free != 1 {
		t.Fatalf("free seats %d, want 1 (b's share)", q.free)
	}
	q.mu.Unlock()
	b2, err := q.acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	b2(0)
	b(0)
	// b is idle but active: a (2 executing) still waits with 2 seats free.
	select {
	case r := <-aDone:
		r(0)
		t.Fatal("a got a third seat while b was active")
	case <-time.After(20 * time.Millisecond):
	}
	q.mu.Lock()
	now = now.Add(activeFor + time.Second)
	q.mu.Unlock()
	a[3](0) // a's release drops b, no longer active: a's request gets a seat
	(<-aDone)(0)
	a[2](0)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.free != 4 {
		t.Errorf("free seats %d at the end, want 4", q.free)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if ok() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (q *fairQueue) ringLen() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ring)
}

// TestFairQueueHoldYields: a flooding user's writes whose seats are held
// for their deliveries take every seat; a calm user's request then gets a
// seat at once (the oldest hold over the flood's share yields), while the
// flood's next request still waits until its holds end, and every seat is
// free again after them.
func TestFairQueueHoldYields(t *testing.T) {
	q := newFairQueue(4)
	q.shared = 2 // as on 2 CPUs
	ctx := context.Background()
	for range 4 {
		r, err := q.acquire(ctx, "flood")
		if err != nil {
			t.Fatal(err)
		}
		r(time.Second) // returned; its delivery holds the seat
	}
	if got := q.taken(); got != 4 {
		t.Fatalf("seats taken after the flood's writes returned: %d, want 4", got)
	}
	start := time.Now()
	calmCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	calm, err := q.acquire(calmCtx, "calm")
	if err != nil {
		t.Fatalf("the calm user's request waited out the flood's holds: %v after %v", err, time.Since(start))
	}
	floodDone := make(chan time.Duration)
	go func() {
		r, err := q.acquire(ctx, "flood")
		if err != nil {
			t.Error(err)
		}
		floodDone <- time.Since(start)
		r(0)
	}()
	calm(0)
	calm2, err := q.acquire(calmCtx, "calm") // its own seat again, at once
	if err != nil {
		t.Fatal(err)
	}
	calm2(0)
	if waited := <-floodDone; waited < 900*time.Millisecond {
		t.Errorf("the flood's next request got a seat after %v, before its holds ended", waited)
	}
	waitFor(t, "every seat free", func() bool { return q.taken() == 0 })
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.holds) != 0 || q.flows["flood"].executing != 0 {
		t.Errorf("after the holds: %d holds, flood executing %d", len(q.holds), q.flows["flood"].executing)
	}
}

// TestFairQueueTellsSharing: the delivery gate is told when a second
// user becomes active and when, the first's requests done and activeFor
// past, only one is left; a user alone never makes it keep a slot.
func TestFairQueueTellsSharing(t *testing.T) {
	q := newFairQueue(4)
	now := time.Unix(1000, 0)
	q.now = func() time.Time { return now }
	var told []bool
	q.onSharing = func(s bool) { told = append(told, s) }

	a, err := q.acquire(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	a(0)
	if len(told) != 0 {
		t.Fatalf("one user alone: told %v", told)
	}
	b, err := q.acquire(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(told, []bool{true}) {
		t.Fatalf("a second user active: told %v, want [true]", told)
	}
	b(0)
	now = now.Add(activeFor / 2)
	a, err = q.acquire(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	a(0)
	if !slices.Equal(told, []bool{true}) {
		t.Fatalf("both still active: told %v, want [true]", told)
	}
	now = now.Add(activeFor)
	a, err = q.acquire(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	a(0)
	if !slices.Equal(told, []bool{true, false}) {
		t.Errorf("b inactive for over activeFor: told %v, want [true false]", told)
	}
}
