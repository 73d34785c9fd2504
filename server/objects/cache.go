package objects

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// caches holds one watch cache per served resource version, created on
// first use and stopped when the resource stops being served.
type caches struct {
	mu    sync.Mutex
	m     map[*registry.Resource]*watchcache.Cache
	hints map[*registry.Resource]*writeHints
	// dropped are the frames without managedFields of recent events,
	// shared by the watches that drop them.
	dropped frameMemo
	// atStart are the caches StartCaches started, by group/version/resource.
	atStart map[string]*watchcache.Cache
}

// hintsFor returns the write hints of res's cache, nil when it has none.
func (s *Service) hintsFor(res *registry.Resource) *writeHints {
	s.caches.mu.Lock()
	defer s.caches.mu.Unlock()
	return s.caches.hints[res]
}

// existingCache returns res's watch cache if it has one; unlike cacheFor,
// it starts none.
func (s *Service) existingCache(res *registry.Resource) *watchcache.Cache {
	if s.cfg.DisableWatchCache {
		return nil
	}
	s.caches.mu.Lock()
	defer s.caches.mu.Unlock()
	return s.caches.m[res]
}

// Cache returns res's watch cache, started if it was not, or nil when
// caching is off, res is no longer served or the service is closed.
func (s *Service) Cache(res *registry.Resource) *watchcache.Cache { return s.cacheFor(res) }

// StartCaches starts the watch cache of every served resource, as
// Kubernetes fills them at start rather than on the first request.
func (s *Service) StartCaches() {
	started := map[string]*watchcache.Cache{}
	for _, res := range s.registry.Resources() {
		if c := s.cacheFor(res); c != nil {
			started[res.GVR().String()] = c
		}
	}
	s.caches.mu.Lock()
	s.caches.atStart = started
	s.caches.mu.Unlock()
}

// UnreadyCaches names, sorted, the resources (group/version, Resource=
// plural) whose watch caches StartCaches started and that are not ready:
// still loading their first list, or whose list failed. The server's
// storage readiness (Kubernetes' storage-readiness post-start hook) waits
// for none to remain.
func (s *Service) UnreadyCaches() []string {
	return s.startedCaches(func(c *watchcache.Cache) bool { return !c.Ready() })
}

// LoadingCaches names, sorted, those of UnreadyCaches still loading
// (watchcache.Cache.Initializing): their watches are answered 429.
func (s *Service) LoadingCaches() []string {
	return s.startedCaches(func(c *watchcache.Cache) bool { _, init := c.Initializing(); return init })
}

