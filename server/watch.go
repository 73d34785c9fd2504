package server

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/prometheus/client_golang/prometheus"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/server/watchstream"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// initialEventsEnd annotates the bookmark that ends a watch's initial events
// (sendInitialEvents=true).
const initialEventsEnd = "k8s.io/initial-events-end"

// watchRequest is a parsed and validated watch request.
type watchRequest struct {
	sel           selector
	rv            int64
	initial       bool // send synthetic ADDED events for the current state
	initialEnd    bool // end them with the initial-events-end bookmark
	consistent    bool // no resourceVersion: start from a quorum read
	bookmarks     bool
	timeout       time.Duration
	tableVersion  string
	includeObject string
}

func (s *Server) parseWatch(r *http.Request, res *registry.Resource, info requestInfo) (watchRequest, error) {
	var wr watchRequest
	o, err := listOptions(r, "watch")
	if err != nil {
		return wr, err
	}
	if wr.sel, err = selectorOf(o, res); err != nil {
		return wr, err
	}
	if info.name != "" {
		wr.sel.fields = fields.AndSelectors(wr.sel.fields, fields.OneTermEqualSelector("metadata.name", info.name))
	}
	if wr.rv, err = parseRV(o.ResourceVersion); err != nil {
		return wr, err
	}
	wr.consistent = o.ResourceVersion == ""
	wr.bookmarks = o.AllowWatchBookmarks
	if o.SendInitialEvents != nil {
		wr.initial = *o.SendInitialEvents
	} else {
		wr.initial = o.ResourceVersion == "" || wr.rv == 0
	}
	// As in Kubernetes, the initial events end with a bookmark only where
	// bookmarks are allowed.
	wr.initialEnd = wr.initial && wr.bookmarks
	if o.TimeoutSeconds != nil {
		wr.timeout = time.Duration(*o.TimeoutSeconds) * time.Second
	}
	if wr.timeout == 0 {
		min := s.cfg.MinWatchTimeout
		wr.timeout = min + time.Duration(rand.Int64N(int64(min)))
	}
	wr.tableVersion, _ = wantsTable(r)
	wr.includeObject = r.URL.Query().Get("includeObject")
	return wr, nil
}

// watchEvent is the wire form of one event. CommitTime is objwatch's
// extension: when the server learned of the change from etcd (see
// watchcache.Item.Frame); Kubernetes clients ignore it.
type watchEvent struct {
	Type       string     `json:"type"`
	Object     any        `json:"object"`
	CommitTime *time.Time `json:"commitTime,omitempty"`
}

// watch streams changes as newline-delimited watch events. Once the request
// is accepted (200 sent), failures arrive as an ERROR event with a Status.
//
// Every watch runs one loop, serveWatch, fed by a watchSource: the
// resource's watch cache when it can serve the request (cacheWatch),
// otherwise an etcd watch (storageWatch).
func (s *Server) watch(w http.ResponseWriter, r *http.Request, res *registry.Resource, info requestInfo) {
	wr, err := s.parseWatch(r, res, info)
	if err != nil {
		writeStatus(w, err)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeStatus(w, apierrors.NewInternalError(errors.New("streaming unsupported")))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), wr.timeout)
	defer cancel()
	// A stopping server ends its watches (without a goroutine per watch).
	defer context.AfterFunc(s.stopping, cancel)()
	ww := watchstream.NewWriter(w, r, flusher, s.cfg.WatchWriteTimeout, cancel)
	defer ww.Stop()

	s.metrics.watches.WithLabelValues(res.Group, res.Plural).Inc()
	defer s.metrics.watches.WithLabelValues(res.Group, res.Plural).Dec()
	src, err := s.cacheWatch(ctx, res, info, wr)
	if errors.Is(err, errNoCache) {
		src, err = s.storageWatch(ctx, res, info, wr)
	}
	var late *lateError
	switch {
	case errors.As(err, &late):
		// As in Kubernetes, a parsed resourceVersion's failures arrive
		// as an ERROR event.
		ww.Start()
		s.sendError(json.NewEncoder(ww), ww, late.err)
	case err != nil:
		writeStatus(w, err)
	case src != nil:
		s.serveWatch(ctx, ww, res, wr, src)
	}
}

