package objects

import (
	"context"
	"errors"
	"math"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// firstLoadWait is how long a watch waits for a loading cache before it
// is refused with 429.
const firstLoadWait = time.Second

// watch starts a watch served from the cache. It returns errNoCache
// (having written nothing) when the cache cannot serve it, and no source
// and no error when ctx ended while it waited.
func (c *Caches) watch(ctx context.Context, req *Request, wr watchRequest) (*cacheSource, error) {
	wc := c.usable(req.Resource)
	if wc == nil {
		return nil, errNoCache
	}
	if _, init := wc.Initializing(); init && req.User != nil {
		// A cache started by this very request (CacheOnDemand) usually
		// loads in milliseconds: wait a little before refusing.
		wctx, cancel := context.WithTimeout(ctx, firstLoadWait)
		_ = wc.WaitFor(wctx, 0)
		cancel()
		if d, init := wc.Initializing(); init {
			return nil, cacheNotReady(d)
		}
	}
	opts := watchcache.WatchOptions{
		Filter: filterOf(wr.sel, req.Namespace), From: wr.rv,
		Initial: wr.initial, InitialEnd: wr.initialEnd,
		Deadline: time.Now().Add(wr.timeout),
	}
	if wr.bookmarks {
		opts.BookmarkEvery = c.cfg.BookmarkInterval
	}
	shape := newShaper(wr.shape, &c.shapes)
	if shape != nil && shape.mask != nil {
		// A masked-out change is dropped by the cache (replayed or
		// live) before it is queued: the watch is not woken for it. The
		// projections it compares are made once per event, by the first
		// watcher that asks, under the cache's lock.
		opts.Hold = func(it watchcache.Item) bool { return !shape.sends(it) }
	}
	// Establish the start like the storage path does: a resourceVersion
	// newer than the cache waits (then 504); none means "consistent now".
	switch {
	case wr.rv > 0:
		wctx, cancel := context.WithTimeout(ctx, c.cfg.FutureRVWait)
		err := wc.WaitFor(wctx, wr.rv)
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
		rev, err := wc.WaitFresh(ctx)
		if err != nil {
			return nil, errNoCache
		}
		if !wr.initial {
			opts.From = rev
		}
	default:
		if err := wc.WaitFor(ctx, 0); err != nil {
			return nil, errNoCache
		}
		if !wr.initial {
			opts.From = wc.Revision()
		}
	}
	cw, err := wc.Watch(ctx, opts)
	if err != nil {
		// Older than the cache's history (e.g. from before this server
		// started): etcd may still have it, or answers 410 itself.
		return nil, errNoCache
	}
	src := &cacheSource{cw: cw, rv: wr.rv, bookmarks: wr.bookmarks, decoded: wr.decoded, shape: shape}
	if wr.drop {
		src.dropped = &c.dropped
	}
	if wr.encode != nil {
		src.encode, src.encodeKey, src.encoded = wr.encode, wr.encodeKey, &c.encoded
	}
	return src, nil
}

// cacheNotReady is Kubernetes' answer to a watch of a resource whose
// watch cache is still loading its first list (cacher's ready state,
// KEP 4568): 429 "storage is (re)initializing", with a Retry-After that
// grows with how long the cache has been loading, e^(0.06·s) clamped to
// 1..30 seconds. Gets and pages without selectors are served by etcd
// meanwhile, and a client's other lists wait for the cache (Kubernetes
// answers them 429 too; see Caches.list). The server's own followers
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
	shape     *shaper    // set when the watch has a mask or deltas
	// encode, when set, makes the watch's binary frames, shared through
	// encoded by encodeKey (WatchOptions.Encode).
	encode    func(typ string, json []byte) ([]byte, error)
	encodeKey string
	encoded   *frameMemo
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
		case c.encode != nil:
			b, err := c.encoded.encoded(it, c.encodeKey, c.encode)
			if err != nil {
				// Not an object the watch can encode: the caller renders it.
				return Item{Type: it.Type, JSON: it.Object.JSON, Rev: it.Rev}, true
			}
			return Item{Type: it.Type, Frame: b, Rev: it.Rev}, true
		case c.decoded:
			return Item{Type: it.Type, JSON: it.Object.JSON, Rev: it.Rev}, true
		case c.shape != nil:
			return Item{Type: it.Type, Frame: c.shape.frame(it, func() []byte { return c.frame(it) }), Rev: it.Rev}, true
		default:
			return Item{Type: it.Type, Frame: c.frame(it), Rev: it.Rev}, true
		}
	}
}

// frame is it's shared frame, without managedFields if the watch drops
// them.
func (c *cacheSource) frame(it watchcache.Item) []byte {
	if c.dropped == nil {
		return it.Frame()
	}
	b, err := c.dropped.frame(it)
	if err != nil {
		// Not an object the server encoded: send it whole.
		b = it.Frame()
	}
	return b
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

func (c *cacheSource) Settle() { c.cw.Settle() }

func (c *cacheSource) Stop() { c.cw.Stop() }