func (s *Service) startedCaches(match func(*watchcache.Cache) bool) []string {
	s.caches.mu.Lock()
	defer s.caches.mu.Unlock()
	var out []string
	for name, c := range s.caches.atStart {
		if match(c) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// PruneCaches stops the caches of resources no longer served (after the
// served custom resources changed).
func (s *Service) PruneCaches() { s.pruneCaches(false) }

// cacheFor returns res's watch cache, or nil when caching is off.
func (s *Service) cacheFor(res *registry.Resource) *watchcache.Cache {
	if s.cfg.DisableWatchCache {
		return nil
	}
	s.caches.mu.Lock()
	defer s.caches.mu.Unlock()
	select {
	case <-s.closed.Done():
		return nil
	default:
	}
	if c := s.caches.m[res]; c != nil {
		return c
	}
	if cur, ok := s.registry.Get(res.GVR()); !ok || cur != res || res.Review {
		return nil // no longer served (a CRD changed meanwhile), or nothing stored
	}
	if s.caches.m == nil {
		s.caches.m = map[*registry.Resource]*watchcache.Cache{}
		s.caches.hints = map[*registry.Resource]*writeHints{}
	}
	hints := &writeHints{m: map[string]writeHint{}}
	var store storage.Interface = s.store
	if s.cfg.CacheStartDelay > 0 {
		store = &delayedStart{Interface: store, delay: s.cfg.CacheStartDelay}
	}
	decode := s.cacheDecoder(res, hints)
	if res.Versions != nil && res.Versions.Remote() {
		b := &batchConverting{Interface: s.store, res: res, done: map[keyRev]*watchcache.Object{}}
		store, decode = b, b.decoder(decode)
	}
	c := watchcache.New(watchcache.Config{
		Store: store, Prefix: res.StoragePrefix, Decode: decode,
		Window: s.cfg.WatchCacheWindow, Buffer: s.cfg.WatchBufferEvents,
		FreshTimeout: s.cfg.FutureRVWait, CompactionPoll: s.cfg.WatchCacheCompactionPoll, Log: s.cfg.Log,
	})
	c.Start()
	s.caches.m[res] = c
	s.caches.hints[res] = hints
	return c
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

// pruneCaches stops the caches of resources no longer served (all, when
// the server stops).
func (s *Service) pruneCaches(all bool) {
	s.caches.mu.Lock()
	var stop []*watchcache.Cache
	for res, c := range s.caches.m {
		if cur, ok := s.registry.Get(res.GVR()); all || !ok || cur != res {
			stop = append(stop, c)
			delete(s.caches.m, res)
			delete(s.caches.hints, res)
		}
	}
	s.caches.mu.Unlock()
	for _, c := range stop {
		c.Stop()
	}
}

// cacheDecoder decodes stored values of res once for the cache: metadata
// for filtering, JSON for the wire. Values this server wrote come from
// hints without decoding.
func (s *Service) cacheDecoder(res *registry.Resource, hints *writeHints) watchcache.Decoder {
	decode := decodeForCache(res, s.cfg.Verify)
	return func(kv storage.KeyValue) (*watchcache.Object, error) {
		o, ok := hints.take(kv)
		if !ok {
			return decode(kv)
		}
		s.counts.hintsUsed.Add(1)
		if s.cfg.Verify {
			want, err := decode(kv)
			if err != nil || !bytes.Equal(want.JSON, o.JSON) || !maps.Equal(want.Labels, o.Labels) || !maps.Equal(want.Fields, o.Fields) ||
				want.Namespace != o.Namespace || want.Name != o.Name {
				panic(fmt.Sprintf("write hint for %s differs from decoding it (%v):\nhint   %s %v %v\ndecode %s %v %v", kv.Key, err, o.JSON, o.Labels, o.Fields, want.JSON, want.Labels, want.Fields))
			}
		}
		return o, nil
	}
}

// batchConverting is the store of the watch cache of a resource whose
// objects a conversion webhook converts: it converts each page of the
// cache's (re)list in as few ConversionReviews as the converter's batch
// bounds allow (one for up to 500 objects or 1 MiB of them, see package
// server/conversion), where decoding the page's values one by one would
// make a call per object, and the cache's decoder then takes the
// converted objects. A page whose batch fails is decoded one value at a
// time, each failing (and retried) on its own as before. Safe for
// concurrent use.
type batchConverting struct {
	storage.Interface
	res  *registry.Resource
	mu   sync.Mutex
	done map[keyRev]*watchcache.Object
}

// keyRev is a stored value's key and revision.
type keyRev struct {
	key string
	rev int64
}

func (b *batchConverting) List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListResult, error) {
	lr, err := b.Interface.List(ctx, prefix, opts)
	if err != nil || len(lr.KVs) < 2 {
		return lr, err
	}
	objs, err := decodeStored(ctx, b.res, lr.KVs)
	if err != nil {
		return lr, nil // decoded one by one: each value's own error
	}
	converted := make(map[keyRev]*watchcache.Object, len(objs))
	for i, obj := range objs {
		kv := lr.KVs[i]
		o, err := cacheObject(b.res, kv, obj)
		if err != nil {
			continue
		}
		converted[keyRev{kv.Key, kv.ModRevision}] = o
	}
	b.mu.Lock()
	b.done = converted // the cache decodes a page before it lists the next
	b.mu.Unlock()
	return lr, nil
}

// decoder takes the objects List converted, else decodes with decode.
func (b *batchConverting) decoder(decode watchcache.Decoder) watchcache.Decoder {
	return func(kv storage.KeyValue) (*watchcache.Object, error) {
		k := keyRev{kv.Key, kv.ModRevision}
		b.mu.Lock()
		o, ok := b.done[k]
		delete(b.done, k)
		b.mu.Unlock()
		if ok {
			return o, nil
		}
		return decode(kv)
	}
}

// decodeForCache decodes a stored value of res for the cache: converted
// once for every watcher of res's version. A conversion webhook that
// fails is retried (watchcache.ErrRetry): the cache waits for it rather
// than leave the object out. With verify, every value served as stored
// (asStored) is checked against encoding it, and a difference panics.
func decodeForCache(res *registry.Resource, verify bool) watchcache.Decoder {
	return func(kv storage.KeyValue) (*watchcache.Object, error) {
		obj, err := FromStorage(res, kv)
		var ce *ConversionError
		if errors.As(err, &ce) && res.Versions.Remote() {
			return nil, fmt.Errorf("%w: %w", watchcache.ErrRetry, err)
		}
		if err != nil {
			return nil, err
		}
		if b := asStored(res, kv); b != nil {
			o := cacheEntry(res, kv, obj, b)
			if verify {
				if want, err := cacheObject(res, kv, obj); err != nil || !bytes.Equal(want.JSON, b) {
					panic(fmt.Sprintf("stored %s served as stored differs from encoding it (%v):\nstored  %s\nencoded %s", kv.Key, err, b, want.JSON))
				}
			}
			return o, nil
		}
		return cacheObject(res, kv, obj)
	}
}

// asStored is kv's value with its resourceVersion spliced in, when that
// is what encoding the decoded object gives and re-encoding it can be
// skipped (a third of a cache's start): a built-in resource stored as it
// is served (no StoredAs, one version, a Stored that changes nothing),
// and a value as toStorage encodes it (sorted keys: apiVersion first, res's
// kind, no resourceVersion). nil otherwise.
func asStored(res *registry.Resource, kv storage.KeyValue) []byte {
	if res.Custom || res.StoredAs != nil || res.Versions != nil ||
		!bytes.HasPrefix(kv.Value, []byte(`{"apiVersion":"`+res.APIVersion()+`",`)) {
		return nil
	}
	if at, ok := topLevelValue(kv.Value, "kind"); !ok || !bytes.HasPrefix(kv.Value[at:], []byte(`"`+res.Kind+`"`)) {
		return nil
	}
	return withResourceVersion(kv.Value, kv.ModRevision)
}

// cacheObject is the cache's form of obj, decoded from kv.
func cacheObject(res *registry.Resource, kv storage.KeyValue, obj *unstructured.Unstructured) (*watchcache.Object, error) {
	b, err := json.Marshal(obj.Object)
	if err != nil {
		return nil, err
	}
	return cacheEntry(res, kv, obj, b), nil
}

// cacheEntry is the cache's form of obj, decoded from kv and encoded as b.
func cacheEntry(res *registry.Resource, kv storage.KeyValue, obj *unstructured.Unstructured, b []byte) *watchcache.Object {
	return &watchcache.Object{
		Key: kv.Key, Namespace: obj.GetNamespace(), Name: obj.GetName(),
		Labels: labels.Set(obj.GetLabels()), Fields: fieldSet(res, obj),
		Rev: kv.ModRevision, JSON: b,
	}
}

func filterOf(sel selector, ns string) watchcache.Filter {
	return watchcache.Filter{Namespace: ns, Labels: sel.labels, Fields: sel.fields}
}

// errNoCache sends a request down the storage path.
var errNoCache = errors.New("not served from the watch cache")

// usableCache returns res's cache, or nil when the request goes to etcd:
// no cache, or the cache of a version converted by a webhook that has
// not loaded (the webhook fails: etcd's answer says why, where the cache
// would wait).
func (s *Service) usableCache(res *registry.Resource) *watchcache.Cache {
	c := s.cacheFor(res)
	if c == nil || (res.Versions != nil && res.Versions.Remote() && !c.Ready()) {
		return nil
	}
	return c
}

// listFromCache serves a list from the cache where Kubernetes' cacher
// does (its shouldDelegateList, with ListFromCacheSnapshot):
//   - resourceVersion "0": the cache's state, the limit ignored;
//   - none (consistent): after the cache caught up with etcd, a page or all;
//   - NotOlderThan R: once the cache reached R, a page or all;
//   - exact R (resourceVersionMatch=Exact, or R with a limit) and a
//     continue token at R: from the cache's snapshot at R, when it holds one.
//
// A page has the items, continue token, remainingItemCount and
// resourceVersion etcd would give (see readList): the same token continues
// on either path, on this server or another. A revision the cache has no
// snapshot of, a cache that does not catch up in time, or one that is not
// ready, go to etcd (errNoCache), which serves them or answers 410; so do
// the pages and exact lists of a version a conversion webhook converts.
//
// While the cache loads, a page without selectors, and any list of the
// server's own (client false), is read from etcd; a client's list
// without a limit, or with a selector, waits for the cache instead of
// reading the whole collection from etcd while the cache loads it: at 1M
// objects such lists, retried, took minutes of etcd and CPU each and
// starved the load. (Kubernetes' cacher answers them 429 "storage is
// (re)initializing"; objwatch holds them, bounded by the request's
// timeout, which clients that do not retry 429 also get through.)
func (s *Service) listFromCache(ctx context.Context, res *registry.Resource, ns string, sel selector, plan listPlan, client bool) (*List, error) {
	c := s.usableCache(res)
	if c == nil {
		return nil, errNoCache
	}
	limit := plan.limit
	if res.Versions != nil && res.Versions.Remote() && (plan.fromCont || plan.rev > 0 || (limit > 0 && !plan.any)) {
		// Kubernetes converts each list it serves, so a failing webhook
		// fails every read; this cache holds objects it converted earlier.
		// Its pages go to etcd, which converts them now (as before
		// snapshots; its full lists are still served here).
		return nil, errNoCache
	}
	if _, init := c.Initializing(); init && (!client || (plan.limit > 0 && sel.empty())) {
		return nil, errNoCache // etcd answers while the cache loads; see cacheNotReady
	}
	switch {
	case plan.any:
		limit = 0 // as Kubernetes' cacher: "0" lists everything it has
		if err := c.WaitFor(ctx, 0); err != nil {
			return nil, errNoCache
		}
	case plan.rev > 0 || plan.minRev > 0:
		wctx, cancel := context.WithTimeout(ctx, s.cfg.FutureRVWait)
		err := c.WaitFor(wctx, max(plan.rev, plan.minRev))
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, watchcache.ErrNotReady), err != nil && plan.rev > 0:
			return nil, errNoCache // etcd answers: its list failed, or an exact revision
		case err != nil:
			return nil, apistatus.TooLarge()
		}
	default:
		if _, err := c.WaitFresh(ctx); err != nil {
			return nil, errNoCache
		}
	}
	prefix := res.Prefix(ns)
	start := ""
	if plan.start != "" {
		start = prefix + plan.start
	}
	p, err := c.ListAt(filterOf(sel, ns), plan.rev, start, int(limit))
	if err != nil {
		return nil, errNoCache
	}
	l := &List{Meta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(p.Rev, 10)}, Raw: make([][]byte, len(p.Objects))}
	for i, o := range p.Objects {
		l.Raw[i] = o.JSON
	}
	if p.More {
		last := p.Objects[len(p.Objects)-1].Key
		l.Meta.Continue = encodeContinue(p.Rev, strings.TrimPrefix(last, prefix)+"\x00", time.Now())
		if p.Remaining >= 0 {
			l.Meta.RemainingItemCount = &p.Remaining
		}
	}
	if limit > 0 || plan.rev > 0 || plan.fromCont {
		s.counts.cachedPages.Add(1)
		if s.cfg.Verify {
			s.verifyCachedList(ctx, res, ns, sel, plan, limit, l)
		}
	}
	return l, nil
}

