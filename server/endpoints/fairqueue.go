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

// activeFor is how long a user counts as active after its last request
// began or ended: a user sending one request after another, with a
// round trip between them, keeps its share of the seats.
const activeFor = time.Second

// fairQueue is the execution limit in the manner of kube-apiserver's API
// priority and fairness, with one priority level and one flow per user:
// at most seats requests execute at once; the others wait in their user's
// FIFO queue, and a freed seat goes to the queues in turn (round robin
// over the users that have requests waiting), so that one user's many
// queued requests delay another user's request by at most one dispatch
// each. How long a user's queue may grow is the in-flight limit's per-user
// share (inFlight), which admits requests before they queue here.
//
// Beyond kube-apiserver, a user executes at most its share: alone, every
// seat; while other users are active (executing, waiting, or done within
// activeFor), the CPUs (GOMAXPROCS, at most seats) divided by the active
// users, at least one. So while another user is active, a flooding user
// leaves that user's part free instead of filling it in the gaps between
// its requests, and the other user's request starts at once and runs
// beside no more of the flood's than there are CPUs for: the CPU, not
// only the queue, is shared. (The extra seats a user alone gets keep the
// CPUs busy while its requests wait for etcd; with others active, they
// would only slow everyone's requests down.) This is not
// work-conserving: a part kept for an active user stays free while that
// user thinks.
//
// A write's seat may stay taken after the request returned, while its
// watch event is delivered (a hold, see deliveryHold). A hold is CPU
// already committed, not a request that must finish: when a user under
// its share waits and no seat is free, the oldest hold of a user over
// its share gives its seat up at once (yields) instead of at its end.
// The yielded hold still counts against its user's share until it ends,
// so the flooding user admits nothing more meanwhile, while the calm
// user's request starts without waiting out deliveries it did not cause.
//
// It is safe for concurrent use; mu is never held while a request is
// served.
type fairQueue struct {
	mu    sync.Mutex
	seats int
	// shared is what the active users share while more than one is:
	// min(seats, GOMAXPROCS).
	shared int
	free   int              // seats not executing a request
	flows  map[string]*flow // active users
	ring   []*flow          // the flows with requests waiting, in dispatch order
	next   int              // index in ring of the next flow served
	holds  []*heldSeat      // seats kept after their requests returned, oldest first
	now    func() time.Time
	// pruned is when inactive flows were last dropped from flows.
	pruned time.Time
	// onSharing, if set, is told under mu when more than one user
	// becomes active (true) and when no longer (false); sharing is what
	// it was last told.
	onSharing func(bool)
	sharing   bool
}

type flow struct {
	user      string
	waiting   []*waiter // FIFO
	executing int
	seen      time.Time // when a request of the user last began or ended
}

// heldSeat is a seat kept by a returned write while its event is
// delivered (counted in its flow's executing until the hold ends).
type heldSeat struct {
	f       *flow
	yielded bool // the seat was given to a waiting request before the hold ended
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
	return &fairQueue{seats: seats, shared: min(seats, runtime.GOMAXPROCS(0)), free: seats, flows: map[string]*flow{}, now: time.Now}
}

// acquire takes an execution seat for a request of user, waiting in the
// user's queue until one is given to it or ctx ends (then it returns
// ctx's error and holds no seat). release gives the seat back after hold
// (at once for 0; meanwhile the seat is a hold that may yield); it must be
// called exactly once.
func (q *fairQueue) acquire(ctx context.Context, user string) (release func(hold time.Duration), err error) {
	q.mu.Lock()
	f := q.flowLocked(user)
	if q.free > 0 && len(f.waiting) == 0 && f.executing < q.shareLocked() {
		q.free--
		f.executing++
		q.mu.Unlock()
		return q.releaser(f), nil
	}
	w := q.enqueueLocked(f)
	q.dispatchLocked() // a hold may yield its seat to it
	q.mu.Unlock()

	select {
	case <-w.ready:
		return q.releaser(f), nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.granted { // given a seat while ctx ended: pass it on
		q.releaseLocked(f)
		return nil, ctx.Err()
	}
	f.waiting = slices.DeleteFunc(f.waiting, func(o *waiter) bool { return o == w })
	if len(f.waiting) == 0 {
		q.unringLocked(f)
	}
	return nil, ctx.Err()
}

// taken is how many seats are taken.
func (q *fairQueue) taken() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.seats - q.free
}

// flowLocked returns user's flow, made active now.
func (q *fairQueue) flowLocked(user string) *flow {
	now := q.now()
	q.pruneLocked(now)
	f := q.flows[user]
	if f == nil {
		f = &flow{user: user}
		q.flows[user] = f
		q.noteSharingLocked()
	}
	f.seen = now
	return f
}