// lateError is a failure found while starting a watch that is sent as an
// ERROR event in the stream rather than as the response's status.
type lateError struct{ err error }

func (e *lateError) Error() string { return e.err.Error() }

// errWatchEnd ends a watch without an ERROR event.
var errWatchEnd = errors.New("watch ended")

// watchItem is one event for a watch to send.
type watchItem struct {
	typ string
	// frame is the encoded event, when the source has it (the watch
	// cache's, shared by its watchers); otherwise obj or objJSON is sent.
	frame   []byte
	obj     *unstructured.Unstructured
	objJSON []byte
	// at is when the server learned of the change (storage events).
	at *time.Time
	// rev and initialEnd: a bookmark's revision, and whether it ends the
	// initial events.
	rev        int64
	initialEnd bool
}

// watchSource feeds one watch. It belongs to the goroutine serving the
// watch, which stops it.
type watchSource interface {
	// tryNext returns the next item without blocking; ok is false when
	// none is waiting.
	tryNext() (it watchItem, ok bool)
	// wait blocks until an item may be waiting, idle fires or ctx ends.
	// An error ends the watch: errWatchEnd quietly, any other as an ERROR
	// event after what was sent before.
	wait(ctx context.Context, idle <-chan time.Time) error
	stop()
}

// serveWatch sends src's items until the watch ends.
//
// Output is flushed when the watch has no more items waiting: at once when
// the last flush is a window (the flush pacer's) ago, otherwise at the end
// of that window. A watch receiving many events gets them in few writes
// (fewer system calls and TLS records) at a bounded extra latency; a quiet
// watch's event goes out at once.
func (s *Server) serveWatch(ctx context.Context, ww *watchstream.Writer, res *registry.Resource, wr watchRequest, src watchSource) {
	defer src.stop()
	ww.Start()
	enc := json.NewEncoder(ww)
	counts := eventCounts{m: s.metrics, res: res}
	defer counts.add()
	var (
		lastFlush time.Time
		dirty     bool
		timer     *time.Timer
	)
	flushEvery := s.pacer.Batch()
	flush := func() {
		ww.Flush()
		counts.add()
		lastFlush, dirty = time.Now(), false
		flushEvery = s.pacer.Batch()
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
		it, ok := src.tryNext()
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
				err = src.wait(ctx, ww.Idle())
			}
			switch {
			case err == nil:
				continue
			case ctx.Err() != nil:
			case errors.Is(err, errWatchEnd):
				flush()
			default:
				s.sendError(enc, ww, err)
			}
			return
		}
		if err := s.writeItem(enc, ww, res, &wr, it); err != nil {
			return
		}
		counts.pending[eventIndex(it.typ)]++
		dirty = true
	}
}

// writeItem writes one item of a watch (unflushed).
func (s *Server) writeItem(enc *json.Encoder, ww *watchstream.Writer, res *registry.Resource, wr *watchRequest, it watchItem) error {
	switch {
	case it.typ == watchcache.Bookmark:
		return enc.Encode(watchEvent{Type: it.typ, Object: bookmarkObject(res, it.rev, it.initialEnd)})
	case wr.tableVersion != "":
		obj := it.obj
		if obj == nil {
			var err error
			if obj, err = decodeObject(it.objJSON); err != nil {
				return err
			}
		}
		t := table(res, wr.tableVersion, []*unstructured.Unstructured{obj}, wr.includeObject)
		t.ResourceVersion = obj.GetResourceVersion()
		return enc.Encode(watchEvent{Type: it.typ, Object: t})
	case it.frame != nil:
		_, err := ww.Write(it.frame)
		return err
	default:
		return enc.Encode(watchEvent{Type: it.typ, Object: it.obj.Object, CommitTime: it.at})
	}
}

// bookmarkObject is a bookmark's object: kind, apiVersion and
// metadata.resourceVersion (and the initial-events-end annotation).
func bookmarkObject(res *registry.Resource, rev int64, initialEnd bool) map[string]any {
	md := map[string]any{"resourceVersion": strconv.FormatInt(rev, 10)}
	if initialEnd {
		md["annotations"] = map[string]any{initialEventsEnd: "true"}
	}
	return map[string]any{"kind": res.Kind, "apiVersion": res.APIVersion(), "metadata": md}
}