// verifyCachedList panics where a list the cache served differs from
// etcd's answer at the same revision (Config.Verify): the items and their
// resourceVersions, the continue key and the remaining count. A revision
// etcd has compacted meanwhile is not checked.
func (s *Service) verifyCachedList(ctx context.Context, res *registry.Resource, ns string, sel selector, plan listPlan, limit int64, l *List) {
	rev, _ := strconv.ParseInt(l.Meta.ResourceVersion, 10, 64)
	items, meta, err := s.readList(ctx, res, ns, sel, listPlan{rev: rev, limit: limit, start: plan.start})
	if err != nil {
		return
	}
	summary := func(keys []string, m metav1.ListMeta) string {
		cont := ""
		if m.Continue != "" {
			t, _ := decodeContinue(m.Continue)
			cont = fmt.Sprintf("%d %q", t.RV, t.Start)
		}
		n := int64(-1)
		if m.RemainingItemCount != nil {
			n = *m.RemainingItemCount
		}
		return fmt.Sprintf("rv %s continue %s remaining %d items %v", m.ResourceVersion, cont, n, keys)
	}
	want := make([]string, len(items))
	for i, o := range items {
		want[i] = o.GetNamespace() + "/" + o.GetName() + "@" + o.GetResourceVersion()
	}
	objs, err := l.Objects()
	if err != nil {
		panic(fmt.Sprintf("list served from the watch cache does not decode: %v", err))
	}
	got := make([]string, len(objs))
	for i, o := range objs {
		got[i] = o.GetNamespace() + "/" + o.GetName() + "@" + o.GetResourceVersion()
	}
	if g, w := summary(got, l.Meta), summary(want, meta); g != w {
		panic(fmt.Sprintf("list of %s served from the watch cache differs from etcd's:\ncache %s\netcd  %s", res.StoragePrefix, g, w))
	}
}

