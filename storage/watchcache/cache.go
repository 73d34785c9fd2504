// Package watchcache keeps one resource's objects and recent changes in
// memory, fed by a single storage watch, and serves lists and watches from
// there: every change is decoded once, encoded once, and the same bytes go to
// every watcher whose filter matches.
//
// # Consistency
//
// The cache is a prefix of the store's history: at any moment it holds the
// state at Revision(), and every event up to it. Lists at "any" or
// "not older than R" are served once Revision() >= R; a consistent list first
// asks the store for its current revision and waits (bounded) until the cache
// has caught up, using progress notifications when nothing changes.
// Such lists may be paged (ListAt with a limit, at the revision read). A
// list at an exact revision R (a continue token's, or resourceVersionMatch
// Exact) waits until Revision() >= R and reads the snapshot covering R, if
// the cache still holds one (see Snapshots); otherwise the caller asks the
// store.
//
// # Snapshots
//
// A list reads a snapshot of the objects at its revision: a copy-on-write
// clone of the cache's btree (O(1) to take; the live tree then copies the
// few nodes each write touches, about its depth: BenchmarkSnapshotMemory
// measures 1.2 KiB per snapshot at 1,000 objects, 2.8 KiB at 100,000).
// Snapshots are taken by reads, not writes: the first list of a revision
// takes one, and the pages after it (and any other read of that
// revision) share it, so a cache that nobody lists keeps none and its
// writes copy no nodes. A read of a past revision that no snapshot holds
// takes a clone of the live state with the keys written since as the
// history has them before those writes (each event keeps the object it
// replaced), so any revision the history covers is served, as the store
// would at that revision: a paginated walk whose continue token names
// revision R sees the objects as they were at R, none of the writes
// since. Snapshots serve the revisions the history covers (from oldest
// on) and are dropped with it, bounded by MaxSnapshots (default 10,000,
// the newest kept); a relist drops them all. They are also dropped once
// the store has compacted their revisions, whoever compacted it (this
// server's compactor or another's on the same etcd): every CompactionPoll
// (default 15 s, as Kubernetes' cacher) the cache asks the store
// (storage.Interface's Compacted) about the oldest revision it would
// serve from a snapshot, and from then on serves no past revision before
// the store's compaction revision, as the store would not; the live
// state's snapshot stays. A revision before the history, or compacted, is
// ErrNoSnapshot: the caller reads the store, which answers 410 when
// it has compacted that revision, so that a continue token or an exact
// list at a compacted revision gets the same 410 from every server,
// within CompactionPoll of the compaction. This is Kubernetes'
// ListFromCacheSnapshot (KEP-4988), whose cacher clones its tree at every
// event instead.
//
// # Starting
//
// A cache fills itself with one list of its prefix at one revision. It
// streams it when the store can (storage.Streamer: etcd's RangeStream),
// since paging makes etcd count every key after each page, which is
// quadratic in the objects; otherwise it pages. Each chunk is decoded on
// up to GOMAXPROCS goroutines while the store sends the next, so the
// start is linear in the objects and bound by decoding. Until the list
// has been applied the cache is not ready (Ready false, Initializing
// true): List answers ErrNotReady and Watch waits in WaitFor, so callers
// serve reads from the store meanwhile and refuse watches with 429, as
// Kubernetes does while its watch cache initializes.
//
// # Watchers
//
// A watcher replays history after its start revision, then follows live
// events through a bounded buffer. Fan-out never blocks: a watcher whose
// buffer is full is ended with ErrTooSlow and its buffer dropped (the
// server answers 410; the client resumes or relists). History covers at
// least Window, bounded by MaxHistory events; a start revision older than
// that is ErrCompacted.
//
// # A failed list
//
// A list that fails (the store is unavailable, or holds a value it cannot
// transform back: encrypted with a key the server lacks) makes the cache
// not ready until a list succeeds, as Kubernetes' cacher: its watchers end
// with the error and WaitFor answers ErrNotReady wrapping it at once, so
// that the caller reads the store instead and reports what the store says
// (for an undecryptable value, an error naming its key). The cache never
// serves a list that silently lacks an object it could not read.
//
// # A failed feed
//
// When the store's watch fails (etcd unreachable, storage.ErrUnavailable;
// the member lost its leader; the watch closed), the cache keeps its
// objects and history, ends its watchers with the error, and watches
// again from its revision with backoff (100 ms doubling to 1 s), so that
// no event is lost and watches can later resume from their
// resourceVersion on this cache. Resuming after the cache's revision
// relies on the store's watch ending between revisions, never inside one
// (storage.Watcher): a revision of many keys is applied whole before the
// failure (TestFeedCutInsideARevision). Until the watch is re-established its
// new watchers get the error, and reads newer than the cache ErrNotReady
// (the caller asks the store, which says it is unavailable); reads that
// the cache's state answers ("any" resourceVersion, or one not newer than
// the cache) are still served, as Kubernetes' watch cache serves them. A
// compacted revision (history gone while the store was away) relists.
//
// # Kept encodings
//
// A list in another encoding than JSON (protobuf, CBOR) asks each object
// for it (Object.Encoded): made from the object's JSON the first time,
// then kept with the object, so that later lists copy bytes. A Budget
// (Config.Encodings), which the caches of a server share, bounds the
// bytes kept: an encoding is kept only if the budget has room, taken
// before it is published on the object (and given back if another
// reader published first); otherwise it is returned without being kept,
// and made anew by the next list. The bytes go back when the object
// leaves the cache: replaced by a newer revision, deleted (with or
// without its last value), dropped by a relist or the load of a saved
// state, or the cache stopped. Leaving swaps the object's list of
// encodings for a "retired" sentinel and gives back exactly what it
// swapped out; a reader that finds the sentinel, or loses its
// CompareAndSwap to it, keeps nothing and gives its bytes back, so that
// a departure racing with readers neither leaks nor double-counts. An
// object leaves once: snapshots and the history may still serve it,
// making its encodings anew at each list. Objects the cache never held
// (those of DELETED events, or built by callers) keep nothing.
//
// # Concurrency
//
// A Cache is safe for concurrent use. Run owns the feed goroutine; Stop
// ends it and every watcher. Lock order: Cache.mu is never taken while a
// watcher's consumer holds anything of the cache's.
package watchcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/objwatch/objwatch/storage"
)

