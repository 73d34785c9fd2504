package server

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
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
	ww := newWatchWriter(w, r, flusher, s.cfg.WatchWriteTimeout, cancel)
	defer ww.stop()

	gr := s.gr(res)
	s.metrics.watches.WithLabelValues(res.Group, res.Plural).Inc()
	defer s.metrics.watches.WithLabelValues(res.Group, res.Plural).Dec()
	if err := s.watchFromCache(ctx, ww, res, info, wr); !errors.Is(err, errNoCache) {
		return
	}

	// The storage path (no cache, or a revision older than the cache's
	// history): establish the starting point before answering, so that its
	// errors are plain HTTP errors; later ones arrive as ERROR events.
	var initial []*unstructured.Unstructured
	from := wr.rv + 1
	if wr.initial {
		if wr.rv > 0 {
			if err := s.waitForRevision(ctx, wr.rv); err != nil {
				writeStatus(w, err)
				return
			}
		}
		items, rev, err := s.listAll(ctx, res, info.namespace, wr.sel)
		if err != nil {
			writeStatus(w, err)
			return
		}
		initial, from = items, rev+1
	} else if wr.rv == 0 {
		rev, err := s.store.Revision(ctx)
		if err != nil {
			writeStatus(w, storageError(err, gr, ""))
			return
		}
		from = rev + 1
	}
	watcher, err := s.store.Watch(ctx, res.Prefix(info.namespace), from)
	if err != nil {
		writeStatus(w, storageError(err, gr, ""))
		return
	}
	defer watcher.Stop()

	startStream(ww)
	enc := json.NewEncoder(ww)
	sent := from - 1
	send := func(typ string, obj *unstructured.Unstructured, at *time.Time) bool {
		var body any = obj.Object
		if wr.tableVersion != "" && typ != "BOOKMARK" {
			t := table(res, wr.tableVersion, []*unstructured.Unstructured{obj}, wr.includeObject)
			t.ResourceVersion = obj.GetResourceVersion()
			body = t
		}
		if err := enc.Encode(watchEvent{Type: typ, Object: body, CommitTime: at}); err != nil {
			return false
		}
		ww.Flush()
		s.metrics.events.WithLabelValues(res.Group, res.Plural, typ).Inc()
		return true
	}
	bookmark := func(rev int64, end bool) bool {
		b := &unstructured.Unstructured{Object: map[string]any{}}
		b.SetAPIVersion(res.APIVersion())
		b.SetKind(res.Kind)
		b.SetResourceVersion(strconv.FormatInt(rev, 10))
		if end {
			b.SetAnnotations(map[string]string{initialEventsEnd: "true"})
		}
		return send("BOOKMARK", b, nil)
	}
	for _, obj := range initial {
		if !send("ADDED", obj, nil) {
			return
		}
	}
	if wr.initialEnd && !bookmark(sent, true) {
		return
	}

	// Bookmarks go out every BookmarkInterval and once shortly before the
	// timeout; each asks etcd for progress so the bookmark's revision
	// covers changes elsewhere in the store too.
	deadline := time.Now().Add(wr.timeout)
	nextBookmark := func() time.Duration {
		d := s.cfg.BookmarkInterval
		if last := time.Until(deadline) - 2*time.Second; last > 0 && last < d {
			d = last
		}
		return d
	}
	var bookmarkC <-chan time.Time
	var bookmarkT *time.Timer
	if wr.bookmarks {
		bookmarkT = time.NewTimer(nextBookmark())
		defer bookmarkT.Stop()
		bookmarkC = bookmarkT.C
	}
	wantProgress := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-ww.idle():
		case <-bookmarkC:
			if err := watcher.RequestProgress(ctx); err == nil {
				wantProgress = true
			}
			bookmarkT.Reset(nextBookmark())
		case ev, ok := <-watcher.Events():
			if !ok {
				return
			}
			switch ev.Type {
			case storage.Progress:
				if wantProgress && ev.Revision >= sent {
					wantProgress = false
					sent = ev.Revision
					if !bookmark(sent, false) {
						return
					}
				}
			case storage.Error:
				var st error = storageError(ev.Err, gr, "")
				if ctx.Err() == nil {
					s.sendError(enc, ww, st)
				}
				return
			default:
				typ, obj, err := s.translate(res, wr.sel, ev)
				if err != nil {
					s.sendError(enc, ww, apierrors.NewInternalError(err))
					return
				}
				sent = ev.Revision
				now := time.Now().UTC()
				if typ != "" && !send(typ, obj, &now) {
					return
				}
			}
		}
	}
}

