package endpoints

import (
	"context"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/objwatch/objwatch/server/auth"
)

// DefaultExecutionSeatsPerCPU is how many requests execute at once per
// CPU (GOMAXPROCS) when Config.ExecutionSeats is 0. A request spends part
// of its time waiting for etcd, so a little more than one per CPU keeps
// the CPUs busy; more only makes every executing request slower (see
// docs/PERFORMANCE.md, "One user flooding writes").
const DefaultExecutionSeatsPerCPU = 2

// maxQueueWait bounds the queue wait of any request, as kube-apiserver's
// priority and fairness filter does.
const maxQueueWait = time.Minute

// fairQueue is the execution limit in the manner of kube-apiserver's API
// priority and fairness, with one priority level and one flow per user:
// at most seats requests execute at once; the others wait in their user's
// FIFO queue, and a freed seat goes to the queues in turn (round robin
// over the users that have requests waiting), so that one user's many
// queued requests delay another user's request by at most one dispatch
// each. How long a user's queue may grow is the in-flight limit's per-user
// share (inFlight), which admits requests before they queue here.
//
// It is safe for concurrent use; mu is never held while a request is
// served.
type fairQueue struct {
	mu    sync.Mutex
	free  int              // free seats; 0 whenever a request waits
	flows map[string]*flow // users with requests waiting
	ring  []*flow          // the same flows, in dispatch order
	next  int              // index in ring of the next flow served
}

type flow struct {
	user    string
	waiting []*waiter // FIFO
}

// waiter is one queued request; granted (under fairQueue.mu) once ready
// is closed and the seat is its.
type waiter struct {
	ready   chan struct{}
	granted bool
}

// newFairQueue returns a limit of seats executing requests
// (0: DefaultExecutionSeatsPerCPU per CPU).
func newFairQueue(seats int) *fairQueue {
	if seats <= 0 {
		seats = DefaultExecutionSeatsPerCPU * runtime.GOMAXPROCS(0)
	}
	return &fairQueue{free: seats, flows: map[string]*flow{}}
}

// acquire takes an execution seat for a request of user, waiting in the
// user's queue until one is given to it or ctx ends (then it returns
// ctx's error and holds no seat). release gives the seat back; it must be
// called exactly once.
func (q *fairQueue) acquire(ctx context.Context, user string) (release func(), err error) {
	q.mu.Lock()
	if q.free > 0 {
		q.free--
		q.mu.Unlock()
		return q.release, nil
	}
	f, w := q.enqueueLocked(user)
	q.mu.Unlock()

	select {
	case <-w.ready:
		return q.release, nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.granted { // given a seat while ctx ended: pass it on
		q.releaseLocked()
		return nil, ctx.Err()
	}
	f.waiting = slices.DeleteFunc(f.waiting, func(o *waiter) bool { return o == w })
	if len(f.waiting) == 0 {
		q.dropLocked(f)
	}
	return nil, ctx.Err()
}

// enqueueLocked queues a request of user at the end of the user's flow.
func (q *fairQueue) enqueueLocked(user string) (*flow, *waiter) {
	w := &waiter{ready: make(chan struct{})}
	f := q.flows[user]
	if f == nil {
		f = &flow{user: user}
		q.flows[user] = f
		// Newcomers go just before the next flow served, so they are
		// served only after every flow that was already waiting.
		q.ring = slices.Insert(q.ring, q.next, f)
		q.next = (q.next + 1) % len(q.ring)
	}
	f.waiting = append(f.waiting, w)
	return f, w
}

func (q *fairQueue) release() {
	q.mu.Lock()
	q.releaseLocked()
	q.mu.Unlock()
}

// releaseLocked gives a freed seat to the first request of the next flow
// in turn, or keeps it free when none waits.
func (q *fairQueue) releaseLocked() {
	if len(q.ring) == 0 {
		q.free++
		return
	}
	f := q.ring[q.next]
	w := f.waiting[0]
	f.waiting = f.waiting[1:]
	w.granted = true
	close(w.ready)
	if len(f.waiting) == 0 {
		q.dropLocked(f)
	} else {
		q.next = (q.next + 1) % len(q.ring)
	}
}

// dropLocked removes a flow whose queue is empty, keeping the turn of the
// flow after it.
func (q *fairQueue) dropLocked(f *flow) {
	i := slices.Index(q.ring, f)
	q.ring = slices.Delete(q.ring, i, i+1)
	delete(q.flows, f.user)
	switch {
	case len(q.ring) == 0:
		q.next = 0
	case i < q.next:
		q.next--
	case q.next >= len(q.ring):
		q.next = 0
	}
}

// queueWaitContext bounds a request's queue wait as kube-apiserver does:
// a quarter of the request's timeout, at most a minute.
func queueWaitContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, min(timeout/4, maxQueueWait))
}

// execute takes an execution seat for the request's user, as
// kube-apiserver's priority and fairness filter: a member of
// system:masters is exempt (kube-apiserver's exempt priority level) and
// executes at once without a seat; anyone else queues (fairQueue) for at
// most a quarter of the request timeout, after which, or when the request
// ends first, the request has been answered 429 with Retry-After and ok
// is false.
func (a *API) execute(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	user, known := auth.UserFrom(r.Context())
	if known && slices.Contains(user.Groups, auth.GroupMasters) {
		return func() {}, true
	}
	ctx, cancel := queueWaitContext(r.Context(), a.cfg.RequestTimeout)
	defer cancel()
	release, err := a.seats.acquire(ctx, user.Name)
	if err != nil {
		WriteStatus(w, tooManyRequests())
		return nil, false
	}
	return release, true
}