// ErrTooSlow ends a watcher that could not keep up with the event rate.
var ErrTooSlow = errors.New("watcher fell too far behind")

// ErrNotReady: the cache has not finished its initial list.
var ErrNotReady = errors.New("watch cache not ready")

// Object is an object as the cache keeps it: metadata extracted once for
// filtering, and its wire JSON (with metadata.resourceVersion) encoded once.
// Its exported fields do not change once it is in the cache (readers share
// it without locks); other encodings of it are made on demand and kept
// with it while it is in the cache and its Budget has room (Encoded). An
// Object must not be copied: build a new one.
type Object struct {
	Key       string
	Namespace string
	Name      string
	Labels    labels.Set
	Fields    fields.Set
	Rev       int64
	JSON      []byte

	// encoded are the encodings Encoded kept, newest first, ending in a
	// terminal node: its Budget's root while the object is in a cache,
	// retired once it has left it. nil (8 bytes) before a cache takes the
	// object in; nothing is kept then, nor once retired. See "Kept
	// encodings" in the package doc.
	encoded atomic.Pointer[encodedObject]
}

// encodedObject is one encoding of an Object, linked to the ones made
// before it; or, with next nil, the chain's terminal node (key and b
// empty), whose budget (nil for retired) is the one the chain's bytes
// are taken from. It does not change once published.
type encodedObject struct {
	key    string
	b      []byte
	next   *encodedObject
	budget *Budget // of a terminal node
}

// beforePublish, set by tests only, runs between a kept encoding's take
// from the budget and its publication: where a departure or another
// reader may come first.
var beforePublish func(*Object)

// retired ends the chain of an Object that has left its cache: nothing
// more is kept with it.
var retired = &encodedObject{}

// Encoded returns o in the encoding named key: made by encode from o.JSON
// the first time it is asked for, then kept with o while o is in its
// cache, if the cache's Budget has room for it (a new revision of the
// object is a new Object, so an encoding is never stale). Otherwise it is
// made anew at every call: the bytes are the same, only the work is
// repeated. key must name one encoding of the cache's objects (encode
// must give the same bytes for the same JSON every time), and the caller
// must not modify the bytes returned. An error is returned, not kept.
//
// Encoded is safe for concurrent use, without locks, also with the
// object's departure from its cache: two readers that ask for the same
// new encoding at once may both make it; one of theirs is kept and
// returned to both, and the other's bytes go back to the Budget. Each
// encoding kept adds its bytes to o's memory: a second copy of the object
// per encoding in use, counted in the Budget until o leaves the cache.
func (o *Object) Encoded(key string, encode func(json []byte) ([]byte, error)) ([]byte, error) {
	head := o.encoded.Load()
	if b, ok := head.find(key); ok {
		return b, nil
	}
	b, err := encode(o.JSON)
	if err != nil {
		return nil, err
	}
	budget := head.owner()
	n := int64(len(b))
	if budget == nil || !budget.take(n) {
		return b, nil // not in a cache, or no room: not kept
	}
	for {
		if beforePublish != nil {
			beforePublish(o)
		}
		e := &encodedObject{key: key, b: b, next: head}
		if o.encoded.CompareAndSwap(head, e) {
			return b, nil
		}
		// Taken but not published: give it back unless it is published
		// on the next try.
		head = o.encoded.Load()
		if kept, ok := head.find(key); ok {
			budget.give(n)
			return kept, nil // another reader made it meanwhile
		}
		if head.owner() != budget {
			budget.give(n)
			return b, nil // o left the cache meanwhile
		}
	}
}

