package endpoints

import (
	"context"
	"slices"
	"testing"
)

// TestFairQueueOrder: freed seats go to the users' flows in turn, FIFO
// within a flow, a newcomer after every flow already waiting.
func TestFairQueueOrder(t *testing.T) {
	q := newFairQueue(1)
	q.free = 0
	var waiters []*waiter
	names := []string{"a1", "a2", "a3", "b1", "b2", "c1"}
	for _, n := range names {
		_, w := q.enqueueLocked(n[:1])
		waiters = append(waiters, w)
	}
	var got []string
	for range names {
		q.release()
		for i, w := range waiters {
			if w.granted && !slices.Contains(got, names[i]) {
				got = append(got, names[i])
			}
		}
	}
	if want := []string{"a1", "b1", "c1", "a2", "b2", "a3"}; !slices.Equal(got, want) {
		t.Errorf("dispatch order %v, want %v", got, want)
	}
	if len(q.ring) != 0 || len(q.flows) != 0 || q.free != 0 {
		t.Errorf("after all dispatched: ring %d, flows %d, free %d", len(q.ring), len(q.flows), q.free)
	}
	q.release()
	if q.free != 1 {
		t.Errorf("free seats %d after a release with none waiting, want 1", q.free)
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
	if len(q.ring) != 0 || len(q.flows) != 0 {
		t.Errorf("the given-up request is still queued: ring %d, flows %d", len(q.ring), len(q.flows))
	}
	hold()
	if q.free != 1 {
		t.Errorf("free seats %d, want 1", q.free)
	}
}
