package controller

import (
	"context"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

// writes remembers, per object, the controller's last write of it, until
// the cache has it or ReadYourWritesTimeout passed.
type writes struct {
	timeout time.Duration
	on      bool

	mu sync.Mutex
	m  map[objectKey]written
}

type objectKey struct {
	gvr             schema.GroupVersionResource
	namespace, name string
}

type written struct {
	rv      uint64    // the write's resourceVersion (0 for a delete)
	uid     types.UID // for a delete: the object deleted ("" if not cached)
	deleted bool
	at      time.Time
}

func newWrites(timeout time.Duration, on bool) *writes {
	return &writes{timeout: timeout, on: on, m: make(map[objectKey]written)}
}

// parseRV reads a resourceVersion as the etcd revision that objwatch and
// Kubernetes both use.
func parseRV(rv string) (uint64, bool) {
	n, err := strconv.ParseUint(rv, 10, 64)
	return n, err == nil
}

func (w *writes) wrote(k objectKey, obj metav1.Object) {
	if !w.on {
		return
	}
	rv, ok := parseRV(obj.GetResourceVersion())
	if !ok {
		return // not a revision: do not wait for it
	}
	w.mu.Lock()
	w.m[k] = written{rv: rv, at: time.Now()}
	w.mu.Unlock()
}

func (w *writes) deleted(k objectKey, uid types.UID) {
	if !w.on {
		return
	}
	w.mu.Lock()
	w.m[k] = written{uid: uid, deleted: true, at: time.Now()}
	w.mu.Unlock()
}

// cacheView is what writes needs of an informer.
type cacheView interface {
	get(namespace, name string) (metav1.Object, bool)
	lastRV() string
}

// pending returns the write of k the cache has not caught up with yet,
// forgetting writes it has caught up with or that expired.
func (w *writes) pending(k objectKey, c cacheView) (written, bool) {
	if !w.on {
		return written{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	wr, ok := w.m[k]
	if !ok {
		return wr, false
	}
	if time.Since(wr.at) > w.timeout || caughtUp(wr, k, c) {
		delete(w.m, k)
		return wr, false
	}
	return wr, true
}

func caughtUp(wr written, k objectKey, c cacheView) bool {
	obj, ok := c.get(k.namespace, k.name)
	if wr.deleted {
		return !ok || obj.GetUID() != wr.uid || obj.GetDeletionTimestamp() != nil
	}
	if ok {
		rv, parsed := parseRV(obj.GetResourceVersion())
		return !parsed || rv >= wr.rv
	}
	// Gone from the cache: deleted since, if the informer has read past
	// the write.
	rv, parsed := parseRV(c.lastRV())
	return parsed && rv >= wr.rv
}

// wait waits until the cache caught up with every write that match
// selects, the writes expired, or ctx ended.
func (w *writes) wait(ctx context.Context, c cacheView, match func(objectKey) bool) error {
	if !w.on {
		return nil
	}
	delay := time.Millisecond
	var t *time.Timer
	for {
		w.mu.Lock()
		var keys []objectKey
		for k := range w.m {
			if match(k) {
				keys = append(keys, k)
			}
		}
		w.mu.Unlock()
		waiting := false
		for _, k := range keys {
			if _, ok := w.pending(k, c); ok {
				waiting = true
				break
			}
		}
		if !waiting {
			return nil
		}
		// Poll: informer latency is milliseconds, and polling needs no
		// handler, and so no goroutine, per Client.
		if t == nil {
			t = time.NewTimer(delay)
			defer t.Stop()
		} else {
			t.Reset(delay)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, 20*time.Millisecond)
	}
}

// Client reads objects from an informer's cache and writes them through
// the API, so that a reconciler reads its own writes: a read waits,
// at most Options.ReadYourWritesTimeout, until the cache has the object
// at the resourceVersion the controller last wrote, or newer (a delete:
// until the object is gone or being deleted). Without the wait, a
// reconcile right after a write would see the state before it, and
// write again from it (a conflict, or a change counted twice).
//
// Get it from ClientFor. A Client is safe for concurrent use and starts
// no goroutines. Objects it reads are the cache's (see informer.Lister):
// never modify them.
type Client[T client.Object] struct {
	api    *client.Client[T]
	inf    *informer.SharedInformer[T]
	gvr    schema.GroupVersionResource
	writes *writes
}

// NewClient returns a Client of ctrl that reads inf's cache and writes
// through api. api and inf must be for the same resource.
func NewClient[T client.Object, K comparable](ctrl *Controller[K], api *client.Client[T], inf *informer.SharedInformer[T]) *Client[T] {
	return &Client[T]{api: api, inf: inf, gvr: api.Resource().GVR, writes: ctrl.writes}
}

// ClientFor is NewClient.
//
// Deprecated: use NewClient (constructors are named New; see the package
// documentation, # Names).
func ClientFor[T client.Object, K comparable](ctrl *Controller[K], api *client.Client[T], inf *informer.SharedInformer[T]) *Client[T] {
	return NewClient(ctrl, api, inf)
}

type view[T client.Object] struct{ inf *informer.SharedInformer[T] }

func (v view[T]) get(namespace, name string) (metav1.Object, bool) {
	obj, ok := v.inf.Lister().Get(namespace, name)
	return obj, ok
}

func (v view[T]) lastRV() string { return v.inf.LastResourceVersion() }

func (c *Client[T]) key(namespace, name string) objectKey {
	return objectKey{gvr: c.gvr, namespace: namespace, name: name}
}

// Get reads the object from the cache, after the controller's last write
// of it reached the cache. An object the cache does not have is ok ==
// false with a nil error, as for informer.Lister.Get and a map: a
// reconciler is asked about objects that may just have been deleted, and
// absence is the state it acts on, not a failure. (client.Client.Get asks
// the server, whose 404 is an error matching client.ErrNotFound.) The
// error is ctx's, if it ended first.
func (c *Client[T]) Get(ctx context.Context, namespace, name string) (T, bool, error) {
	k := c.key(namespace, name)
	if err := c.writes.wait(ctx, view[T]{c.inf}, func(o objectKey) bool { return o == k }); err != nil {
		var zero T
		return zero, false, err
	}
	obj, ok := c.inf.Lister().Get(namespace, name)
	return obj, ok, nil
}

// List reads the objects in namespace ("" for all) matching sel from
// the cache, after every write the controller made there reached it.
func (c *Client[T]) List(ctx context.Context, namespace string, sel labels.Selector) ([]T, error) {
	match := func(o objectKey) bool { return o.gvr == c.gvr && (namespace == "" || o.namespace == namespace) }
	if err := c.writes.wait(ctx, view[T]{c.inf}, match); err != nil {
		return nil, err
	}
	return c.inf.Lister().List(namespace, sel), nil
}

// API returns the client that writes, for reads that must not come from
// the cache.
func (c *Client[T]) API() *client.Client[T] { return c.api }

// Create creates obj and remembers its resourceVersion.
func (c *Client[T]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	return c.record(c.api.Create(ctx, obj, opts))
}

// Update updates obj and remembers its new resourceVersion.
func (c *Client[T]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return c.record(c.api.Update(ctx, obj, opts))
}

// UpdateStatus updates obj's status and remembers its new resourceVersion.
func (c *Client[T]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return c.record(c.api.UpdateStatus(ctx, obj, opts))
}

// Patch patches the object, or the subresource subresources name (see
// client.Client.Patch), and remembers its new resourceVersion.
func (c *Client[T]) Patch(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	return c.record(c.api.Patch(ctx, namespace, name, pt, data, opts, subresources...))
}

// Delete deletes the object; later reads wait until the cache no longer
// has the object it had, or has it being deleted (finalizers).
func (c *Client[T]) Delete(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	var uid types.UID
	if obj, ok := c.inf.Lister().Get(namespace, name); ok {
		uid = obj.GetUID()
	}
	if err := c.api.Delete(ctx, namespace, name, opts); err != nil {
		return err
	}
	if uid != "" {
		c.writes.deleted(c.key(namespace, name), uid)
	}
	return nil
}

func (c *Client[T]) record(obj T, err error) (T, error) {
	if err == nil {
		c.writes.wrote(c.key(obj.GetNamespace(), obj.GetName()), obj)
	}
	return obj, err
}
