package informer

import (
	"sync"
	"time"

	"github.com/objwatch/objwatch/client"
)

// Handler receives an informer's notifications. Each handler has its own
// goroutine and queue: its methods are called one at a time, never
// concurrently with each other, and a slow handler delays only itself.
//
// Objects passed to a handler are shared with the cache (with
// Options.Compact, with the other handlers): never modify them.
type Handler[T client.Object] interface {
	// OnAdd: obj appeared. initial is true for objects of the initial list
	// (and of the replay a handler added later receives).
	OnAdd(obj T, initial bool)
	// OnUpdate: an object changed from old to new (same UID). With a
	// resync period, old == new for the periodic redelivery.
	OnUpdate(old, new T)
	// OnDelete: obj is gone. If finalStateUnknown, the informer missed the
	// deletion (it happened while the watch was down and the server had
	// forgotten the history) and obj is the last state it saw.
	OnDelete(obj T, finalStateUnknown bool)
}

// GoneHandler is a Handler that also wants to know when the server
// answered a watch with 410 Gone: it had forgotten resourceVersion, the
// point the watch resumed from. The informer then relists, and the
// handler is told, after OnGone, what the relist found changed (updates,
// adds, and deletes with finalStateUnknown). Most handlers need not know;
// a recording does (Record).
type GoneHandler interface {
	OnGone(resourceVersion string)
}

// HandlerFuncs adapts functions to a Handler (and a GoneHandler); nil
// functions are skipped.
type HandlerFuncs[T client.Object] struct {
	Add    func(obj T, initial bool)
	Update func(old, new T)
	Delete func(obj T, finalStateUnknown bool)
	Gone   func(resourceVersion string)
}

var _ Handler[client.Object] = HandlerFuncs[client.Object]{}

func (f HandlerFuncs[T]) OnAdd(obj T, initial bool) {
	if f.Add != nil {
		f.Add(obj, initial)
	}
}

func (f HandlerFuncs[T]) OnUpdate(old, new T) {
	if f.Update != nil {
		f.Update(old, new)
	}
}

func (f HandlerFuncs[T]) OnDelete(obj T, finalStateUnknown bool) {
	if f.Delete != nil {
		f.Delete(obj, finalStateUnknown)
	}
}

// wantsGone reports whether h is told of 410s: a GoneHandler, but a
// HandlerFuncs only with its Gone set.
func wantsGone[T client.Object](h Handler[T]) bool {
	if f, ok := h.(HandlerFuncs[T]); ok {
		return f.Gone != nil
	}
	_, ok := h.(GoneHandler)
	return ok
}

func (f HandlerFuncs[T]) OnGone(resourceVersion string) {
	if f.Gone != nil {
		f.Gone(resourceVersion)
	}
}

// HandlerOptions tune one handler.
type HandlerOptions struct {
	// Name labels the handler's metrics; default "handler-<n>". Names are
	// unique per informer.
	Name string
	// Bound is how many notifications may queue for the handler before
	// new changes to an object that already has one queued are merged
	// into it (default 1000). Below the bound the handler sees every
	// change; above it, it may skip intermediate states of an object, and
	// its queue holds at most Bound plus about two entries per object.
	Bound int
	// Resync, if positive, redelivers every cached object as
	// OnUpdate(obj, obj) this often (objects with a notification queued
	// are skipped), for handlers that reconcile against outside state.
	// 0 takes the informer's default (a Factory's DefaultResync; none
	// outside a factory); negative: never.
	Resync time.Duration
}

const defaultBound = 1000

type kind uint8

const (
	kindAdd kind = iota
	kindUpdate
	kindDelete
	kindGone // a 410 (GoneHandler); its key is the zero Key, no object's
)

// notification is one queued call of a handler method.
type notification[T client.Object] struct {
	kind kind
	old  T // kindUpdate
	obj  T // the new state; for kindDelete the final one
	// blob, from a compact cache, is obj still encoded (and old, for a
	// resync): replays and resyncs are decoded by the handler's goroutine
	// when delivered, not by the processor while it holds the informer.
	blob    []byte
	key     Key
	initial bool   // kindAdd
	unknown bool   // kindDelete: final state unknown
	gone    string // kindGone: the resourceVersion the server forgot
	resync  bool   // kindUpdate from a resync
	dead    bool   // merged away
	stamp   stamp
}