// eventTypes are the types a watch sends, in eventCounts order.
var eventTypes = [...]string{watchcache.Added, watchcache.Modified, watchcache.Deleted, watchcache.Bookmark}

func eventIndex(typ string) int {
	for i, t := range eventTypes {
		if t == typ {
			return i
		}
	}
	return 0
}

// eventCounts counts one watch's sent events and adds them to the shared
// counters at each flush: a thousand watches adding one by one to the same
// counter would contend for its cache line.
type eventCounts struct {
	m        *metrics
	res      *registry.Resource
	counters [len(eventTypes)]prometheus.Counter
	pending  [len(eventTypes)]int
}

func (c *eventCounts) add() {
	for i, n := range c.pending {
		if n == 0 {
			continue
		}
		if c.counters[i] == nil {
			c.counters[i] = c.m.events.WithLabelValues(c.res.Group, c.res.Plural, eventTypes[i])
		}
		c.counters[i].Add(float64(n))
		c.pending[i] = 0
	}
}

// storageWatch starts a watch served from an etcd watch: without the
// cache, or from a revision older than the cache's history. Its starting
// point is established before answering, so that its errors are plain
// HTTP errors; later ones arrive as ERROR events.
func (s *Server) storageWatch(ctx context.Context, res *registry.Resource, info requestInfo, wr watchRequest) (watchSource, error) {
	gr := s.gr(res)
	src := &storageSource{s: s, res: res, sel: wr.sel, initialEnd: wr.initialEnd}
	from := wr.rv + 1
	if wr.initial {
		if wr.rv > 0 {
			if err := s.waitForRevision(ctx, wr.rv); err != nil {
				return nil, err
			}
		}
		items, rev, err := s.listAll(ctx, res, info.namespace, wr.sel)
		if err != nil {
			return nil, err
		}
		src.initial, from = items, rev+1
	} else if wr.rv == 0 {
		rev, err := s.store.Revision(ctx)
		if err != nil {
			return nil, storageError(err, gr, "")
		}
		from = rev + 1
	}
	watcher, err := s.store.Watch(ctx, res.Prefix(info.namespace), from)
	if err != nil {
		return nil, storageError(err, gr, "")
	}
	src.watcher, src.sent = watcher, from-1
	if wr.bookmarks {
		// Bookmarks go out every BookmarkInterval and once shortly before
		// the timeout; each asks etcd for progress so the bookmark's
		// revision covers changes elsewhere in the store too.
		src.every, src.deadline = s.cfg.BookmarkInterval, time.Now().Add(wr.timeout)
		src.bookmarkT = time.NewTimer(src.nextBookmark())
	}
	return src, nil
}

// storageSource feeds a watch from an etcd watch: the initial objects
// first, then the changes, translated for the watch's selection.
type storageSource struct {
	s       *Server
	res     *registry.Resource
	sel     selector
	watcher storage.Watcher
	initial []*unstructured.Unstructured
	// initialEnd: the initial events still have to end with a bookmark.
	initialEnd bool
	sent       int64 // the revision every sent event is at or below
	pending    *storage.Event
	err        error // ends the watch once the items before it are sent

	every        time.Duration
	deadline     time.Time
	bookmarkT    *time.Timer // nil: no bookmarks
	wantProgress bool
}

func (src *storageSource) nextBookmark() time.Duration {
	d := src.every
	if last := time.Until(src.deadline) - 2*time.Second; last > 0 && last < d {
		d = last
	}
	return d
}

func (src *storageSource) bookmarkC() <-chan time.Time {
	if src.bookmarkT == nil {
		return nil
	}
	return src.bookmarkT.C
}

func (src *storageSource) bookmarkDue() {
	if err := src.watcher.RequestProgress(context.Background()); err == nil {
		src.wantProgress = true
	}
	src.bookmarkT.Reset(src.nextBookmark())
}

