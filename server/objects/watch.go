package objects

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/objwatch/objwatch/change/fieldmask"
	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// WatchOptions are a watch's parameters.
type WatchOptions struct {
	// List are the decoded and validated options, with Kubernetes' watch
	// defaults applied (internalversion.SetListOptionsDefaults).
	List *internalversion.ListOptions
	// Timeout is how long the watch lasts. Required.
	Timeout time.Duration
	// Decoded: the caller renders each object itself (a Table watch), so
	// items carry Object or JSON, never a shared Frame.
	Decoded bool
	// DropManagedFields: the shared frames a watch-cache watch sends are
	// the encodings without metadata.managedFields (each made once for
	// all the watches that drop them, see frameMemo). Items that carry
	// Object are the caller's to strip.
	DropManagedFields bool
	// Mask, Project and Deltas are objwatch's watch extensions
	// (watchext.go): the MODIFIED events that change no masked value are
	// held back; Project trims every object to the mask and the object's
	// identity (Mask required); Deltas sends a MODIFIED as an RFC 6902
	// patch from the client's last copy. Project and Deltas apply to
	// items sent as frames or objects, not to Decoded watches.
	Mask            *fieldmask.Mask
	Project, Deltas bool
	// Encode, with Decoded, encodes an event (its type and the object's
	// stored JSON) as the watch sends it, in a binary encoding. A watch
	// served from the watch cache then gets items with that Frame,
	// encoded once for every watch with the same EncodeKey (which must
	// name the encoding and everything else the bytes depend on); a watch
	// served from etcd gets decoded items as without it. Encode may be
	// called from any goroutine.
	Encode    func(typ string, json []byte) ([]byte, error)
	EncodeKey string
}

// watchRequest is a parsed and validated watch request.
type watchRequest struct {
	sel        selector
	rv         int64
	initial    bool // send synthetic ADDED events for the current state
	initialEnd bool // end them with the initial-events-end bookmark
	consistent bool // no resourceVersion: start from a quorum read
	bookmarks  bool
	timeout    time.Duration
	decoded    bool
	drop       bool
	encode     func(typ string, json []byte) ([]byte, error) // WatchOptions.Encode
	encodeKey  string
	shape      shapeOptions
}