// getFromCache reads one object from the cache once it has reached rev.
func (s *Service) getFromCache(ctx context.Context, res *registry.Resource, ns, name string, rev int64) (*unstructured.Unstructured, error) {
	c := s.usableCache(res)
	if c == nil {
		return nil, errNoCache
	}
	if _, init := c.Initializing(); init {
		return nil, errNoCache // etcd answers while the cache loads, as Kubernetes
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.FutureRVWait)
	err := c.WaitFor(wctx, rev)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, watchcache.ErrNotReady):
		return nil, errNoCache // its list failed: etcd answers
	case err != nil && rev > 0:
		return nil, apistatus.TooLarge()
	case err != nil:
		return nil, errNoCache
	}
	o, _, ok := c.Get(res.Key(ns, name))
	if !ok {
		return nil, apierrors.NewNotFound(gr(res), name)
	}
	return Decode(o.JSON)
}

// cacheWatch starts a watch served from the cache. It returns errNoCache
// (having written nothing) when the cache cannot serve it, and no source
// and no error when ctx ended while it waited.
func (s *Service) cacheWatch(ctx context.Context, req *Request, wr watchRequest) (*cacheSource, error) {
	c := s.usableCache(req.Resource)
	if c == nil {
		return nil, errNoCache
	}
	if d, init := c.Initializing(); init && req.User != nil {
		return nil, cacheNotReady(d)
	}
	opts := watchcache.WatchOptions{
		Filter: filterOf(wr.sel, req.Namespace), From: wr.rv,
		Initial: wr.initial, InitialEnd: wr.initialEnd,
		Deadline: time.Now().Add(wr.timeout),
	}
	if wr.bookmarks {
		opts.BookmarkEvery = s.cfg.BookmarkInterval
	}
	// Establish the start like the storage path does: a resourceVersion
	// newer than the cache waits (then 504); none means "consistent now".
	switch {
	case wr.rv > 0:
		wctx, cancel := context.WithTimeout(ctx, s.cfg.FutureRVWait)
		err := c.WaitFor(wctx, wr.rv)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, nil
		case errors.Is(err, watchcache.ErrNotReady):
			return nil, errNoCache // its list failed: etcd answers
		case err != nil:
			return nil, &StartError{apistatus.TooLarge()}
		}
	case wr.consistent:
		rev, err := c.WaitFresh(ctx)
		if err != nil {
			return nil, errNoCache
		}
		if !wr.initial {
			opts.From = rev
		}
	default:
		if err := c.WaitFor(ctx, 0); err != nil {
			return nil, errNoCache
		}
		if !wr.initial {
			opts.From = c.Revision()
		}
	}
	cw, err := c.Watch(ctx, opts)
	if err != nil {
		// Older than the cache's history (e.g. from before this server
		// started): etcd may still have it, or answers 410 itself.
		return nil, errNoCache
	}
	src := &cacheSource{cw: cw, rv: wr.rv, bookmarks: wr.bookmarks, decoded: wr.decoded}
	if wr.drop {
		src.dropped = &s.caches.dropped
	}
	return src, nil
}

