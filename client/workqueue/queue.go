package workqueue

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/utils/clock"
)

// LowPriority is the priority of adds that bring no news: objects of an
// informer's initial list and periodic resyncs (controller-runtime's
// handler.LowPriority). Keys added with the default priority, 0, are
// handed out before them.
const LowPriority = -100

// AddOpts qualify an add.
type AddOpts struct {
	// Priority: higher first; FIFO within a priority. Adding a queued key
	// with a higher priority raises it; a lower one leaves it.
	Priority int
	// After delays the key: it becomes ready this long from now. A key
	// already ready stays ready; one waiting longer is made ready sooner.
	After time.Duration
	// RateLimited delays the key by its backoff (see Options): the
	// smaller of that and After, if After is positive (as in
	// controller-runtime's priority queue).
	RateLimited bool
}

// Options configure a Queue. The zero value is ready to use.
type Options struct {
	// Name labels the metrics (name="<Name>"); required with Metrics.
	Name string
	// Metrics, if set, receives the queue's metrics under client-go's
	// names (see the package documentation). New fails with an error
	// wrapping ErrDuplicateName if a queue of that name is registered
	// there; ShutDown unregisters them.
	Metrics prometheus.Registerer

	// BaseDelay and MaxDelay bound the per-key exponential backoff of
	// rate-limited adds: the n-th retry since the key's last Forget
	// waits BaseDelay*2^n, at most MaxDelay (defaults 5 ms and 1000 s,
	// as client-go's DefaultTypedControllerRateLimiter).
	BaseDelay, MaxDelay time.Duration
	// QPS and Burst are the overall token bucket that rate-limited adds
	// also wait for (defaults 10 and 100, as client-go). A negative QPS
	// turns it off.
	QPS   float64
	Burst int

	// Clock is for tests (default: the real clock).
	Clock clock.Clock
}

type state uint8

const (
	stateReady state = iota
	stateWaiting
	stateProcessing
)

// entry is one key's state. It sits in at most one of the heaps (index);
// while processing it is in neither, and dirty records an add meanwhile,
// with the best priority and earliest readiness asked for.
type entry[K comparable] struct {
	key      K
	state    state
	priority int
	seq      uint64    // FIFO order within a priority
	readyAt  time.Time // stateWaiting: when it becomes ready
	since    time.Time // stateReady: when it became ready; stateProcessing: when it was handed out (metrics only)
	index    int

	dirty         bool
	dirtyPriority int
	dirtyAt       time.Time // zero: ready at once
}

// maxFree bounds the entries a queue keeps for reuse.
const maxFree = 1024

// Queue is a work queue of keys. See the package documentation for its
// guarantees. All methods are safe for concurrent use. Its owner must call
// ShutDown or ShutDownWithDrain: they stop the queue's timer goroutine.
type Queue[K comparable] struct {
	clock     clock.Clock
	base, max time.Duration
	bucket    *rate.Limiter // nil: none
	metrics   *metrics      // nil: none

	// mu guards everything below. The timer goroutine and Collect take
	// it too; nothing is called with it held that could block.
	mu       sync.Mutex
	cond     sync.Cond // a key became ready, or shutdown
	items    map[K]*entry[K]
	free     []*entry[K]  // entries to reuse: Add then allocates nothing
	ready    entryHeap[K] // stateReady keys
	waiting  entryHeap[K] // stateWaiting keys
	seq      uint64
	inFlight int
	failures map[K]int
	shutdown bool
	idle     chan struct{} // closed when inFlight drops to 0 after shutdown; nil until asked for
	timer    bool          // the timer goroutine was started

	armed    atomic.Int64  // the timer's deadline (UnixNano), for tests
	kick     chan struct{} // cap 1: the earliest waiting key changed
	stopc    chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup // the timer goroutine
}

// New returns an empty queue. It fails only if its metrics cannot be
// registered.
func New[K comparable](opts Options) (*Queue[K], error) {
	q := &Queue[K]{
		clock:    opts.Clock,
		base:     opts.BaseDelay,
		max:      opts.MaxDelay,
		items:    make(map[K]*entry[K]),
		failures: make(map[K]int),
		kick:     make(chan struct{}, 1),
		stopc:    make(chan struct{}),
	}
	q.cond.L = &q.mu
	q.ready.less, q.waiting.less = byPriority[K], byReadyAt[K]
	if q.clock == nil {
		q.clock = clock.RealClock{}
	}
	if q.base <= 0 {
		q.base = 5 * time.Millisecond
	}
	if q.max <= 0 {
		q.max = 1000 * time.Second
	}
	if opts.QPS >= 0 {
		qps, burst := opts.QPS, opts.Burst
		if qps == 0 {
			qps = 10
		}
		if burst <= 0 {
			burst = 100
		}
		q.bucket = rate.NewLimiter(rate.Limit(qps), burst)
	}
	if opts.Metrics != nil {
		m, err := registerMetrics(q, opts.Name, opts.Metrics)
		if err != nil {
			return nil, err
		}
		q.metrics = m
	}
	return q, nil
}