func watchRequestOf(req *Request, opts WatchOptions) (watchRequest, error) {
	o := opts.List
	wr := watchRequest{timeout: opts.Timeout, decoded: opts.Decoded, drop: opts.DropManagedFields, encode: opts.Encode, encodeKey: opts.EncodeKey}
	wr.shape = shapeOptions{mask: opts.Mask, project: opts.Project, deltas: opts.Deltas, drop: opts.DropManagedFields}
	if opts.Decoded {
		wr.shape.project, wr.shape.deltas = false, false
	}
	if wr.shape.project && wr.shape.mask == nil {
		return wr, apistatus.BadRequest("projection=mask needs a fieldMask")
	}
	var err error
	if wr.sel, err = selectorOf(o, req.Resource); err != nil {
		return wr, err
	}
	if req.Name != "" {
		wr.sel.fields = fields.AndSelectors(wr.sel.fields, fields.OneTermEqualSelector("metadata.name", req.Name))
	}
	if wr.rv, err = ParseRV(o.ResourceVersion); err != nil {
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
	return wr, nil
}

// Watch starts a watch of req's resource (in req.Namespace, if set; of
// one object, if req.Name is set): from the resource's watch cache when it
// can serve the request, otherwise from an etcd watch. Its starting point
// is established before it returns, so that its errors are plain errors,
// except a *StartError: a failure Kubernetes reports inside the stream
// (an ERROR event), not as the response. A nil Source and nil error mean
// ctx ended while it waited. The caller owns the Source and must Stop it.
func (s *Service) Watch(ctx context.Context, req *Request, opts WatchOptions) (Source, error) {
	req.SelectedName = selectedName(opts.List)
	var changed context.Context
	if f := s.hooks.h.AuthorizationChanged; f != nil {
		changed = f(req) // before deciding: a change after it is seen
	}
	if err := s.hooks.authorize(ctx, req); err != nil {
		return nil, err
	}
	wr, err := watchRequestOf(req, opts)
	if err != nil {
		return nil, err
	}
	var src Source
	cs, err := s.caches.watch(ctx, req, wr)
	switch {
	case errors.Is(err, errNoCache):
		if src, err = s.etcd.watch(ctx, req, wr); err != nil {
			return nil, err
		}
	case cs == nil:
		return nil, err // not a typed nil
	default:
		src = cs
	}
	src = s.fault.wrap(src, req, wr)
	if changed == nil {
		return src, nil
	}
	return &authorizedSource{Source: src, hooks: &s.hooks, req: req, changed: changed}, nil
}

// authorizedSource ends a watch whose permission was revoked: when the
// authorization may have changed, it asks Authorize again, and a refusal
// is the watch's last item (an ERROR event).
type authorizedSource struct {
	Source
	hooks *hookPoints
	req   *Request
	// changed is done when the decision may have changed: the
	// authorizer's signal (Hooks.AuthorizationChanged), joined to each
	// Wait's context by context.AfterFunc without a goroutine.
	changed context.Context
	refused error
}

// recheck asks again if the authorization changed; it reports whether the
// watch may go on.
func (a *authorizedSource) recheck() bool {
	if a.refused != nil {
		return false
	}
	if a.changed.Err() == nil {
		return true
	}
	if a.changed = a.hooks.h.AuthorizationChanged(a.req); a.changed == nil {
		a.changed = context.Background() // no longer restricted
	}
	if err := a.hooks.authorize(context.Background(), a.req); err != nil {
		a.refused = err
		return false
	}
	return true
}

func (a *authorizedSource) TryNext() (Item, bool) {
	if !a.recheck() {
		return Item{}, false
	}
	return a.Source.TryNext()
}

func (a *authorizedSource) Wait(ctx context.Context, idle <-chan time.Time) error {
	if !a.recheck() {
		return a.refused
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(a.changed, cancel)()
	err := a.Source.Wait(wctx, idle)
	if ctx.Err() == nil && wctx.Err() != nil {
		// Woken by the change, not by the watch's end.
		if !a.recheck() {
			return a.refused
		}
		return nil
	}
	return err
}

// The types of Item.
const (
	Added    = watchcache.Added
	Modified = watchcache.Modified
	Deleted  = watchcache.Deleted
	Bookmark = watchcache.Bookmark
)

// StartError is a failure found while starting a watch that is sent as an
// ERROR event in the stream rather than as the response's status.
type StartError struct{ Err error }

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// ErrWatchEnd ends a watch without an ERROR event.
var ErrWatchEnd = errors.New("watch ended")

// Item is one event for a watch to send.
type Item struct {
	Type string
	// Frame is the encoded event, when the source has it (the watch
	// cache's, shared by its watchers); otherwise Object or JSON is sent.
	Frame  []byte
	Object *unstructured.Unstructured
	JSON   []byte
	// At is when the server learned of the change (storage events).
	At *time.Time
	// Rev and InitialEnd: a bookmark's revision, and whether it ends the
	// initial events. Events carry their revision in Rev too (a watch's
	// initial events from etcd: 0).
	Rev        int64
	InitialEnd bool
}

// Source feeds one watch. It belongs to the goroutine serving the watch,
// which must Stop it.
type Source interface {
	// TryNext returns the next item without blocking; ok is false when
	// none is waiting.
	TryNext() (it Item, ok bool)
	// Wait blocks until an item may be waiting, idle fires or ctx ends.
	// An error ends the watch: ErrWatchEnd quietly, any other as an ERROR
	// event after what was sent before.
	Wait(ctx context.Context, idle <-chan time.Time) error
	// Settle waits until the rest of the revision of the last event
	// TryNext returned, if any is still on its way, is ready for
	// TryNext, so that a watch ending at its deadline can send a
	// revision of several keys whole. It is brief (the rest of a
	// revision is in flight, never waited for from etcd).
	Settle()
	Stop()
}

// RestOfRevision hands each what src has left of revision rev, the
// revision of the last event its consumer took, one item at a time,
// waiting for it with Settle. A consumer that ends a watch (at its
// timeout) calls it so as not to end inside a revision of several keys,
// whose rest a client resuming after rev would never get. It stops at an
// item of another revision or a bookmark (dropped: the next watch brings
// it again), when src has nothing more, or when each returns false. With
// rev 0 it does nothing.
func RestOfRevision(src Source, rev int64, each func(Item) bool) {
	for rev != 0 {
		it, ok := src.TryNext()
		if !ok {
			src.Settle() // the rest may be on its way
			it, ok = src.TryNext()
		}
		if !ok || it.Rev != rev || it.Type == Bookmark || !each(it) {
			return
		}
	}
}

// watch starts a watch served from an etcd watch: without the cache, or
// from a revision older than the cache's history. Its starting point is
// established before answering, so that its errors are plain HTTP
// errors; later ones arrive as ERROR events.
func (r *storeReader) watch(ctx context.Context, req *Request, wr watchRequest) (Source, error) {
	res := req.Resource
	gr := gr(res)
	src := &storageSource{res: res, sel: wr.sel, initialEnd: wr.initialEnd, shape: newShaper(wr.shape, nil)}
	from := wr.rv + 1
	if wr.initial {
		if wr.rv > 0 {
			if err := r.waitFor(ctx, res.StoragePrefix, wr.rv); err != nil {
				return nil, err
			}
		}
		items, rev, err := r.listAll(ctx, res, req.Namespace, wr.sel)
		if err != nil {
			return nil, err
		}
		src.initial, from = items, rev+1
	} else if wr.rv == 0 {
		rev, err := storage.PartOf(r.store, res.StoragePrefix).Revision(ctx)
		if err != nil {
			return nil, apistatus.Storage(err, gr, "")
		}
		from = rev + 1
	}
	watcher, err := r.watchFrom(ctx, res.Prefix(req.Namespace), from)
	if err != nil {
		return nil, apistatus.Storage(err, gr, "")
	}
	src.watcher, src.sent = watcher, from-1
	if wr.bookmarks {
		// Bookmarks go out every BookmarkInterval and once shortly before
		// the timeout; each asks etcd for progress so the bookmark's
		// revision covers changes elsewhere in the store too.
		src.every, src.deadline = r.bookmarkEvery, time.Now().Add(wr.timeout)
		src.bookmarkT = time.NewTimer(src.nextBookmark())
	}
	return src, nil
}

// storageSource feeds a watch from an etcd watch: the initial objects
// first, then the changes, translated for the watch's selection.
type storageSource struct {
	res     *registry.Resource
	sel     selector
	watcher storage.Watcher
	initial []*unstructured.Unstructured
	// initialEnd: the initial events still have to end with a bookmark.
	initialEnd bool
	sent       int64 // the revision every sent event is at or below
	pending    *storage.Event
	// inRevision: the last event taken was marked More, so the rest of
	// its revision follows on the watcher's channel.
	inRevision bool
	err        error // ends the watch once the items before it are sent

	shape *shaper // set when the watch has a mask or deltas

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

func (src *storageSource) TryNext() (Item, bool) {
	if len(src.initial) > 0 {
		obj := src.initial[0]
		src.initial = src.initial[1:]
		if src.shape != nil {
			return src.shape.decodedItem(Added, obj, nil, time.Time{})
		}
		return Item{Type: watchcache.Added, Object: obj}, true
	}
	if src.initialEnd {
		src.initialEnd = false
		return Item{Type: watchcache.Bookmark, Rev: src.sent, InitialEnd: true}, true
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
					src.err = ErrWatchEnd
					return Item{}, false
				}
			case <-src.bookmarkC():
				src.bookmarkDue()
				continue
			default:
				return Item{}, false
			}
		}
		src.inRevision = ev.More
		if it, ok := src.translate(ev); ok {
			return it, true
		}
	}
	return Item{}, false
}