func (src *storageSource) tryNext() (watchItem, bool) {
	if len(src.initial) > 0 {
		obj := src.initial[0]
		src.initial = src.initial[1:]
		return watchItem{typ: watchcache.Added, obj: obj}, true
	}
	if src.initialEnd {
		src.initialEnd = false
		return watchItem{typ: watchcache.Bookmark, rev: src.sent, initialEnd: true}, true
	}
	for src.err == nil {
		var ev storage.Event
		if src.pending != nil {
			ev, src.pending = *src.pending, nil
		} else {
			var ok bool
			select {
			case ev, ok = <-src.watcher.Events():
				if !ok {
					src.err = errWatchEnd
					return watchItem{}, false
				}
			case <-src.bookmarkC():
				src.bookmarkDue()
				continue
			default:
				return watchItem{}, false
			}
		}
		if it, ok := src.translate(ev); ok {
			return it, true
		}
	}
	return watchItem{}, false
}

// translate turns a storage event into the item to send, if any.
func (src *storageSource) translate(ev storage.Event) (watchItem, bool) {
	switch ev.Type {
	case storage.Progress:
		if src.wantProgress && ev.Revision >= src.sent {
			src.wantProgress = false
			src.sent = ev.Revision
			return watchItem{typ: watchcache.Bookmark, rev: src.sent}, true
		}
		return watchItem{}, false
	case storage.Error:
		src.err = storageError(ev.Err, src.s.gr(src.res), "")
		return watchItem{}, false
	}
	typ, obj, err := src.s.translate(src.res, src.sel, ev)
	if err != nil {
		src.err = apierrors.NewInternalError(err)
		return watchItem{}, false
	}
	src.sent = ev.Revision
	if typ == "" {
		return watchItem{}, false
	}
	now := time.Now().UTC()
	return watchItem{typ: typ, obj: obj, at: &now}, true
}

func (src *storageSource) wait(ctx context.Context, idle <-chan time.Time) error {
	if src.err != nil {
		return src.err
	}
	if src.pending != nil || len(src.initial) > 0 || src.initialEnd {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-idle:
	case <-src.bookmarkC():
		src.bookmarkDue()
	case ev, ok := <-src.watcher.Events():
		if !ok {
			return errWatchEnd
		}
		src.pending = &ev
	}
	return nil
}

func (src *storageSource) stop() {
	if src.bookmarkT != nil {
		src.bookmarkT.Stop()
	}
	src.watcher.Stop()
}

func (s *Server) sendError(enc *json.Encoder, f http.Flusher, err error) {
	st := statusOf(err)
	st.Kind, st.APIVersion = "Status", "v1"
	enc.Encode(watchEvent{Type: "ERROR", Object: st})
	f.Flush()
}

// translate turns a storage event into a watch event for a watcher with the
// given selection: an object entering the selection is ADDED, one leaving it
// is DELETED (with its last matching state and the event's revision), and
// changes outside it are dropped (empty type).
func (s *Server) translate(res *registry.Resource, sel selector, ev storage.Event) (string, *unstructured.Unstructured, error) {
	switch ev.Type {
	case storage.Delete:
		obj, err := fromStorage(res, ev.KV)
		if err != nil {
			return "", nil, err
		}
		if !sel.matches(res, obj) {
			return "", nil, nil
		}
		return "DELETED", obj, nil
	case storage.Put:
		obj, err := fromStorage(res, ev.KV)
		if err != nil {
			return "", nil, err
		}
		cur := sel.matches(res, obj)
		if ev.PrevKV == nil {
			if !cur {
				return "", nil, nil
			}
			return "ADDED", obj, nil
		}
		prevMatches := true
		var prev *unstructured.Unstructured
		if !sel.empty() {
			if prev, err = fromStorage(res, *ev.PrevKV); err != nil {
				return "", nil, err
			}
			prevMatches = sel.matches(res, prev)
		}
		typ, left, ok := watchcache.PutEvent(cur, prevMatches)
		switch {
		case left:
			prev.SetResourceVersion(strconv.FormatInt(ev.Revision, 10))
			return typ, prev, nil
		case ok:
			return typ, obj, nil
		}
	}
	return "", nil, nil
}