// Add queues keys at the default priority, ready at once.
func (q *Queue[K]) Add(keys ...K) { q.AddWithOpts(AddOpts{}, keys...) }

// AddAfter queues key to be ready after d (at once if d <= 0).
func (q *Queue[K]) AddAfter(key K, d time.Duration) { q.AddWithOpts(AddOpts{After: d}, key) }

// AddRateLimited queues key after its backoff and counts a retry of it.
func (q *Queue[K]) AddRateLimited(key K) { q.AddWithOpts(AddOpts{RateLimited: true}, key) }

// AddWithOpts queues keys as opts say. Adds after shutdown are dropped.
func (q *Queue[K]) AddWithOpts(opts AddOpts, keys ...K) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	var now time.Time
	if opts.After > 0 || opts.RateLimited || q.metrics != nil {
		now = q.clock.Now()
	}
	for _, k := range keys {
		after := opts.After
		if opts.RateLimited {
			if d := q.when_locked(k, now); after <= 0 || d < after {
				after = d
			}
		}
		if after > 0 && q.metrics != nil {
			q.metrics.retries.Inc()
		}
		q.add_locked(k, opts.Priority, after, now)
	}
}

// when_locked is key's next backoff: the larger of its exponential one
// and the token bucket's delay.
func (q *Queue[K]) when_locked(key K, now time.Time) time.Duration {
	n := q.failures[key]
	q.failures[key] = n + 1
	d := q.max
	if n < 62 {
		if e := q.base << n; e > 0 && e < q.max && e>>n == q.base {
			d = e
		}
	}
	if q.bucket != nil {
		d = max(d, q.bucket.ReserveN(now, 1).DelayFrom(now))
	}
	return d
}

func (q *Queue[K]) add_locked(k K, priority int, after time.Duration, now time.Time) {
	e := q.items[k]
	if e == nil {
		if n := len(q.free); n > 0 {
			e, q.free = q.free[n-1], q.free[:n-1]
			*e = entry[K]{key: k, priority: priority, seq: q.seq, index: -1}
		} else {
			e = &entry[K]{key: k, priority: priority, seq: q.seq, index: -1}
		}
		q.seq++
		q.items[k] = e
		q.countAdd()
		if after > 0 {
			q.wait_locked(e, now.Add(after))
		} else {
			q.ready_locked(e, now)
		}
		return
	}
	switch e.state {
	case stateReady:
		if priority > e.priority {
			e.priority = priority
			heap.Fix(&q.ready, e.index)
		}
	case stateWaiting:
		e.priority = max(e.priority, priority)
		switch {
		case after <= 0:
			heap.Remove(&q.waiting, e.index)
			q.ready_locked(e, now)
		case now.Add(after).Before(e.readyAt):
			e.readyAt = now.Add(after)
			heap.Fix(&q.waiting, e.index)
			if e.index == 0 {
				q.kickTimer()
			}
		}
	case stateProcessing:
		var at time.Time
		if after > 0 {
			at = now.Add(after)
		}
		if !e.dirty {
			e.dirty, e.dirtyPriority, e.dirtyAt = true, priority, at
			q.countAdd()
			return
		}
		e.dirtyPriority = max(e.dirtyPriority, priority)
		if at.IsZero() || at.Before(e.dirtyAt) {
			e.dirtyAt = at
		}
	}
}

func (q *Queue[K]) countAdd() {
	if q.metrics != nil {
		q.metrics.adds.Inc()
	}
}

// ready_locked makes e ready (it is in no heap).
func (q *Queue[K]) ready_locked(e *entry[K], now time.Time) {
	e.state, e.since = stateReady, now
	heap.Push(&q.ready, e)
	q.cond.Signal()
}

// wait_locked makes e wait until at (it is in no heap), starting the
// timer goroutine if needed.
func (q *Queue[K]) wait_locked(e *entry[K], at time.Time) {
	e.state, e.readyAt = stateWaiting, at
	heap.Push(&q.waiting, e)
	if !q.timer {
		q.timer = true
		q.wg.Add(1)
		go q.runTimer()
	}
	if e.index == 0 {
		q.kickTimer()
	}
}

func (q *Queue[K]) kickTimer() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// runTimer moves waiting keys to the ready heap when they are due. It
// runs from the first delayed add until ShutDown.
func (q *Queue[K]) runTimer() {
	defer q.wg.Done()
	var t clock.Timer
	for {
		q.mu.Lock()
		now := q.clock.Now()
		for len(q.waiting.s) > 0 && !q.waiting.s[0].readyAt.After(now) {
			q.ready_locked(heap.Pop(&q.waiting).(*entry[K]), now)
		}
		var next time.Duration
		if len(q.waiting.s) > 0 {
			next = q.waiting.s[0].readyAt.Sub(now)
		}
		q.mu.Unlock()

		var tc <-chan time.Time
		if next > 0 {
			if t == nil {
				t = q.clock.NewTimer(next)
			} else {
				t.Reset(next)
			}
			tc = t.C()
			q.armed.Store(now.Add(next).UnixNano())
		}
		select {
		case <-q.stopc:
			if t != nil {
				t.Stop()
			}
			return
		case <-q.kick: // a stale fire later only makes the loop look again
		case <-tc:
		}
	}
}