// queue is one handler's notification queue: a FIFO ring that never
// blocks the pusher. Over its bound, a notification for an object that
// already has one queued is merged into that one (the handler then sees
// the newest state, never an older one, in order); an add followed by a
// delete cancel out. Merging into the newest pending notification of the
// same key keeps every object's notifications in order.
type queue[T client.Object] struct {
	mu        sync.Mutex
	ring      []notification[T]
	head, n   int            // ring[head] is the oldest of n entries (dead included)
	first     uint64         // sequence number of ring[head]
	last      map[Key]uint64 // newest pending notification per key
	live      int            // entries not dead
	peak      int            // the most live entries since last was made
	bound     int
	decode    func([]byte) T // the store's decoder, for the blobs of a compact cache
	wake      chan struct{}  // cap 1: something was pushed
	delivered uint64         // every notification below this was handled
	syncAt    uint64         // the handler is synced once delivered reaches it...
	synced    bool           // ...and the informer marked the sync point
	coalesced uint64
	total     uint64 // notifications delivered
}

func newQueue[T client.Object](bound int) *queue[T] {
	if bound <= 0 {
		bound = defaultBound
	}
	return &queue[T]{ring: make([]notification[T], 16), last: map[Key]uint64{}, bound: bound, wake: make(chan struct{}, 1)}
}

func (q *queue[T]) at(seq uint64) *notification[T] {
	return &q.ring[(q.head+int(seq-q.first))%len(q.ring)]
}

// push queues n; it never blocks.
func (q *queue[T]) push(n notification[T]) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if seq, ok := q.last[n.key]; ok {
		p := q.at(seq)
		if n.resync {
			return // the handler is about to see the object anyway
		}
		if q.live >= q.bound && q.merge(p, n) {
			q.coalesced++
			return
		}
	}
	if q.n == len(q.ring) {
		q.resize(2 * len(q.ring))
	}
	q.ring[(q.head+q.n)%len(q.ring)] = n
	q.last[n.key] = q.first + uint64(q.n)
	q.n++
	q.live++
	q.peak = max(q.peak, q.live)
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// materialize decodes a notification's blob, if it has one.
func (n *notification[T]) materialize(decode func([]byte) T) {
	if n.blob == nil {
		return
	}
	n.obj = decode(n.blob)
	if n.kind == kindUpdate { // a resync: the same state twice
		n.old = n.obj
	}
	n.blob = nil
}

// merge folds n into p, the newest pending notification for the same key,
// if the result tells the handler the same story with fewer steps.
func (q *queue[T]) merge(p *notification[T], n notification[T]) bool {
	p.materialize(q.decode)
	switch {
	case p.kind == kindAdd && n.kind == kindUpdate,
		p.kind == kindUpdate && n.kind == kindUpdate:
		p.obj = n.obj
		p.resync = false
	case p.kind == kindAdd && n.kind == kindDelete:
		// The handler never saw the object: nothing to tell.
		p.dead = true
		p.obj = *new(T)
		delete(q.last, n.key)
		q.live--
	case p.kind == kindUpdate && n.kind == kindDelete:
		p.kind, p.obj, p.unknown, p.old = kindDelete, n.obj, n.unknown, *new(T)
	default:
		return false // e.g. a delete then an add of a new object
	}
	return true
}

func (q *queue[T]) resize(size int) {
	ring := make([]notification[T], size)
	for i := range q.n {
		ring[i] = q.ring[(q.head+i)%len(q.ring)]
	}
	q.ring, q.head = ring, 0
}