// translate turns a storage event into the item to send, if any.
func (src *storageSource) translate(ev storage.Event) (Item, bool) {
	switch ev.Type {
	case storage.Progress:
		if src.wantProgress && ev.Revision >= src.sent {
			src.wantProgress = false
			src.sent = ev.Revision
			return Item{Type: watchcache.Bookmark, Rev: src.sent}, true
		}
		return Item{}, false
	case storage.Error:
		src.err = apistatus.Storage(ev.Err, gr(src.res), "")
		return Item{}, false
	}
	typ, obj, prev, err := translate(src.res, src.sel, ev, src.shape != nil)
	if err != nil {
		src.err = apistatus.Storage(err, gr(src.res), "") // a Status as it is, else 500
		return Item{}, false
	}
	src.sent = ev.Revision
	if typ == "" {
		return Item{}, false
	}
	now := time.Now().UTC()
	if src.shape != nil {
		it, ok := src.shape.decodedItem(typ, obj, prev, now)
		it.Rev = ev.Revision
		return it, ok
	}
	return Item{Type: typ, Object: obj, At: &now, Rev: ev.Revision}, true
}

// settleWait bounds Settle's wait for the rest of a revision, which the
// storage watcher sends right after its first events.
const settleWait = time.Second

func (src *storageSource) Settle() {
	if !src.inRevision || src.pending != nil || src.err != nil {
		return
	}
	t := time.NewTimer(settleWait)
	defer t.Stop()
	select {
	case ev, ok := <-src.watcher.Events():
		if !ok {
			src.err = ErrWatchEnd
			return
		}
		src.pending = &ev
	case <-t.C:
	}
}