// EncodedSize is the bytes of the encodings kept with o (Encoded).
func (o *Object) EncodedSize() int {
	n := 0
	for e := o.encoded.Load(); e != nil; e = e.next {
		n += len(e.b)
	}
	return n
}

// find returns the kept encoding named key: a node before the terminal
// one.
func (e *encodedObject) find(key string) ([]byte, bool) {
	for ; e != nil && e.next != nil; e = e.next {
		if e.key == key {
			return e.b, true
		}
	}
	return nil, false
}

// owner is the Budget of the chain starting at e: nil when its object is
// in no cache (a nil chain) or has left it (retired).
func (e *encodedObject) owner() *Budget {
	if e == nil {
		return nil
	}
	for e.next != nil {
		e = e.next
	}
	return e.budget
}

// adopt makes o's encodings count against b, as o enters a cache (before
// any reader sees it there). An object that left a cache is not taken
// in again.
func (o *Object) adopt(b *Budget) {
	o.encoded.CompareAndSwap(nil, b.root)
}

// retire marks o as gone from its cache (replaced, deleted, dropped by a
// relist, or the cache stopped) and gives back the bytes of the
// encodings kept with it; later calls keep nothing and give back nothing.
// The chain swapped out is given back exactly once: an Encoded racing
// with it either published before the swap (its bytes are in the chain)
// or fails its CompareAndSwap against retired and gives back its own.
func (o *Object) retire() {
	e := o.encoded.Swap(retired)
	var n int64
	for ; e != nil && e.next != nil; e = e.next {
		n += int64(len(e.b))
	}
	if e != nil && e.budget != nil && n > 0 {
		e.budget.give(n)
	}
}

// Budget bounds the bytes of the encodings kept with cached objects
// (Object.Encoded), shared by every cache given it (Config.Encodings): an
// encoding is kept only while the bytes kept stay within the budget, and
// its bytes are given back when its object leaves the cache. It counts
// the encodings' bytes, not the bookkeeping around each (about 64 bytes).
// Safe for concurrent use, without locks.
type Budget struct {
	max     int64
	used    atomic.Int64
	refused atomic.Int64
	root    *encodedObject // the terminal node of its objects' chains
}

// NewBudget returns a Budget of max bytes (max <= 0: nothing is kept).
func NewBudget(max int64) *Budget {
	b := &Budget{max: max}
	b.root = &encodedObject{budget: b}
	return b
}

// unboundedBudget is the Budget of a cache configured without one.
func unboundedBudget() *Budget { return NewBudget(math.MaxInt64) }

// Hold takes o in under b, as a cache does with the objects it holds, so
// that o keeps its encodings while b has room: for an Object that no
// Cache holds (a test's). Its bytes stay counted in b for as long as o
// lives, so such a budget should be o's own. An Object already held, or
// one that has left its cache, is left as it is.
func (b *Budget) Hold(o *Object) { o.adopt(b) }

// Max is the budget's bound in bytes.
func (b *Budget) Max() int64 { return b.max }

// Used is the bytes of the encodings kept now.
func (b *Budget) Used() int64 { return b.used.Load() }

// Refused counts the encodings not kept for lack of room.
func (b *Budget) Refused() int64 { return b.refused.Load() }

