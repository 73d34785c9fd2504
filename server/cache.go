package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

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
}

// hintsFor returns the write hints of res's cache, nil when it has none.
func (s *Server) hintsFor(res *registry.Resource) *writeHints {
	s.caches.mu.Lock()
	defer s.caches.mu.Unlock()
	return s.caches.hints[res]
}

// existingCache returns res's watch cache if it has one; unlike cacheFor,
// it starts none.
func (s *Server) existingCache(res *registry.Resource) *watchcache.Cache {
	if s.cfg.DisableWatchCache {
		return nil
	}
	s.caches.mu.Lock()
	defer s.caches.mu.Unlock()
	return s.caches.m[res]
}

// cacheFor returns res's watch cache, or nil when caching is off.
func (s *Server) cacheFor(res *registry.Resource) *watchcache.Cache {
	if s.cfg.DisableWatchCache {
		return nil
	}
	s.caches.mu.Lock()
	defer s.caches.mu.Unlock()
	select {
	case <-s.stopping.Done():
		return nil
	default:
	}
	if c := s.caches.m[res]; c != nil {
		return c
	}
	if cur, ok := s.registry.Get(res.GVR()); !ok || cur != res {
		return nil // no longer served (a CRD changed meanwhile)
	}
	if s.caches.m == nil {
		s.caches.m = map[*registry.Resource]*watchcache.Cache{}
		s.caches.hints = map[*registry.Resource]*writeHints{}
	}
	hints := &writeHints{m: map[string]writeHint{}}
	c := watchcache.New(watchcache.Config{
		Store: s.store, Prefix: res.StoragePrefix, Decode: s.cacheDecoder(res, hints),
		Window: s.cfg.WatchCacheWindow, Buffer: s.cfg.WatchBufferEvents,
		FreshTimeout: s.cfg.FutureRVWait, Log: s.cfg.Log,
	})
	c.Start()
	s.caches.m[res] = c
	s.caches.hints[res] = hints
	return c
}

// pruneCaches stops the caches of resources no longer served (all, when
// the server stops).
func (s *Server) pruneCaches(all bool) {
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
func (s *Server) cacheDecoder(res *registry.Resource, hints *writeHints) watchcache.Decoder {
	decode := decodeForCache(res)
	return func(kv storage.KeyValue) (*watchcache.Object, error) {
		o, ok := hints.take(kv)
		if !ok {
			return decode(kv)
		}
		s.hintsUsed.Add(1)
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

// decodeForCache decodes a stored value of res for the cache.
func decodeForCache(res *registry.Resource) watchcache.Decoder {
	return func(kv storage.KeyValue) (*watchcache.Object, error) {
		obj, err := fromStorage(res, kv)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(obj.Object)
		if err != nil {
			return nil, err
		}
		return &watchcache.Object{
			Key: kv.Key, Namespace: obj.GetNamespace(), Name: obj.GetName(),
			Labels: labels.Set(obj.GetLabels()), Fields: fieldSet(res, obj),
			Rev: kv.ModRevision, JSON: b,
		}, nil
	}
}

func filterOf(sel selector, ns string) watchcache.Filter {
	return watchcache.Filter{Namespace: ns, Labels: sel.labels, Fields: sel.fields}
}

// errNoCache sends a request down the storage path.
var errNoCache = errors.New("not served from the watch cache")

// listFromCache serves a list from the cache when Kubernetes' rules allow
// it: no continue token or limit, and no exact revision. A consistent list
// (no resourceVersion) waits for the cache to catch up with etcd and falls
// back to etcd if that takes too long.
func (s *Server) listFromCache(w http.ResponseWriter, r *http.Request, res *registry.Resource, ns string, sel selector, plan listPlan) error {
	c := s.cacheFor(res)
	if c == nil || plan.fromCont || plan.rev > 0 || (plan.limit > 0 && !plan.any) {
		return errNoCache
	}
	ctx := r.Context()
	switch {
	case plan.any:
		if err := c.WaitFor(ctx, 0); err != nil {
			return errNoCache
		}
	case plan.minRev > 0:
		wctx, cancel := context.WithTimeout(ctx, s.cfg.FutureRVWait)
		err := c.WaitFor(wctx, plan.minRev)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return tooLarge()
		}
	default:
		if _, err := c.WaitFresh(ctx); err != nil {
			return errNoCache
		}
	}
	objs, rev, _, err := c.List(filterOf(sel, ns), "", 0)
	if err != nil {
		return errNoCache
	}
	rv := strconv.FormatInt(rev, 10)
	if v, ok := wantsTable(r); ok {
		items, err := decodeCached(objs)
		if err != nil {
			return err
		}
		t := table(res, v, items, r.URL.Query().Get("includeObject"))
		t.ResourceVersion = rv
		writeJSON(w, http.StatusOK, t)
		return nil
	}
	// The objects are already encoded: the list is their concatenation.
	n := 128
	for _, o := range objs {
		n += len(o.JSON) + 1
	}
	var b bytes.Buffer
	b.Grow(n)
	b.WriteString(`{"kind":"`)
	b.WriteString(res.ListKind)
	b.WriteString(`","apiVersion":"`)
	b.WriteString(res.APIVersion())
	b.WriteString(`","metadata":{"resourceVersion":"`)
	b.WriteString(rv)
	b.WriteString(`"},"items":[`)
	for i, o := range objs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(o.JSON)
	}
	b.WriteString("]}")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(b.Bytes())
	return nil
}

// getFromCache reads one object from the cache once it has reached rev.
func (s *Server) getFromCache(ctx context.Context, res *registry.Resource, info requestInfo, rev int64) (*unstructured.Unstructured, error) {
	c := s.cacheFor(res)
	if c == nil {
		return nil, errNoCache
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.FutureRVWait)
	err := c.WaitFor(wctx, rev)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil && rev > 0:
		return nil, tooLarge()
	case err != nil:
		return nil, errNoCache
	}
	o, _, ok := c.Get(res.Key(info.namespace, info.name))
	if !ok {
		return nil, apierrors.NewNotFound(s.gr(res), info.name)
	}
	return decodeObject(o.JSON)
}