// cacheNotReady is Kubernetes' answer to a watch of a resource whose
// watch cache is still loading its first list (cacher's ready state,
// KEP 4568): 429 "storage is (re)initializing", with a Retry-After that
// grows with how long the cache has been loading, e^(0.06·s) clamped to
// 1..30 seconds. Gets and pages without selectors are served by etcd
// meanwhile, and a client's other lists wait for the cache (Kubernetes
// answers them 429 too; see listFromCache). The server's own followers
// (requests without a user) wait for the cache instead.
func cacheNotReady(loading time.Duration) error {
	retry := int(min(30, max(1, math.Exp(0.06*loading.Seconds()))))
	return apierrors.NewTooManyRequests("storage is (re)initializing", retry)
}

// cacheSource feeds a watch from a watch-cache watcher, whose events are
// encoded once for all its watchers.
type cacheSource struct {
	cw        *watchcache.Watcher
	rv        int64 // the watch's resourceVersion, for a 410
	bookmarks bool
	decoded   bool       // the watch renders objects itself, not the shared frames
	dropped   *frameMemo // set when the watch drops managedFields
}

func (c *cacheSource) TryNext() (Item, bool) {
	for {
		it, ok := c.cw.TryNext()
		switch {
		case !ok:
			return Item{}, false
		case it.Type == watchcache.Bookmark:
			if !c.bookmarks && !it.InitialEnd {
				continue
			}
			return Item{Type: it.Type, Rev: it.Rev, InitialEnd: it.InitialEnd}, true
		case c.decoded:
			return Item{Type: it.Type, JSON: it.Object.JSON}, true
		case c.dropped != nil:
			b, err := c.dropped.frame(it)
			if err != nil {
				// Not an object the server encoded: send it whole.
				b = it.Frame()
			}
			return Item{Type: it.Type, Frame: b}, true
		default:
			return Item{Type: it.Type, Frame: it.Frame()}, true
		}
	}
}

func (c *cacheSource) Wait(ctx context.Context, idle <-chan time.Time) error {
	err := c.cw.Wait(ctx, idle)
	switch {
	case err == nil || ctx.Err() != nil:
		return err
	case errors.Is(err, watchcache.ErrTooSlow):
		return apistatus.TooSlow()
	case errors.Is(err, storage.ErrCompacted):
		return apistatus.TooOld(c.rv, 0)
	case errors.Is(err, storage.ErrUnavailable):
		return apistatus.Unavailable(err) // the cache lost its feed
	}
	return ErrWatchEnd
}

func (c *cacheSource) Stop() { c.cw.Stop() }