func (src *storageSource) Wait(ctx context.Context, idle <-chan time.Time) error {
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
			return ErrWatchEnd
		}
		src.pending = &ev
	}
	return nil
}

func (src *storageSource) Stop() {
	if src.bookmarkT != nil {
		src.bookmarkT.Stop()
	}
	src.watcher.Stop()
}

// translate turns a storage event into a watch event for a watcher with the
// given selection: an object entering the selection is ADDED, one leaving it
// is DELETED (with its last matching state and the event's revision), and
// changes outside it are dropped (empty type).
//
// The objects are converted to res's version, the current and previous
// state in one conversion; the caller's goroutine waits for it. The
// previous state of a MODIFIED is returned too when it was decoded, which
// wantPrev asks for.
func translate(res *registry.Resource, sel selector, ev storage.Event, wantPrev bool) (string, *unstructured.Unstructured, *unstructured.Unstructured, error) {
	ctx := context.Background()
	switch ev.Type {
	case storage.Delete:
		if len(ev.KV.Value) == 0 {
			// etcd had compacted the object's last value when it sent the
			// deletion: which object left is known, its last state is not
			// (Kubernetes ends such a watch too).
			return "", nil, nil, apierrors.NewResourceExpired(fmt.Sprintf("the last value of %s deleted at revision %d was compacted: relist", ev.KV.Key, ev.Revision))
		}
		obj, err := FromStorage(res, ev.KV)
		if err != nil {
			return "", nil, nil, err
		}
		if !sel.matches(res, obj) {
			return "", nil, nil, nil
		}
		return "DELETED", obj, nil, nil
	case storage.Put:
		kvs := []storage.KeyValue{ev.KV}
		if ev.PrevKV != nil && (!sel.empty() || wantPrev) {
			kvs = append(kvs, *ev.PrevKV)
		}
		objs, err := decodeStored(ctx, res, kvs)
		if err != nil {
			return "", nil, nil, err
		}
		obj := objs[0]
		cur := sel.matches(res, obj)
		if ev.PrevKV == nil {
			switch {
			case !cur:
				return "", nil, nil, nil
			case ev.KV.CreateRevision == ev.KV.ModRevision:
				return "ADDED", obj, nil, nil
			case sel.empty():
				// A change whose previous value etcd no longer had (it
				// compacted at this very revision): still a change.
				return "MODIFIED", obj, nil, nil
			}
			// Whether it entered the selection or changed inside it is
			// not known: the watcher relists (Kubernetes ends the watch
			// too).
			return "", nil, nil, apierrors.NewResourceExpired(fmt.Sprintf("the previous value of %s at revision %d was compacted: relist", obj.GetName(), ev.Revision))
		}
		prevMatches := true
		var prev *unstructured.Unstructured
		if len(objs) > 1 {
			prev = objs[1]
			prevMatches = sel.matches(res, prev)
		}
		typ, left, ok := watchcache.PutEvent(cur, prevMatches)
		switch {
		case left:
			prev.SetResourceVersion(strconv.FormatInt(ev.Revision, 10))
			return typ, prev, nil, nil
		case ok:
			return typ, obj, prev, nil
		}
	}
	return "", nil, nil, nil
}