// take reserves n bytes, if they fit.
func (b *Budget) take(n int64) bool {
	for {
		u := b.used.Load()
		if n > b.max-u {
			b.refused.Add(1)
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// give returns n bytes taken.
func (b *Budget) give(n int64) {
	b.used.Add(-n)
}

// Decoder turns a stored value into an Object, a new one at each call
// (the cache takes it in: see "Kept encodings" in the package doc).
// kv.ModRevision is the revision to stamp as resourceVersion. A value
// that does not decode is logged and left out, unless the error wraps
// ErrRetry. It must be safe for concurrent use: the initial list decodes
// on several goroutines.
type Decoder func(kv storage.KeyValue) (*Object, error)

// ErrRetry, wrapped by a Decoder's error, says the value may decode later
// (a conversion webhook that does not answer): the cache does not leave
// it out but stalls on it, as Kubernetes' watch cache does, retrying with
// backoff until it decodes or the cache stops. Its watchers get nothing
// newer meanwhile; an initial list that meets one fails and is retried,
// and the cache is not ready until one succeeds.
var ErrRetry = errors.New("retry decoding")

// Config configures a Cache.
type Config struct {
	Store  storage.Interface
	Prefix string
	Decode Decoder
	// Window is the minimum age of history kept (default 75 s, Kubernetes'
	// minimum); MaxHistory bounds it in events (default 100,000).
	Window     time.Duration
	MaxHistory int
	// MaxSnapshots bounds the snapshots kept for paginated and exact
	// revision lists (default 10,000; see the package doc, "Snapshots").
	MaxSnapshots int
	// CompactionPoll is how often the cache asks the store whether it
	// has compacted the oldest revision the snapshots serve, and drops
	// those it has (default 15 s, as Kubernetes' cacher polls).
	CompactionPoll time.Duration
	// Buffer bounds the events waiting for each watcher (default 10,000);
	// memory is used only while a watcher is behind. A watcher with a full
	// buffer is ended with ErrTooSlow and the buffer dropped.
	Buffer int
	// MaxQueued bounds the events waiting for all the cache's watchers
	// together (0: only Buffer bounds each). Past it, a watcher offered an
	// event while its own queue holds more than its share (MaxQueued over
	// the number of watchers) is ended with ErrTooSlow: many watchers that
	// stopped reading then cost at most this many queued events, not
	// Buffer each, while watchers that keep up (short queues) go on. The
	// share is never below MinShare (default 100), so that a burst does
	// not end watchers that keep up: with more watchers than MaxQueued /
	// MinShare, the bound is MinShare per watcher.
	MaxQueued int
	MinShare  int
	// FreshTimeout bounds how long a consistent read waits for the cache
	// to catch up before the caller falls back to the store (default 3 s).
	FreshTimeout time.Duration
	// Saved keeps the cache's state across restarts (nil: never saved;
	// see "Saved state" in the package doc); SaveInterval is how often it
	// is written while the cache changes (default 5 min).
	Saved        SavedState
	SaveInterval time.Duration
	// Encodings bounds the bytes of the encodings kept with the cache's
	// objects (Object.Encoded), shared with the other caches given it
	// (nil: a bound of the cache's own, of no limit).
	Encodings *Budget
	Log       *slog.Logger
}

// Cache is one resource's watch cache.
type Cache struct {
	cfg Config

	mu      sync.RWMutex
	objects *btree.BTreeG[*Object]
	labels  labelIndex
	rev     int64
	// history holds recent events in revision order; oldest is the revision
	// watches must start after (events after it are all present).
	history []*Event
	oldest  int64
	// snaps are the states after each revision that changed objects, in
	// revision order, the last one the live state (see snapshot.go).
	snaps []*snapshot
	// compacted is the newest revision the store is known to have
	// compacted to: no past revision before it is served.
	compacted int64
	// perNamespace counts the live objects of each namespace, for the
	// remainingItemCount of a namespace's first page.
	perNamespace map[string]int
	watchers     map[*Watcher]struct{}
	// watchersIn is watchers by their filter's namespace ("": all
	// namespaces), so that an event goes only to the watchers that may
	// want it (as Kubernetes' cacher indexes its watchers by scope), and
	// for InterestedWatchers; no empty entries.
	watchersIn map[string]map[*Watcher]struct{}
	// queued is the events waiting in all watchers' queues (MaxQueued).
	queued atomic.Int64
	ready  bool
	// listErr is why the last list failed, while the cache is not ready.
	listErr error
	// feedErr is why the store's watch failed, until it is re-established.
	feedErr error
	// changed is closed and replaced whenever rev advances.
	changed chan struct{}

	// catchUp, while the cache catches up from a saved state, is the
	// store's revision it must reach to be ready (0 otherwise); resumed
	// counts the events it applied meanwhile.
	catchUp int64
	resumed resumeStats
	// savedRev is the revision of the state last saved or loaded;
	// changedSinceSave, whether an object changed since (or the cache
	// relisted).
	savedRev         int64
	changedSinceSave bool
	// saving serializes saves (taken before mu, never under it).
	saving sync.Mutex

	progress chan struct{} // requests for a progress notification
	started  time.Time     // when Start was called
	stop     context.CancelFunc
	done     chan struct{}
}

func less(a, b *Object) bool { return a.Key < b.Key }

// New returns a Cache; call Run to fill it.
func New(cfg Config) *Cache {
	if cfg.Window == 0 {
		cfg.Window = 75 * time.Second
	}
	if cfg.MaxHistory == 0 {
		cfg.MaxHistory = 100000
	}
	if cfg.MaxSnapshots <= 0 {
		cfg.MaxSnapshots = 10000
	}
	if cfg.CompactionPoll <= 0 {
		cfg.CompactionPoll = 15 * time.Second
	}
	if cfg.MinShare == 0 {
		cfg.MinShare = 100
	}
	if cfg.Buffer == 0 {
		cfg.Buffer = 10000
	}
	if cfg.FreshTimeout == 0 {
		cfg.FreshTimeout = 3 * time.Second
	}
	if cfg.SaveInterval <= 0 {
		cfg.SaveInterval = 5 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Encodings == nil {
		cfg.Encodings = unboundedBudget()
	}
	return &Cache{
		cfg:        cfg,
		objects:    btree.NewG(32, less),
		labels:     labelIndex{},
		watchers:   map[*Watcher]struct{}{},
		watchersIn: map[string]map[*Watcher]struct{}{},
		changed:    make(chan struct{}),
		progress:   make(chan struct{}, 1),
	}
}

// Start runs the feed, and the poll of the store's compaction (see
// "Snapshots" in the package doc), in goroutines owned by the cache
// until Stop.
func (c *Cache) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.mu.Lock()
	c.started = time.Now()
	c.mu.Unlock()
	c.stop, c.done = cancel, make(chan struct{})
	go func() {
		defer close(c.done)
		var wg sync.WaitGroup
		wg.Go(func() { c.pollCompaction(ctx) })
		if c.cfg.Saved != nil {
			wg.Go(func() { c.saveEvery(ctx) })
		}
		c.run(ctx)
		wg.Wait()
	}()
}

// Stop ends the feed, the compaction poll and every watcher, and waits.
func (c *Cache) Stop() {
	if c.stop == nil {
		return
	}
	c.stop()
	<-c.done
	c.mu.Lock()
	for w := range c.watchers {
		c.end_locked(w, context.Canceled)
	}
	objects := c.objects
	c.mu.Unlock()
	retireAll(objects) // nothing writes the tree once the feed has ended
}

// retireAll retires the objects of a tree no longer written (see
// "Kept encodings" in the package doc).
func retireAll(objects *btree.BTreeG[*Object]) {
	objects.Ascend(func(o *Object) bool {
		o.retire()
		return true
	})
}

// run lists, then follows a watch (resumed from the cache's revision when
// it fails); after a failed list, a compacted revision or an unreadable
// value it lists again. A relist ends every watcher: the history it would
// need has a gap.
func (c *Cache) run(ctx context.Context) {
	if c.cfg.Saved != nil {
		err := c.resume(ctx)
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, os.ErrNotExist) {
			c.cfg.Log.Info("watch cache: saved state not used; listing", "prefix", c.cfg.Prefix, "err", err)
		}
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := c.listAndWatch(ctx)
		if ctx.Err() != nil {
			return
		}
		c.cfg.Log.Warn("watch cache: relisting", "prefix", c.cfg.Prefix, "err", err)
		if !pause(ctx, &backoff, 5*time.Second) {
			return
		}
	}
}

func (c *Cache) listAndWatch(ctx context.Context) error {
	objects, index := btree.NewG(32, less), labelIndex{}
	rev, err := c.load(ctx, func(kvs []storage.KeyValue) error {
		objs, err := c.decodeAll(kvs)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if o == nil {
				continue // logged by decodeAll
			}
			o.adopt(c.cfg.Encodings)
			if old, had := objects.ReplaceOrInsert(o); had {
				index.remove(old)
				old.retire()
			}
			index.add(o)
		}
		return nil
	})
	if errors.Is(err, ErrRetry) {
		return fmt.Errorf("list: %w", err)
	}
	if err != nil {
		err = fmt.Errorf("list: %w", err)
		if ctx.Err() == nil {
			c.listFailed(err)
		}
		return err
	}
	c.install(objects, index, rev, 0)
	return c.watch(ctx)
}

// install makes objects (indexed by index) the cache's state at rev,
// ending every watcher (the history they would need has a gap). The
// cache is ready at once, or, with catchUp, once it reaches that
// revision. The objects it replaces are retired, after it has released
// the cache's lock.
func (c *Cache) install(objects *btree.BTreeG[*Object], index labelIndex, rev, catchUp int64) {
	c.mu.Lock()
	old := c.objects
	defer retireAll(old) // runs after the unlock below: nothing writes old now
	defer c.mu.Unlock()
	for wt := range c.watchers {
		c.end_locked(wt, fmt.Errorf("watch cache relisted: %w", storage.ErrCompacted))
	}
	c.objects, c.labels, c.history, c.oldest, c.listErr = objects, index, nil, rev, nil
	c.changedSinceSave = catchUp == 0 // a list; a loaded state is the saved one
	c.ready, c.catchUp = catchUp <= rev, 0
	if !c.ready {
		c.catchUp = catchUp
	}
	c.resetSnapshots_locked()
	c.advance_locked(rev)
}

// watch follows the store from the cache's revision on. A feed that
// fails is resumed from the cache's revision, keeping state and history
// (see the package doc, "A failed feed"); only a compacted revision or a
// value that cannot be read needs a relist, and returns.
func (c *Cache) watch(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		err := c.follow(ctx)
		var te *storage.TransformError
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, storage.ErrCompacted), errors.As(err, &te):
			return err
		}
		c.feedFailed(err)
		c.cfg.Log.Warn("watch cache: watch failed, resuming", "prefix", c.cfg.Prefix, "revision", c.Revision(), "err", err)
		if !pause(ctx, &backoff, time.Second) {
			return nil
		}
	}
}