// Get blocks until a key is ready and hands it out, highest priority
// first; the caller must call Done with it when finished. After ShutDown
// it returns shutdown true at once, also to callers already waiting.
func (q *Queue[K]) Get() (key K, shutdown bool) {
	key, _, shutdown = q.GetWithPriority()
	return key, shutdown
}

// GetWithPriority is Get, also returning the priority the key had.
func (q *Queue[K]) GetWithPriority() (key K, priority int, shutdown bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ready.s) == 0 && !q.shutdown {
		q.cond.Wait()
	}
	if q.shutdown {
		return key, 0, true
	}
	e := heap.Pop(&q.ready).(*entry[K])
	e.state = stateProcessing
	q.inFlight++
	if q.metrics != nil {
		now := q.clock.Now()
		q.metrics.latency.Observe(now.Sub(e.since).Seconds())
		e.since = now
	}
	return e.key, e.priority, false
}

// Done marks key finished. If it was added while being processed, it is
// queued again now. Done of a key not handed out does nothing.
func (q *Queue[K]) Done(key K) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.items[key]
	if e == nil || e.state != stateProcessing {
		return
	}
	q.inFlight--
	var now time.Time
	if q.metrics != nil || e.dirty {
		now = q.clock.Now()
	}
	if q.metrics != nil {
		q.metrics.work.Observe(now.Sub(e.since).Seconds())
	}
	if !e.dirty || q.shutdown {
		delete(q.items, key)
		if len(q.free) < maxFree {
			q.free = append(q.free, e)
		}
	} else {
		e.dirty = false
		e.priority = e.dirtyPriority
		e.seq = q.seq
		q.seq++
		if e.dirtyAt.After(now) {
			q.wait_locked(e, e.dirtyAt)
		} else {
			q.ready_locked(e, now)
		}
	}
	if q.inFlight == 0 && q.idle != nil {
		close(q.idle)
		q.idle = nil
	}
}

// Forget resets key's backoff: its next rate-limited add waits BaseDelay.
func (q *Queue[K]) Forget(key K) {
	q.mu.Lock()
	delete(q.failures, key)
	q.mu.Unlock()
}

// NumRequeues returns how many rate-limited adds key had since its last
// Forget.
func (q *Queue[K]) NumRequeues(key K) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.failures[key]
}

// Len returns how many keys are ready: what Get could hand out now.
// Keys waiting for their delay and keys being processed are not counted.
func (q *Queue[K]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready.s)
}

// ShuttingDown reports whether ShutDown or ShutDownWithDrain was called.
func (q *Queue[K]) ShuttingDown() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shutdown
}

// ShutDown stops the queue: Get returns shutdown true, to waiting callers
// too; keys not handed out are dropped, and so are later adds. It stops the
// timer goroutine and waits for it, and unregisters the metrics. Keys in
// flight may still be passed to Done. Calling it again does nothing.
func (q *Queue[K]) ShutDown() {
	q.mu.Lock()
	q.shutdown = true
	q.cond.Broadcast()
	q.mu.Unlock()
	q.stopOnce.Do(func() {
		close(q.stopc)
		q.wg.Wait()
		if q.metrics != nil {
			q.metrics.unregister()
		}
	})
}

// ShutDownWithDrain is ShutDown, then waits until every key handed out
// has been passed to Done, or ctx ends (returning its error).
func (q *Queue[K]) ShutDownWithDrain(ctx context.Context) error {
	q.ShutDown()
	q.mu.Lock()
	if q.inFlight == 0 {
		q.mu.Unlock()
		return nil
	}
	if q.idle == nil {
		q.idle = make(chan struct{})
	}
	idle := q.idle
	q.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// entryHeap is a heap of entries, keeping each entry's index.
type entryHeap[K comparable] struct {
	s    []*entry[K]
	less func(a, b *entry[K]) bool
}

func (h *entryHeap[K]) Len() int           { return len(h.s) }
func (h *entryHeap[K]) Less(i, j int) bool { return h.less(h.s[i], h.s[j]) }
func (h *entryHeap[K]) Swap(i, j int) {
	h.s[i], h.s[j] = h.s[j], h.s[i]
	h.s[i].index, h.s[j].index = i, j
}
func (h *entryHeap[K]) Push(x any) {
	e := x.(*entry[K])
	e.index = len(h.s)
	h.s = append(h.s, e)
}
func (h *entryHeap[K]) Pop() any {
	n := len(h.s) - 1
	e := h.s[n]
	h.s[n] = nil
	h.s = h.s[:n]
	e.index = -1
	return e
}

// byPriority orders ready keys: higher priority first, then FIFO.
func byPriority[K comparable](a, b *entry[K]) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	return a.seq < b.seq
}

// byReadyAt orders waiting keys by when they become ready.
func byReadyAt[K comparable](a, b *entry[K]) bool { return a.readyAt.Before(b.readyAt) }