// noteSharingLocked tells onSharing when whether more than one user is
// active has changed.
func (q *fairQueue) noteSharingLocked() {
	if sharing := len(q.flows) > 1; sharing != q.sharing {
		q.sharing = sharing
		if q.onSharing != nil {
			q.onSharing(sharing)
		}
	}
}

// pruneLocked drops the flows of users no longer active, at most a few
// times per activeFor (it walks every flow).
func (q *fairQueue) pruneLocked(now time.Time) {
	if now.Sub(q.pruned) < activeFor/8 {
		return
	}
	q.pruned = now
	for user, f := range q.flows {
		if f.executing == 0 && len(f.waiting) == 0 && now.Sub(f.seen) > activeFor {
			delete(q.flows, user)
		}
	}
	q.noteSharingLocked()
}

// shareLocked is how many seats one user may execute at once.
func (q *fairQueue) shareLocked() int {
	if len(q.flows) <= 1 {
		return q.seats
	}
	return max(1, q.shared/len(q.flows))
}

// enqueueLocked queues a request at the end of flow f.
func (q *fairQueue) enqueueLocked(f *flow) *waiter {
	w := &waiter{ready: make(chan struct{})}
	if len(f.waiting) == 0 {
		// Newcomers go just before the next flow served, so they are
		// served only after every flow that was already waiting.
		q.ring = slices.Insert(q.ring, q.next, f)
		q.next = (q.next + 1) % len(q.ring)
	}
	f.waiting = append(f.waiting, w)
	return w
}

// releaser returns the release function of a seat held by flow f.
func (q *fairQueue) releaser(f *flow) func(hold time.Duration) {
	return func(hold time.Duration) {
		q.mu.Lock()
		defer q.mu.Unlock()
		if hold <= 0 {
			q.releaseLocked(f)
			return
		}
		h := &heldSeat{f: f}
		q.holds = append(q.holds, h)
		time.AfterFunc(hold, func() { // the timer owns the hold
			q.mu.Lock()
			defer q.mu.Unlock()
			q.holds = slices.DeleteFunc(q.holds, func(o *heldSeat) bool { return o == h })
			if h.yielded {
				f.executing--
				f.seen = q.now()
				q.dispatchLocked() // f may be under its share again
				return
			}
			q.releaseLocked(f)
		})
	}
}

// yieldLocked gives up the seat of the oldest hold of a flow executing
// more than share, and reports whether there was one.
func (q *fairQueue) yieldLocked(share int) bool {
	for _, h := range q.holds {
		if !h.yielded && h.f.executing > share {
			h.yielded = true
			q.free++
			return true
		}
	}
	return false
}

// releaseLocked frees a seat of flow f and dispatches.
func (q *fairQueue) releaseLocked(f *flow) {
	f.executing--
	f.seen = q.now()
	q.free++
	q.pruneLocked(f.seen)
	q.dispatchLocked()
}

// dispatchLocked gives free seats to the first requests of the flows in
// turn, skipping a flow that executes its share already; a seat no
// waiting flow may take stays free.
func (q *fairQueue) dispatchLocked() {
	share := q.shareLocked()
	for len(q.ring) > 0 {
		i := slices.IndexFunc(q.ring[q.next:], func(f *flow) bool { return f.executing < share })
		if i >= 0 {
			i += q.next
		} else if i = slices.IndexFunc(q.ring[:q.next], func(f *flow) bool { return f.executing < share }); i < 0 {
			return
		}
		if q.free == 0 && !q.yieldLocked(share) {
			return
		}
		f := q.ring[i]
		w := f.waiting[0]
		f.waiting = f.waiting[1:]
		f.executing++
		q.free--
		w.granted = true
		close(w.ready)
		q.next = (i + 1) % len(q.ring)
		if len(f.waiting) == 0 {
			q.unringLocked(f)
		}
	}
}

// unringLocked removes a flow whose queue is empty from the ring, keeping
// the turn of the flow after it.
func (q *fairQueue) unringLocked(f *flow) {
	i := slices.Index(q.ring, f)
	q.ring = slices.Delete(q.ring, i, i+1)
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
// is false. release(hold) gives the seat back, after hold for a write
// whose event is still being delivered (fairQueue, holds).
func (a *API) execute(w http.ResponseWriter, r *http.Request) (release func(hold time.Duration), ok bool) {
	user, known := auth.UserFrom(r.Context())
	if known && slices.Contains(user.Groups, auth.GroupMasters) {
		return func(time.Duration) {}, true
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