func decodeCached(objs []*watchcache.Object) ([]*unstructured.Unstructured, error) {
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		u, err := decodeObject(o.JSON)
		if err != nil {
			return nil, err
		}
		out[i] = u
	}
	return out, nil
}

// watchFromCache streams a watch from the cache. It returns errNoCache
// (having written nothing) when the cache cannot serve it.
func (s *Server) watchFromCache(ctx context.Context, ww *watchWriter, res *registry.Resource, info requestInfo, wr watchRequest) error {
	c := s.cacheFor(res)
	if c == nil {
		return errNoCache
	}
	opts := watchcache.WatchOptions{
		Filter: filterOf(wr.sel, info.namespace), From: wr.rv,
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
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// As in Kubernetes, a parsed resourceVersion's failures arrive
			// as an ERROR event.
			startStream(ww)
			s.sendError(json.NewEncoder(ww), ww, tooLarge())
			return nil
		}
	case wr.consistent:
		rev, err := c.WaitFresh(ctx)
		if err != nil {
			return errNoCache
		}
		if !wr.initial {
			opts.From = rev
		}
	default:
		if err := c.WaitFor(ctx, 0); err != nil {
			return errNoCache
		}
		if !wr.initial {
			opts.From = c.Revision()
		}
	}
	cw, err := c.Watch(ctx, opts)
	if err != nil {
		// Older than the cache's history (e.g. from before this server
		// started): etcd may still have it, or answers 410 itself.
		return errNoCache
	}
	defer cw.Stop()
	startStream(ww)
	enc := json.NewEncoder(ww)
	bookmarkObj := func(rev int64, end bool) map[string]any {
		md := map[string]any{"resourceVersion": strconv.FormatInt(rev, 10)}
		if end {
			md["annotations"] = map[string]any{initialEventsEnd: "true"}
		}
		return map[string]any{"kind": res.Kind, "apiVersion": res.APIVersion(), "metadata": md}
	}
	// Events sent are counted here and added to the shared counters at
	// each flush: a thousand watches adding one by one to the same
	// counter would contend for its cache line.
	types := [...]string{watchcache.Added, watchcache.Modified, watchcache.Deleted, watchcache.Bookmark}
	var (
		counters [len(types)]prometheus.Counter
		pending  [len(types)]int
	)
	count := func(typ string) {
		for i, t := range types {
			if t == typ {
				pending[i]++
				return
			}
		}
	}
	addCounts := func() {
		for i, n := range pending {
			if n == 0 {
				continue
			}
			if counters[i] == nil {
				counters[i] = s.metrics.events.WithLabelValues(res.Group, res.Plural, types[i])
			}
			counters[i].Add(float64(n))
			pending[i] = 0
		}
	}
	defer addCounts()
	// Output is flushed when the watch has no more events waiting: at once
	// when the last flush is a window (the flush pacer's) ago, otherwise at
	// the end of that window. A watch receiving many events gets them in few
	// writes (fewer system calls and TLS records) at a bounded extra
	// latency; a quiet watch's event goes out at once.
	var (
		lastFlush time.Time
		dirty     bool
		timer     *time.Timer
	)
	flushEvery := s.pacer.window()
	flush := func() {
		ww.Flush()
		addCounts()
		lastFlush, dirty = time.Now(), false
		flushEvery = s.pacer.window()
	}
	// sleep waits for d or the end of ctx.
	sleep := func(d time.Duration) error {
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		it, ok := cw.TryNext()
		if !ok {
			since := time.Since(lastFlush)
			if dirty && since >= flushEvery {
				flush()
				continue
			}
			var err error
			if since < flushEvery {
				// Whatever arrives before the window ends waits for its
				// end anyway: sleep through it instead of waking per
				// event, then send all that came in one write.
				err = sleep(flushEvery - since)
			} else {
				err = cw.Wait(ctx, ww.idle())
			}
			if err == nil {
				continue
			}
			switch {
			case ctx.Err() != nil:
			case errors.Is(err, watchcache.ErrTooSlow):
				s.sendError(enc, ww, tooSlow())
			case errors.Is(err, storage.ErrCompacted):
				s.sendError(enc, ww, tooOld(wr.rv, 0))
			default:
				flush()
			}
			return nil
		}
		var werr error
		switch {
		case it.Type == watchcache.Bookmark:
			if !wr.bookmarks && !it.InitialEnd {
				continue
			}
			werr = enc.Encode(watchEvent{Type: it.Type, Object: bookmarkObj(it.Rev, it.InitialEnd)})
		case wr.tableVersion != "":
			var obj *unstructured.Unstructured
			if obj, werr = decodeObject(it.Object.JSON); werr == nil {
				t := table(res, wr.tableVersion, []*unstructured.Unstructured{obj}, wr.includeObject)
				t.ResourceVersion = obj.GetResourceVersion()
				werr = enc.Encode(watchEvent{Type: it.Type, Object: t})
			}
		default:
			_, werr = ww.Write(it.Frame())
		}
		if werr != nil {
			return nil
		}
		count(it.Type)
		dirty = true
	}
}
