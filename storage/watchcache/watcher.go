package watchcache

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/json"

	"github.com/objwatch/objwatch/storage"
)

// Event is one change in the cache's history, shared by every watcher.
type Event struct {
	Type storage.EventType // Put or Delete
	Rev  int64
	Obj  *Object // new state; for Delete the last state, stamped with Rev
	Prev *Object // state before a Put, nil on create
	At   time.Time

	// frames memoizes each wire encoding, computed by the first watcher
	// that needs it.
	frames [numFrames]atomic.Pointer[[]byte]
	once   sync.Once
	left   *Object // Prev stamped with Rev, for watchers it leaves
}

func (e *Event) at() time.Time { return e.At }

// Wire event types.
const (
	Added    = "ADDED"
	Modified = "MODIFIED"
	Deleted  = "DELETED"
	Bookmark = "BOOKMARK"
)

const (
	frameAdded = iota
	frameModified
	frameDeleted
	frameLeft
	numFrames
)

// Item is what a watcher delivers.
type Item struct {
	Type string
	// Object is the object to send (nil for bookmarks).
	Object *Object
	// Rev is the item's revision (for bookmarks, the revision every
	// earlier item is at or below).
	Rev int64
	// InitialEnd marks the bookmark after the synthetic initial events.
	InitialEnd bool

	event *Event
	frame int
}

// Frame returns the encoded wire event, shared by every watcher that sends
// it: {"type":...,"object":...,"commitTime":...}\n. commitTime (when the
// cache received the change from etcd, RFC 3339 with nanoseconds) is absent
// for synthetic initial events; Kubernetes clients ignore the field.
func (it Item) Frame() []byte {
	if it.event == nil {
		return frame(it.Type, it.Object.JSON, time.Time{})
	}
	p := &it.event.frames[it.frame]
	if b := p.Load(); b != nil {
		return *b
	}
	b := frame(it.Type, it.Object.JSON, it.event.At)
	p.Store(&b)
	return b
}

// Prev is the object's state before the change the item reports: nil for
// a create, a synthetic initial event and a bookmark.
func (it Item) Prev() *Object {
	if it.event == nil {
		return nil
	}
	return it.event.Prev
}

// At is when the cache received the item's change from etcd (zero for
// synthetic initial events and bookmarks): the frame's commitTime.
func (it Item) At() time.Time {
	if it.event == nil {
		return time.Time{}
	}
	return it.event.At
}

func frame(typ string, obj []byte, at time.Time) []byte {
	return appendFrame(make([]byte, 0, len(obj)+80), typ, obj, at)
}