// pause waits *d, or until ctx ends (false), and doubles *d up to max:
// the backoff of the cache's retries.
func pause(ctx context.Context, d *time.Duration, max time.Duration) bool {
	t := time.NewTimer(*d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	*d = min(2**d, max)
	return true
}

// load reads every key under the prefix at one revision, which it
// returns, passing them to chunk a chunk at a time (see "Starting" in the
// package doc): streamed when the store can (storage.Streamer), else in
// pages of List.
func (c *Cache) load(ctx context.Context, chunk func([]storage.KeyValue) error) (int64, error) {
	if st, ok := c.cfg.Store.(storage.Streamer); ok {
		rev, err := st.ListAll(ctx, c.cfg.Prefix, chunk)
		if !errors.Is(err, storage.ErrStreamUnsupported) {
			return rev, err
		}
	}
	var rev int64
	start := ""
	for {
		lr, err := c.cfg.Store.List(ctx, c.cfg.Prefix, storage.ListOptions{Revision: rev, Limit: listPage, StartKey: start})
		if err != nil {
			return 0, err
		}
		rev = lr.Revision
		if err := chunk(lr.KVs); err != nil {
			return 0, err
		}
		if !lr.More {
			return rev, nil
		}
		start = lr.KVs[len(lr.KVs)-1].Key + "\x00"
	}
}

// listPage is the page of a list that cannot stream.
const listPage = 10000

// decodeBatch is how many values a decoding goroutine takes at a time.
const decodeBatch = 64

// decodeAll decodes kvs on up to GOMAXPROCS goroutines, which it waits
// for: the objects in kvs' order, nil for a value that does not decode
// (logged). A value to retry (ErrRetry) fails the whole chunk.
func (c *Cache) decodeAll(kvs []storage.KeyValue) ([]*Object, error) {
	objs := make([]*Object, len(kvs))
	errs := make([]error, len(kvs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), (len(kvs)+decodeBatch-1)/decodeBatch) {
		wg.Go(func() {
			for {
				lo := int(next.Add(decodeBatch)) - decodeBatch
				if lo >= len(kvs) {
					return
				}
				for i := lo; i < min(lo+decodeBatch, len(kvs)); i++ {
					objs[i], errs[i] = c.cfg.Decode(kvs[i])
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		switch {
		case errors.Is(err, ErrRetry):
			return nil, err
		case err != nil:
			c.cfg.Log.Error("watch cache: decode", "key", kvs[i].Key, "err", err)
			objs[i] = nil
		}
	}
	return objs, nil
}

// follow watches the store from the cache's revision on, applying events
// until the watch fails (its error) or ctx ends. Once the watch is
// established, the feed counts as working again.
func (c *Cache) follow(ctx context.Context) error {
	// Without previous values: the cache holds each key's last object
	// (a deletion is applied from it), so etcd need not read them, and
	// the watch can be served by a store's shared one.
	w, err := c.cfg.Store.Watch(storage.WithoutPrev(ctx), c.cfg.Prefix, c.Revision()+1)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer w.Stop()
	c.mu.Lock()
	c.feedErr = nil
	catchingUp := c.catchUp > 0
	c.mu.Unlock()
	if catchingUp {
		// Nothing may change under the prefix: the store's progress
		// notification tells the cache it has reached the revision.
		w.RequestProgress(ctx)
	}

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var revision []storage.Event // the events of a revision not yet whole
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.progress:
			w.RequestProgress(ctx)
		case now := <-tick.C:
			c.mu.Lock()
			c.trim_locked(now)
			c.bookmarks_locked(now)
			catchingUp := c.catchUp > 0
			c.mu.Unlock()
			if catchingUp {
				w.RequestProgress(ctx)
			}
		case ev, ok := <-w.Events():
			if !ok {
				return errors.New("watch closed")
			}
			switch ev.Type {
			case storage.Error:
				return ev.Err
			case storage.Progress:
				c.mu.Lock()
				if ev.Revision > c.rev {
					c.advance_locked(ev.Revision)
				}
				c.mu.Unlock()
			default:
				// A revision of several keys (a transaction) is applied
				// whole: its events come together, all but the last
				// marked More.
				revision = append(revision, ev)
				if ev.More {
					continue
				}
				err := c.apply(ctx, revision...)
				clear(revision) // holds no values once applied
				revision = revision[:0]
				if err != nil {
					return err
				}
			}
		}
	}
}

// feedFailed ends the cache's watchers with err (they would not see
// changes until the feed is back; their clients resume elsewhere or
// later, from their last resourceVersion) and makes new watches and reads
// newer than the cache fail with it until the feed is back.
func (c *Cache) feedFailed(err error) {
	err = fmt.Errorf("watch cache: %w", err)
	c.mu.Lock()
	defer c.mu.Unlock()
	for wt := range c.watchers {
		c.end_locked(wt, err)
	}
	c.feedErr = err
	c.advance_locked(c.rev) // wakes WaitFor
}

// listFailed makes the cache not ready because of err (see the package
// doc): its watchers end, and waiters learn it.
func (c *Cache) listFailed(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for wt := range c.watchers {
		c.end_locked(wt, fmt.Errorf("watch cache: %w", err))
	}
	c.ready, c.listErr = false, err
	c.advance_locked(c.rev) // wakes WaitFor
}

// apply adds the events of one revision (in key order) to the state,
// the history and every watcher under one hold of the lock, so that no
// list, bookmark or new watch sees the revision in part. A value to retry
// (ErrRetry) is retried here until it decodes or ctx ends.
func (c *Cache) apply(ctx context.Context, evs ...storage.Event) error {
	var one [1]*Object
	objs := one[:]
	if len(evs) > 1 {
		objs = make([]*Object, len(evs))
	}
	for i, ev := range evs {
		if isBareDelete(ev) {
			continue
		}
		obj, err := c.decode(ctx, ev)
		if err != nil {
			return err
		}
		objs[i] = obj
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, ev := range evs {
		switch {
		case isBareDelete(ev):
			c.applyBareDelete_locked(ev)
		case objs[i] != nil:
			c.applyObject_locked(ev, objs[i])
		}
	}
	return nil
}

// decode decodes ev's value, retrying a value to retry (ErrRetry) until
// it decodes or ctx ends (its error). A value that does not decode is
// logged and nil.
func (c *Cache) decode(ctx context.Context, ev storage.Event) (*Object, error) {
	obj, err := c.cfg.Decode(ev.KV)
	for backoff := 100 * time.Millisecond; errors.Is(err, ErrRetry); backoff = min(2*backoff, 5*time.Second) {
		c.cfg.Log.Warn("watch cache: decode, retrying", "key", ev.KV.Key, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		obj, err = c.cfg.Decode(ev.KV)
	}
	if err != nil {
		c.cfg.Log.Error("watch cache: decode", "key", ev.KV.Key, "err", err)
		return nil, nil
	}
	return obj, nil
}

// applyObject_locked applies ev, whose value decoded to obj.
func (c *Cache) applyObject_locked(ev storage.Event, obj *Object) {
	e := &Event{Type: ev.Type, Rev: ev.Revision, Obj: obj, At: time.Now()}
	prev, had := c.objects.Get(&Object{Key: obj.Key})
	if had {
		e.Prev = prev
		c.labels.remove(prev)
		prev.retire()
	}
	if ev.Type == storage.Delete {
		if had {
			c.count_locked(obj.Key, -1)
		}
		c.objects.Delete(obj)
	} else {
		if !had {
			c.count_locked(obj.Key, 1)
		}
		obj.adopt(c.cfg.Encodings)
		c.objects.ReplaceOrInsert(obj)
		c.labels.add(obj)
	}
	c.publish_locked(e)
}

// isBareDelete: ev is a deletion without the object's last value (see
// applyBareDelete_locked).
func isBareDelete(ev storage.Event) bool {
	return ev.Type == storage.Delete && len(ev.KV.Value) == 0
}

// publish_locked records an applied event: history, the saved state's
// bookkeeping, every watcher, the cache's revision.
func (c *Cache) publish_locked(e *Event) {
	c.history = append(c.history, e)
	c.wrote_locked(e.Rev)
	c.changedSinceSave = true
	if c.catchUp > 0 {
		c.resumed.events++
	}
	// Only the watchers of every namespace and of the object's: the
	// others' filters reject an object of another namespace.
	for w := range c.watchersIn[""] {
		w.offer_locked(e)
	}
	if ns := e.Obj.Namespace; ns != "" {
		for w := range c.watchersIn[ns] {
			w.offer_locked(e)
		}
	}
	c.advanceTo_locked(e.Rev)
}

// advanceTo_locked moves the cache's revision to rev if it is newer, and
// trims the history.
func (c *Cache) advanceTo_locked(rev int64) {
	if rev > c.rev {
		c.advance_locked(rev)
	}
	if len(c.history) > c.cfg.MaxHistory {
		c.trim_locked(time.Now())
	}
}

// applyBareDelete applies a deletion that came without the object's last
// value: etcd sends none when it had compacted that value by the time it
// sent the event (a watch catching up after a partition, from a revision
// older than a compaction that left the deletion itself). The cache's own
// copy is that last value; the event carries it stamped with the
// deletion's revision, as any DELETED. A key the cache does not hold has
// nothing to delete; the revision still advances.
func (c *Cache) applyBareDelete_locked(ev storage.Event) {
	prev, had := c.objects.Get(&Object{Key: ev.KV.Key})
	if had {
		e := &Event{Type: storage.Delete, Rev: ev.Revision, Obj: stamped(prev, ev.Revision), Prev: prev, At: time.Now()}
		c.labels.remove(prev)
		c.count_locked(prev.Key, -1)
		c.objects.Delete(prev)
		prev.retire()
		c.publish_locked(e)
		return
	}
	c.cfg.Log.Warn("watch cache: a deletion without its last value, of a key the cache does not hold", "key", ev.KV.Key, "revision", ev.Revision)
	c.advanceTo_locked(ev.Revision)
}

func (c *Cache) advance_locked(rev int64) {
	c.rev = rev
	if c.catchUp > 0 && rev >= c.catchUp {
		c.caughtUp_locked()
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// trim_locked drops history older than Window, and beyond MaxHistory.
func (c *Cache) trim_locked(now time.Time) {
	cut := 0
	for cut < len(c.history) {
		e := c.history[cut]
		if len(c.history)-cut <= c.cfg.MaxHistory && now.Sub(e.at()) < c.cfg.Window {
			break
		}
		cut++
	}
	if cut == 0 {
		return
	}
	c.oldest = c.history[cut-1].Rev
	// Reslice rather than copy: a full history is trimmed by one event
	// per event applied, and copying all of it each time made applying
	// O(MaxHistory) (about 1 ms per event at 100,000). The dropped slots
	// are cleared so their events can go; append reallocates, and so
	// compacts, once the shrunken capacity runs out: amortized O(1).
	clear(c.history[:cut])
	c.history = c.history[cut:]
	c.pruneSnapshots_locked()
}

// Revision is the revision the cache is current at.
func (c *Cache) Revision() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.rev
}

// Ready reports whether the cache has loaded its initial list.
func (c *Cache) Ready() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ready
}

// Initializing reports whether the cache is still loading its first list
// (started, not ready, and no list has failed), and for how long it has
// been: callers read the store meanwhile, and refuse watches with 429
// (see "Starting" in the package doc).
func (c *Cache) Initializing() (time.Duration, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.ready || c.listErr != nil || c.started.IsZero() {
		return 0, false
	}
	return time.Since(c.started), true
}

// WaitFor waits until the cache is ready and at revision rev or later. A
// cache whose last list failed, or that is behind rev while its feed is
// failing, answers ErrNotReady (wrapping why) at once.
func (c *Cache) WaitFor(ctx context.Context, rev int64) error {
	for {
		c.mu.RLock()
		ready, cur, changed, listErr, feedErr := c.ready, c.rev, c.changed, c.listErr, c.feedErr
		c.mu.RUnlock()
		if ready && cur >= rev {
			return nil
		}
		if !ready && listErr != nil {
			return fmt.Errorf("%w: %w", ErrNotReady, listErr)
		}
		if feedErr != nil {
			// It will not catch up before the feed is back.
			return fmt.Errorf("%w: %w", ErrNotReady, feedErr)
		}
		if ready {
			select {
			case c.progress <- struct{}{}:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitFresh waits until the cache has caught up with the store's current
// revision, for a consistent read; it returns that revision.
func (c *Cache) WaitFresh(ctx context.Context) (int64, error) {
	rev, err := c.cfg.Store.Revision(ctx)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.FreshTimeout)
	defer cancel()
	return rev, c.WaitFor(ctx, rev)
}

// Filter selects objects.
type Filter struct {
	Namespace string // "" = all
	Labels    labels.Selector
	Fields    fields.Selector
}

// Matches reports whether o passes the filter.
func (f Filter) Matches(o *Object) bool { return f.matcher()(o) }

// matcher compiles the filter once for many objects: label requirements
// are evaluated directly on the object's label map, which is several
// times faster than labels.Selector.Matches on a hot path.
func (f Filter) matcher() func(*Object) bool {
	var reqs []requirement
	generic := false
	if f.Labels != nil && !f.Labels.Empty() {
		rs, selectable := f.Labels.Requirements()
		generic = !selectable
		for i := range rs {
			reqs = append(reqs, requirement{key: rs[i].Key(), op: rs[i].Operator(), values: rs[i].ValuesUnsorted(), r: &rs[i]})
		}
	}
	fieldsOn := f.Fields != nil && !f.Fields.Empty()
	return func(o *Object) bool {
		if o == nil || (f.Namespace != "" && o.Namespace != f.Namespace) {
			return false
		}
		if generic {
			if !f.Labels.Matches(o.Labels) {
				return false
			}
		} else {
			for i := range reqs {
				if !reqs[i].matches(o.Labels) {
					return false
				}
			}
		}
		return !fieldsOn || f.Fields.Matches(o.Fields)
	}
}

// requirement is a label requirement with its values extracted once.
type requirement struct {
	key    string
	op     selection.Operator
	values []string
	r      *labels.Requirement
}

func (q *requirement) has(v string) bool {
	for _, x := range q.values {
		if x == v {
			return true
		}
	}
	return false
}

func (q *requirement) matches(m labels.Set) bool {
	v, ok := m[q.key]
	switch q.op {
	case selection.Equals, selection.DoubleEquals, selection.In:
		return ok && q.has(v)
	case selection.NotEquals, selection.NotIn:
		return !ok || !q.has(v)
	case selection.Exists:
		return ok
	case selection.DoesNotExist:
		return !ok
	}
	return q.r.Matches(m)
}

// List returns the objects matching f in key order at the cache's
// current revision, at most limit (0: all) starting at startKey, with the
// revision they are current at and whether keys follow (see ListAt). The
// caller waits for freshness first (WaitFor/WaitFresh).
func (c *Cache) List(f Filter, startKey string, limit int) (objs []*Object, rev int64, more bool, err error) {
	p, err := c.ListAt(f, 0, startKey, limit)
	return p.Objects, p.Rev, p.More, err
}

// Get returns the object under key, if present.
func (c *Cache) Get(key string) (*Object, int64, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	o, ok := c.objects.Get(&Object{Key: key})
	return o, c.rev, ok
}

// Len is the number of cached objects.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.objects.Len()
}