// pop returns the oldest live notification and its sequence number,
// waiting until there is one; it returns false once stop or removed is
// closed, even with notifications queued.
func (q *queue[T]) pop(stop, removed <-chan struct{}) (notification[T], uint64, bool) {
	for {
		select {
		case <-stop:
			return notification[T]{}, 0, false
		case <-removed:
			return notification[T]{}, 0, false
		default:
		}
		q.mu.Lock()
		for q.n > 0 {
			seq := q.first
			n := q.ring[q.head]
			q.ring[q.head] = notification[T]{} // release the objects
			q.head = (q.head + 1) % len(q.ring)
			q.first++
			q.n--
			if len(q.ring) > 64 && q.n < len(q.ring)/4 {
				q.resize(len(q.ring) / 2)
			}
			if n.dead {
				q.delivered = seq + 1
				continue
			}
			q.live--
			if q.last[n.key] == seq {
				delete(q.last, n.key)
			}
			if q.live == 0 && q.peak > 1024 {
				// Maps never shrink: drop the one a large replay grew.
				q.last, q.peak = map[Key]uint64{}, 0
			}
			q.mu.Unlock()
			return n, seq, true
		}
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-stop:
			return notification[T]{}, 0, false
		case <-removed:
			return notification[T]{}, 0, false
		}
	}
}

// drop empties the queue, releasing the objects it holds.
func (q *queue[T]) drop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ring, q.head, q.n, q.live = make([]notification[T], 16), 0, 0, 0
	clear(q.last)
}

// handled records that the notification with sequence number seq was
// delivered.
func (q *queue[T]) handled(seq uint64) {
	q.mu.Lock()
	q.delivered = seq + 1
	q.total++
	q.mu.Unlock()
}

// markSynced makes the handler synced once everything queued so far has
// been delivered.
func (q *queue[T]) markSynced() {
	q.mu.Lock()
	q.syncAt = q.first + uint64(q.n)
	q.synced = true
	q.mu.Unlock()
}

func (q *queue[T]) hasSynced() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.synced && q.delivered >= q.syncAt
}

type queueStats struct {
	backlog              int
	delivered, coalesced uint64
}

func (q *queue[T]) stats() queueStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return queueStats{backlog: q.live, delivered: q.total, coalesced: q.coalesced}
}

// serve is a handler's goroutine: it delivers the queued notifications to
// h, one at a time and in order, until stop or removed is closed, then
// drops what is left. hm, if not nil, observes lag and call durations.
func (q *queue[T]) serve(h Handler[T], stop, removed <-chan struct{}, hm *handlerMetrics) {
	for {
		n, seq, ok := q.pop(stop, removed)
		if !ok {
			q.drop()
			return
		}
		n.materialize(q.decode)
		if hm == nil {
			deliver(h, n)
		} else {
			start := time.Now()
			hm.observeLag(n.stamp, start)
			deliver(h, n)
			hm.latency.Observe(time.Since(start).Seconds())
		}
		q.handled(seq)
	}
}

func deliver[T client.Object](h Handler[T], n notification[T]) {
	switch n.kind {
	case kindAdd:
		h.OnAdd(n.obj, n.initial)
	case kindUpdate:
		h.OnUpdate(n.old, n.obj)
	case kindDelete:
		h.OnDelete(n.obj, n.unknown)
	case kindGone:
		if g, ok := h.(GoneHandler); ok {
			g.OnGone(n.gone)
		}
	}
}

// Registration is a handler added to an informer.
type Registration[T client.Object] struct {
	name    string
	h       Handler[T]
	q       *queue[T]
	resync  time.Duration
	nextDue time.Time // guarded by the informer's mu

	removeOnce sync.Once
	removed    chan struct{} // closed by Remove
	done       chan struct{} // closed when the handler's goroutine ended
	inf        *SharedInformer[T]
}

// Name returns the handler's name.
func (r *Registration[T]) Name() string { return r.name }

// HasSynced reports whether the handler has been delivered every object of
// the informer's initial list (or, for a handler added later, of its
// replay).
func (r *Registration[T]) HasSynced() bool { return r.q.hasSynced() }

// Backlog returns how many notifications are queued for the handler.
func (r *Registration[T]) Backlog() int { return r.q.stats().backlog }

// Remove stops deliveries to the handler; queued notifications are
// dropped. It does not wait (so a handler may remove itself): Done is
// closed once the handler's last call returned. Calling it again does
// nothing.
func (r *Registration[T]) Remove() {
	r.removeOnce.Do(func() {
		r.inf.remove(r)
		close(r.removed)
		if m := &r.inf.metrics; m.lag != nil {
			m.removeHandler(r.name)
		}
	})
}

// Done is closed when no more calls of the handler will happen: after
// Remove, or when the informer stopped, once the current call returned.
func (r *Registration[T]) Done() <-chan struct{} { return r.done }