func appendFrame(b []byte, typ string, obj []byte, at time.Time) []byte {
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","object":`...)
	b = append(b, obj...)
	if !at.IsZero() {
		b = append(b, `,"commitTime":"`...)
		b = at.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	return append(b, "}\n"...)
}

// translate gives the item a watcher with filter f sees for e: an object
// entering the selection is ADDED, one leaving it DELETED (its last
// matching state at the event's revision), others unchanged; ok is false
// when the event does not concern the watcher.
func (e *Event) translate(match func(*Object) bool) (Item, bool) {
	cur := match(e.Obj)
	if e.Type == storage.Delete {
		return Item{Type: Deleted, Object: e.Obj, Rev: e.Rev, event: e, frame: frameDeleted}, cur
	}
	typ, left, ok := PutEvent(cur, e.Prev != nil && match(e.Prev))
	switch {
	case !ok:
		return Item{}, false
	case left:
		return Item{Type: Deleted, Object: e.leftObject(), Rev: e.Rev, event: e, frame: frameLeft}, true
	case typ == Added:
		return Item{Type: Added, Object: e.Obj, Rev: e.Rev, event: e, frame: frameAdded}, true
	}
	return Item{Type: Modified, Object: e.Obj, Rev: e.Rev, event: e, frame: frameModified}, true
}

// PutEvent is the rule of selective watches, for every watch served from
// the cache or from etcd: a write of an object is, to a watch whose
// selection matches its new state (cur) and its previous one (prev; false
// when it had none), ADDED when the object enters the selection, MODIFIED
// while it stays in it, and DELETED when it leaves, sent with its previous
// state (left). ok is false when the watch selects neither.
func PutEvent(cur, prev bool) (typ string, left, ok bool) {
	switch {
	case cur && prev:
		return Modified, false, true
	case cur:
		return Added, false, true
	case prev:
		return Deleted, true, true
	}
	return "", false, false
}

// leftObject is Prev with its resourceVersion set to the event's.
func (e *Event) leftObject() *Object {
	e.once.Do(func() { e.left = stamped(e.Prev, e.Rev) })
	return e.left
}

// stamped is a copy of o whose revision and metadata.resourceVersion are
// rev.
func stamped(o *Object, rev int64) *Object {
	s := &Object{Key: o.Key, Namespace: o.Namespace, Name: o.Name, Labels: o.Labels, Fields: o.Fields, Rev: rev, JSON: o.JSON}
	var m map[string]any
	if err := json.Unmarshal(o.JSON, &m); err == nil {
		if md, ok := m["metadata"].(map[string]any); ok {
			md["resourceVersion"] = strconv.FormatInt(rev, 10)
		}
		if b, err := json.Marshal(m); err == nil {
			s.JSON = b
		}
	}
	return s
}

// WatchOptions say where a watch starts and what it sees.
type WatchOptions struct {
	Filter Filter
	// From: deliver events with a revision after From. Ignored with Initial.
	From int64
	// Initial: start with a synthetic ADDED for every matching object at the
	// cache's current revision, then follow. InitialEnd adds the
	// initial-events-end bookmark after them.
	Initial, InitialEnd bool
	// BookmarkEvery > 0 enables bookmarks at that interval, and one shortly
	// before Deadline.
	BookmarkEvery time.Duration
	Deadline      time.Time
	// Hold, if set, is asked of each item of the history replayed and of
	// each live one before it is queued: true drops it (a watch's own filter on the change, such as a field
	// mask). It runs under the cache's lock, once per watcher and event,
	// so it must be quick, must not block and must not call the cache;
	// what it computes once per event it should share among watchers.
	Hold func(Item) bool
}

// Watcher is one watch on the cache. Its owner must call Stop; Next must
// be called from one goroutine at a time.
type Watcher struct {
	c     *Cache
	match func(*Object) bool // the compiled filter
	hold  func(Item) bool    // WatchOptions.Hold
	// namespace is the filter's namespace ("": all), its index in
	// Cache.watchersIn while the watcher is open.
	namespace string
	// batch is what Next is handing out (initially the replay); queue
	// collects live items meanwhile. An idle watcher holds no buffer.
	batch  []Item
	mu     sync.Mutex // guards queue; taken under Cache.mu, never the reverse
	queue  []Item
	notify chan struct{} // capacity 1: "queue is not empty"
	done   chan struct{}
	err    error // set before done is closed

	bookmarkEvery time.Duration
	nextBookmark  time.Time
	deadline      time.Time
}

// Watch starts a watch. A From older than the history is ErrCompacted (a
// *storage.CompactedError).
func (c *Cache) Watch(ctx context.Context, o WatchOptions) (*Watcher, error) {
	if err := c.WaitFor(ctx, 0); err != nil {
		return nil, err
	}
	c.mu.RLock()
	feedErr := c.feedErr
	c.mu.RUnlock()
	if feedErr != nil {
		return nil, feedErr
	}
	w := &Watcher{
		c: c, match: o.Filter.matcher(), hold: o.Hold, namespace: o.Filter.Namespace, notify: make(chan struct{}, 1), done: make(chan struct{}),
		bookmarkEvery: o.BookmarkEvery, deadline: o.Deadline,
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if o.Initial {
		nsPrefix := c.cfg.Prefix + o.Filter.Namespace
		if o.Filter.Namespace != "" {
			nsPrefix += "/"
		}
		c.objects.AscendGreaterOrEqual(&Object{Key: nsPrefix}, func(obj *Object) bool {
			if !strings.HasPrefix(obj.Key, nsPrefix) {
				return false
			}
			if w.match(obj) {
				w.batch = append(w.batch, Item{Type: Added, Object: obj, Rev: obj.Rev})
			}
			return true
		})
		if o.InitialEnd {
			w.batch = append(w.batch, Item{Type: Bookmark, Rev: c.rev, InitialEnd: true})
		}
	} else {
		if o.From < c.oldest {
			return nil, &storage.CompactedError{Requested: o.From, Compacted: c.oldest}
		}
		for _, e := range c.history {
			if e.Rev <= o.From {
				continue
			}
			if it, ok := e.translate(w.match); ok && (w.hold == nil || !w.hold(it)) {
				w.batch = append(w.batch, it)
			}
		}
	}
	w.scheduleBookmark(time.Now())
	c.watchers[w] = struct{}{}
	in := c.watchersIn[w.namespace]
	if in == nil {
		in = map[*Watcher]struct{}{}
		c.watchersIn[w.namespace] = in
	}
	in[w] = struct{}{}
	return w, nil
}

func (w *Watcher) scheduleBookmark(now time.Time) {
	if w.bookmarkEvery <= 0 {
		return
	}
	next := now.Add(w.bookmarkEvery)
	if last := w.deadline.Add(-2 * time.Second); !w.deadline.IsZero() && last.After(now) && last.Before(next) {
		next = last
	}
	w.nextBookmark = next
}

// offer_locked hands e to the watcher without blocking; a watcher with
// Buffer items already waiting is ended with ErrTooSlow and its queue
// dropped: its client resumes from the last item it received, so the
// queued ones would be replayed from history anyway, and a client that
// never reads again would otherwise pin them until the watch is stopped.
func (w *Watcher) offer_locked(e *Event) {
	it, ok := e.translate(w.match)
	if !ok || (w.hold != nil && w.hold(it)) {
		return
	}
	if !w.push(it, true) {
		w.drop()
		w.c.end_locked(w, ErrTooSlow)
	}
}

// drop empties the queue of a watcher whose client will not read it.
func (w *Watcher) drop() {
	w.mu.Lock()
	w.c.queued.Add(-int64(len(w.queue)))
	w.queue = nil
	w.mu.Unlock()
}

// push queues it; when the queue is full it fails (strict) or drops it.
func (w *Watcher) push(it Item, strict bool) bool {
	w.mu.Lock()
	full := len(w.queue) >= w.c.cfg.Buffer || strict && w.overShare_locked()
	if !full {
		w.queue = append(w.queue, it)
		w.c.queued.Add(1)
	}
	w.mu.Unlock()
	if full {
		return !strict
	}
	select {
	case w.notify <- struct{}{}:
	default:
	}
	return true
}

// overShare_locked reports whether the cache's watchers hold more than
// MaxQueued events together and w more than its share of them (at least
// MinShare). It runs under Cache.mu (the watcher count) and w.mu.
func (w *Watcher) overShare_locked() bool {
	limit := w.c.cfg.MaxQueued
	return limit > 0 && w.c.queued.Load() >= int64(limit) && len(w.queue) >= max(w.c.cfg.MinShare, limit/max(1, len(w.c.watchers)))
}

// bookmarks_locked sends due bookmarks at the cache's revision; a full
// buffer just skips one.
func (c *Cache) bookmarks_locked(now time.Time) {
	for w := range c.watchers {
		if w.bookmarkEvery <= 0 || now.Before(w.nextBookmark) {
			continue
		}
		w.push(Item{Type: Bookmark, Rev: c.rev}, false)
		w.scheduleBookmark(now)
	}
}

func (c *Cache) end_locked(w *Watcher, err error) {
	if _, ok := c.watchers[w]; !ok {
		return
	}
	delete(c.watchers, w)
	delete(c.watchersIn[w.namespace], w)
	if len(c.watchersIn[w.namespace]) == 0 {
		delete(c.watchersIn, w.namespace)
	}
	w.err = err
	close(w.done)
}

// Next returns the next item, waiting for one. After the watcher ends it
// returns the items still waiting (after ErrTooSlow only those it had
// already taken from the dropped queue), then the reason (ErrTooSlow, a
// relist's ErrCompacted, or context.Canceled after Stop).
func (w *Watcher) Next(ctx context.Context) (Item, error) {
	for {
		if it, ok := w.TryNext(); ok {
			return it, nil
		}
		if err := w.Wait(ctx, nil); err != nil {
			return Item{}, err
		}
	}
}

// TryNext returns the next item if one is waiting.
func (w *Watcher) TryNext() (Item, bool) {
	if len(w.batch) == 0 {
		w.mu.Lock()
		w.batch, w.queue = w.queue, nil
		w.c.queued.Add(-int64(len(w.batch)))
		w.mu.Unlock()
		if len(w.batch) == 0 {
			return Item{}, false
		}
	}
	it := w.batch[0]
	w.batch[0] = Item{}
	w.batch = w.batch[1:]
	return it, true
}

// Settle waits until the cache is not applying a revision: the cache
// queues a revision's events to its watchers one by one under its lock,
// so a TryNext between two of them sees the revision in part; after
// Settle every event of a revision the watcher has begun is queued. For
// the watcher's goroutine, at the end of a watch (it takes the cache's
// lock).
func (w *Watcher) Settle() {
	w.c.mu.RLock()
	w.c.mu.RUnlock() // a barrier: the cache applies a revision under its lock
}

// Wait blocks until an item may be waiting, timeout fires (nil error), the
// watcher ends (its reason) or ctx ends.
func (w *Watcher) Wait(ctx context.Context, timeout <-chan time.Time) error {
	if len(w.batch) > 0 {
		return nil
	}
	select {
	case <-w.notify:
		return nil
	case <-timeout:
		return nil
	case <-w.done:
		if w.Pending() > 0 {
			return nil // deliver what was queued before the end
		}
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Pending is the number of items waiting to be read.
func (w *Watcher) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.batch) + len(w.queue)
}

// Stop ends the watch.
func (w *Watcher) Stop() {
	w.c.mu.Lock()
	w.c.end_locked(w, context.Canceled)
	w.c.mu.Unlock()
	w.drop()
}

// Watchers is the number of open watchers.
func (c *Cache) Watchers() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.watchers)
}

// InterestedWatchers is how many open watchers an event of an object in
// namespace may be delivered to, counted as kube-apiserver's work
// estimator counts them: the watchers of all namespaces and, for a
// namespace other than "", those of that namespace (whatever else their
// filters ask). For "" (a cluster-scoped object) it is every watcher.
func (c *Cache) InterestedWatchers(namespace string) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if namespace == "" {
		return len(c.watchers)
	}
	return len(c.watchersIn[""]) + len(c.watchersIn[namespace])
}