// startStream sends the headers of a watch response. An HTTP/1.1 watch
// then takes its connection from net/http (see rawStream).
func startStream(ww *watchWriter) {
	h := ww.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-cache, private")
	takeover := ww.cancel != nil && ww.r != nil && ww.r.ProtoMajor == 1 && ww.r.ProtoMinor >= 1
	if takeover {
		h.Set("Connection", "close")
	}
	ww.w.WriteHeader(http.StatusOK)
	if takeover {
		if ww.raw = takeConn(ww.rc, ww.cancel); ww.raw != nil {
			ww.armed = time.Time{} // the deadline was cleared
			return
		}
	}
	ww.Flush()
}

// watchWriter writes one watch response and bounds how long a write to a
// client that stopped reading may block. Before every write and flush the
// connection's write deadline is moved to now+timeout, but at most once per
// step (a second, or a quarter of a shorter timeout), which keeps it off the
// per-event path; an idle watch moves it before it expires (see idle). So a
// write or flush blocked for between timeout-step and timeout fails: on
// HTTP/1.1 the connection is broken and closed, on HTTP/2 the stream is
// reset; either way the request's context ends, which ends the watch.
//
// An HTTP/1.1 watch writes to its connection itself once the headers are
// out (see rawStream); Write then buffers and Flush writes one chunk.
//
// A watchWriter belongs to the goroutine serving the watch, which must call
// stop when done.
type watchWriter struct {
	w      http.ResponseWriter
	f      http.Flusher
	rc     *http.ResponseController
	r      *http.Request      // nil: never take the connection
	cancel context.CancelFunc // ends the watch; nil: never take the connection
	raw    *rawStream         // the taken connection, or nil

	timeout, step time.Duration // timeout 0: no deadline
	armed         time.Time     // the deadline is armed+timeout
	idleT         *time.Timer
	idleFor       time.Time // the armed idleT was set for
}

// newWatchWriter returns the writer of a watch response to r. cancel ends
// the watch; it is called when the client closes a taken connection. With
// a nil r or cancel the connection stays with net/http.
func newWatchWriter(w http.ResponseWriter, r *http.Request, f http.Flusher, timeout time.Duration, cancel context.CancelFunc) *watchWriter {
	ww := &watchWriter{w: w, f: f, rc: http.NewResponseController(w), r: r, cancel: cancel}
	if timeout > 0 {
		ww.timeout, ww.step = timeout, min(time.Second, timeout/4)
	}
	return ww
}

// extend moves the write deadline to now+timeout unless it did so less
// than step ago.
func (ww *watchWriter) extend() {
	if ww.timeout == 0 {
		return
	}
	now := time.Now()
	if now.Sub(ww.armed) < ww.step {
		return
	}
	setDeadline := ww.rc.SetWriteDeadline
	if ww.raw != nil {
		setDeadline = ww.raw.conn.SetWriteDeadline
	}
	if err := setDeadline(now.Add(ww.timeout)); err != nil {
		ww.timeout = 0 // not a network connection (handler tests)
		return
	}
	ww.armed = now
}

func (ww *watchWriter) Write(p []byte) (int, error) {
	if ww.raw != nil {
		if ww.raw.fills(len(p)) {
			ww.extend() // the write sends the pending chunk
		}
		return ww.raw.Write(p)
	}
	ww.extend()
	return ww.w.Write(p)
}

func (ww *watchWriter) Flush() {
	ww.extend()
	if ww.raw != nil {
		ww.raw.flush()
		return
	}
	ww.f.Flush()
}

// idle returns a channel for a watch waiting for events to wait on too:
// it fires half a timeout after the deadline was last moved, and the watch
// then calls idle again, which moves it. HTTP/2 resets a stream whose
// deadline passes even when nothing is being written, so an idle watch
// must keep its deadline ahead. It returns nil when there is no deadline.
func (ww *watchWriter) idle() <-chan time.Time {
	if ww.raw != nil {
		return nil // a connection's deadline only bounds writes
	}
	ww.extend()
	if ww.timeout == 0 {
		return nil
	}
	if ww.idleFor != ww.armed {
		d := time.Until(ww.armed.Add(ww.timeout / 2))
		if ww.idleT == nil {
			ww.idleT = time.NewTimer(d)
		} else {
			ww.idleT.Reset(d)
		}
		ww.idleFor = ww.armed
	}
	return ww.idleT.C
}

// stop releases the idle timer. The deadline stays: it bounds the final
// flush net/http does after the handler returns.
func (ww *watchWriter) stop() {
	if ww.idleT != nil {
		ww.idleT.Stop()
	}
	ww.extend()
	if ww.raw != nil {
		ww.raw.close()
	}
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
		switch {
		case cur && prevMatches:
			return "MODIFIED", obj, nil
		case cur:
			return "ADDED", obj, nil
		case prevMatches:
			prev.SetResourceVersion(strconv.FormatInt(ev.Revision, 10))
			return "DELETED", prev, nil
		}
	}
	return "", nil, nil
}
