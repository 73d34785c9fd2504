package objects

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
	"github.com/objwatch/objwatch/storage/watchcache/cachefile"
)

// Caches are a Service's watch caches: one per served resource version,
// started on first use (or by Start) and stopped when the resource stops
// being served (Prune) or the service closes. They answer the reads the
// cache may serve, each in its file: lists (cachelist.go), gets
// (cacheget.go) and watches (cachewatch.go); they decode each stored
// value once for all its readers (cachedecode.go), taking this server's
// own writes from write hints (hints.go). Update guesses read them too
// (updatecache.go).
//
// Caches are safe for concurrent use; mu is held only to find or start a
// cache, never while one is read.
type Caches struct {
	cfg  Config      // the service's, defaults applied
	etcd storeReader // for Config.Verify's comparisons with etcd

	mu    sync.Mutex
	m     map[*registry.Resource]*watchcache.Cache // under mu
	hints map[*registry.Resource]*writeHints       // under mu
	// atStart are the caches Start started, by group/version/resource.
	atStart map[string]*watchcache.Cache // under mu
	closed  bool                         // under mu: no cache starts after close

	// dropped are the frames without managedFields of recent events,
	// shared by the watches that drop them.
	dropped frameMemo
	// encoded keeps recent events in the binary encodings of watches
	// (WatchOptions.Encode), each made once for all the watches of one.
	encoded frameMemo
	// shapes are what watches with extensions make of recent events
	// (projections, masked decisions, delta frames), shared among them.
	shapes shapeMemo

	hintsUsed, cachedPages atomic.Int64 // see Counts
	listItemsEncoded       atomic.Int64 // see Counts
}

// errNoCache sends a request down the storage path.
var errNoCache = errors.New("not served from the watch cache")

// For returns res's watch cache, started if it was not, or nil when
// caching is off, res is no longer served or the service is closed.
func (c *Caches) For(res *registry.Resource) *watchcache.Cache {
	if c.cfg.DisableWatchCache {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if wc := c.m[res]; wc != nil {
		return wc
	}
	if cur, ok := c.cfg.Registry.Get(res.GVR()); !ok || cur != res || res.Review {
		return nil // no longer served (a CRD changed meanwhile), or nothing stored
	}
	if c.m == nil {
		c.m = map[*registry.Resource]*watchcache.Cache{}
		c.hints = map[*registry.Resource]*writeHints{}
	}
	hints := &writeHints{m: map[string]writeHint{}}
	// The store of the etcd cluster res lives on: the cache's list,
	// watch, consistent reads' revision and compaction polls are that
	// cluster's (storage.Partitioned).
	own := storage.PartOf(c.cfg.Storage, res.StoragePrefix)
	store := own
	if delay := c.cfg.CacheStartDelay + customDelay(res, c.cfg.CustomCacheStartDelay); delay > 0 {
		store = &delayedStart{Interface: store, delay: delay}
	}
	decode := c.decoder(res, hints)
	if res.Versions != nil && res.Versions.Remote() {
		b := &batchConverting{Interface: own, res: res, done: map[keyRev]*watchcache.Object{}}
		store, decode = b, b.decoder(decode)
	}
	wc := watchcache.New(watchcache.Config{
		Store: store, Prefix: res.StoragePrefix, Decode: decode,
		Window: c.cfg.WatchCacheWindow, Buffer: c.cfg.WatchBufferEvents, MaxQueued: c.cfg.WatchQueueLimit,
		FreshTimeout: c.cfg.FutureRVWait, CompactionPoll: c.cfg.WatchCacheCompactionPoll, Log: c.cfg.Log,
		Saved: c.savedState(res), SaveInterval: c.cfg.WatchCacheSnapshotInterval, Encodings: c.cfg.encodings,
	})
	wc.Start()
	c.m[res] = wc
	c.hints[res] = hints
	return wc
}

// Watchers is how many watches of res's objects an event of an object in
// namespace may go to (watchcache.Cache.InterestedWatchers; "": every
// watch), over the caches of every version stored under res's prefix. It
// starts no cache.
func (c *Caches) Watchers(res *registry.Resource, namespace string) int {
	var buf [4]*watchcache.Cache // a resource has few versions: no allocation per write
	caches := buf[:0]
	c.mu.Lock()
	for r, wc := range c.m {
		if r.StoragePrefix == res.StoragePrefix {
			caches = append(caches, wc)
		}
	}
	c.mu.Unlock()
	n := 0
	for _, wc := range caches {
		n += wc.InterestedWatchers(namespace)
	}
	return n
}

// existing returns res's watch cache if it has one; unlike For, it
// starts none.
func (c *Caches) existing(res *registry.Resource) *watchcache.Cache {
	if c.cfg.DisableWatchCache {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[res]
}

// usable returns res's cache, or nil when the request goes to etcd: no
// cache, or the cache of a version converted by a webhook that has not
// loaded (the webhook fails: etcd's answer says why, where the cache
// would wait).
func (c *Caches) usable(res *registry.Resource) *watchcache.Cache {
	wc := c.For(res)
	if wc == nil || (res.Versions != nil && res.Versions.Remote() && !wc.Ready()) {
		return nil
	}
	return wc
}

// hintsFor returns the write hints of res's cache, nil when it has none.
func (c *Caches) hintsFor(res *registry.Resource) *writeHints {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hints[res]
}

// Start starts the watch cache of every served resource, as Kubernetes
// fills them at start rather than on the first request; those of resources
// marked CacheOnDemand start at their first use.
func (c *Caches) Start() {
	started := map[string]*watchcache.Cache{}
	for _, res := range c.cfg.Registry.Resources() {
		if res.CacheOnDemand {
			continue
		}
		if wc := c.For(res); wc != nil {
			started[res.GVR().String()] = wc
		}
	}
	c.mu.Lock()
	if c.atStart == nil {
		c.atStart = map[string]*watchcache.Cache{}
	}
	maps.Copy(c.atStart, started)
	c.mu.Unlock()
}

// CountStarted adds the caches running now to those Unready and Loading
// report. The server calls it once it has read the CRDs at start, so that
// the caches of the custom resources served then (the CRDs Established
// at start) count for its readiness as the built-in ones do.
func (c *Caches) CountStarted() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.atStart == nil {
		c.atStart = map[string]*watchcache.Cache{}
	}
	for res, wc := range c.m {
		c.atStart[res.GVR().String()] = wc
	}
}

// Unready names, sorted, the resources (group/version, Resource=plural)
// whose watch caches Start started (or CountStarted counted) and that are
// not ready: still loading their first list, or whose list failed. The server's storage readiness
// (Kubernetes' storage-readiness post-start hook) waits for none to
// remain.
func (c *Caches) Unready() []string {
	return c.started(func(wc *watchcache.Cache) bool { return !wc.Ready() })
}

// Loading names, sorted, those of Unready still loading
// (watchcache.Cache.Initializing): their watches are answered 429.
func (c *Caches) Loading() []string {
	return c.started(func(wc *watchcache.Cache) bool { _, init := wc.Initializing(); return init })
}

func (c *Caches) started(match func(*watchcache.Cache) bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	running := make(map[*watchcache.Cache]bool, len(c.m))
	for _, wc := range c.m {
		running[wc] = true
	}
	var out []string
	for name, wc := range c.atStart {
		if running[wc] && match(wc) { // a cache stopped since (its CRD gone) is not waited for
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Prune stops the caches of resources no longer served (after the
// served custom resources changed).
func (c *Caches) Prune() { c.prune(false) }

// close stops every cache, then saves their states (see savedState);
// none starts after it.
func (c *Caches) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	for _, wc := range c.prune(true) {
		if err := wc.Save(); err != nil {
			c.cfg.Log.Warn("watch cache: save state", "err", err)
		}
	}
}

// prune stops the caches of resources no longer served (all, when the
// service closes), and returns them. Those of resources no longer served
// drop their saved states.
func (c *Caches) prune(all bool) []*watchcache.Cache {
	c.mu.Lock()
	var stop []*watchcache.Cache
	for res, wc := range c.m {
		if cur, ok := c.cfg.Registry.Get(res.GVR()); all || !ok || cur != res {
			stop = append(stop, wc)
			delete(c.m, res)
			delete(c.hints, res)
		}
	}
	c.mu.Unlock()
	for _, wc := range stop {
		wc.Stop()
		if !all {
			wc.DiscardSaved()
		}
	}
	return stop
}

// savedState is where res's cache keeps its state across restarts: a
// file in the WatchCacheSnapshots directory, fingerprinted with what
// shapes the cached form (decodingID: CachedForm, the versions of the
// modules the decoding uses and the Go release; see cacheform.go) and
// what res was built from (its group, version, resource, kind and
// storage prefix; for a custom resource its CRD's uid, generation and
// accepted names, which the registry's token holds; a CRD's schema,
// versions, storage version and selectable fields change its
// generation), so that a state made by a binary that decodes differently
// or for another definition is not used, and one made by another binary
// that decodes the same (a rebuild, an upgrade that changed other code)
// is. None for a version a conversion webhook converts (the webhook's
// answers may change with nothing stored changing).
func (c *Caches) savedState(res *registry.Resource) watchcache.SavedState {
	if c.cfg.WatchCacheSnapshots == "" || (res.Versions != nil && res.Versions.Remote()) {
		return nil
	}
	fp := fmt.Sprintf("%s|%s|%s|%s", decodingID(), res.GVR(), res.Kind, res.StoragePrefix)
	if res.Custom {
		token, ok := c.cfg.Registry.CustomToken(res.Plural + "." + res.Group)
		if !ok {
			return nil
		}
		fp += "|crd " + token
	}
	return &cachefile.File{
		Path:   filepath.Join(c.cfg.WatchCacheSnapshots, cachefile.Name(res.Group, res.Version, res.Plural)),
		Prefix: res.StoragePrefix, Fingerprint: fp,
	}
}

func customDelay(res *registry.Resource, d time.Duration) time.Duration {
	if res.Custom {
		return d
	}
	return 0
}

// delayedStart is a cache's store whose first list waits (Config's
// CacheStartDelay, for tests: a cache that starts slowly, as on a large
// store). It streams when its store does. Safe for concurrent use.
type delayedStart struct {
	storage.Interface
	delay time.Duration
	once  sync.Once
}

func (d *delayedStart) wait(ctx context.Context) {
	d.once.Do(func() {
		select {
		case <-ctx.Done():
		case <-time.After(d.delay):
		}
	})
}

func (d *delayedStart) List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListResult, error) {
	d.wait(ctx)
	return d.Interface.List(ctx, prefix, opts)
}

func (d *delayedStart) ListAll(ctx context.Context, prefix string, chunk func([]storage.KeyValue) error) (int64, error) {
	d.wait(ctx)
	st, ok := d.Interface.(storage.Streamer)
	if !ok {
		return 0, storage.ErrStreamUnsupported
	}
	return st.ListAll(ctx, prefix, chunk)
}
