// Package mirror keeps a server-side copy of one resource's stored
// objects, for the parts of the server that act on them (the RBAC index,
// admission policies, admission webhook configurations): a watch with its
// initial events, diffed against the copy, then the watch's events; a
// watch that ends is resumed from the last revision it delivered (one
// that times out inside a revision of several keys applies the rest of it
// first), and a resumed watch refused with 410 Gone (a compacted revision)
// lists again.
//
// It reads through the object service's Watch, as the server itself (no
// user), like any client; it is not part of the object service, and
// needs only its Watch (Watcher).
//
// # Concurrency
//
// Run owns the mirror's only goroutine and is called once; Apply and
// Decode are called from it, one at a time, in order. List and Synced are
// safe for concurrent use.
package mirror

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// WatchTimeout is how long one watch of a mirror lasts before it is
// resumed; a bound on how long a lost watch can go unnoticed.
const WatchTimeout = 10 * time.Minute

// The retry of a failed watch backs off between these.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Watcher is what a mirror needs of the object service
// (*objects.Service).
type Watcher interface {
	Watch(ctx context.Context, req *objects.Request, opts objects.WatchOptions) (objects.Source, error)
}

// Config configures a Mirror of objects decoded as T.
type Config[T metav1.Object] struct {
	// Resource is the resource mirrored, in all namespaces. Required.
	Resource *registry.Resource
	// Decode turns a stored object into the mirrored value. An object it
	// refuses is logged and left as the mirror had it. Required.
	Decode func(*unstructured.Unstructured) (T, error)
	// Apply receives the changes to the copy: once per list (possibly
	// none), then once per event. A deleted object's change carries the
	// value the mirror had. The slice is Apply's only during the call.
	// Required.
	Apply func(changes []Change[T])
	Log   *slog.Logger // default slog.Default()
	// Timeout is how long one watch lasts (default WatchTimeout).
	Timeout time.Duration
}

// Change is one change to a mirror's copy.
type Change[T any] struct {
	Type  string // objects.Added, objects.Modified or objects.Deleted
	Value T
}

// Mirror is a copy of one resource's stored objects by namespace and
// name, kept current by Run.
type Mirror[T metav1.Object] struct {
	src    Watcher
	cfg    Config[T]
	synced chan struct{}

	mu sync.RWMutex // guards items' writes (Run's) against List
	// items is the copy; Run reads it without mu, being its only writer.
	items map[key]T
}

type key struct{ namespace, name string }

func keyOf(o metav1.Object) key { return key{o.GetNamespace(), o.GetName()} }

func compareKeys(a, b key) int {
	return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
}

// New returns an empty mirror of cfg.Resource read through src; Run
// fills it.
func New[T metav1.Object](src Watcher, cfg Config[T]) *Mirror[T] {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = WatchTimeout
	}
	return &Mirror[T]{src: src, cfg: cfg, synced: make(chan struct{}), items: map[key]T{}}
}

// Synced is closed once the first list's changes were applied.
func (m *Mirror[T]) Synced() <-chan struct{} { return m.synced }

// List returns the mirrored values by namespace, then name.
func (m *Mirror[T]) List() []T {
	m.mu.RLock()
	defer m.mu.RUnlock()
	keys := make([]key, 0, len(m.items))
	for k := range m.items {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	out := make([]T, len(keys))
	for i, k := range keys {
		out[i] = m.items[k]
	}
	return out
}

// Run keeps the copy current until ctx ends.
func (m *Mirror[T]) Run(ctx context.Context) {
	backoff := minBackoff
	rv := "" // where a resumed watch starts; "": a fresh list
	for {
		next, err := m.watch(ctx, rv)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errTimedOut) && next != "" {
			rv, backoff = next, minBackoff
			continue
		}
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			next = ""
		}
		rv = next
		again := "listing again"
		if rv != "" {
			again = "watching again from " + rv
		}
		m.cfg.Log.Warn(fmt.Sprintf("mirror %s: watch ended; %s", m.cfg.Resource.Plural, again), "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

var errTimedOut = errors.New("watch timed out")

// watch runs one watch, from a fresh list (rv "") or resumed after rv. It
// returns where the next one would resume: the last revision delivered
// ("" if a list did not end).
func (m *Mirror[T]) watch(ctx context.Context, rv string) (next string, err error) {
	list := &internalversion.ListOptions{Watch: true, AllowWatchBookmarks: true, ResourceVersion: rv}
	var listed map[key]T // the list so far, while its initial events arrive
	if rv == "" {
		yes := true
		list.SendInitialEvents, listed = &yes, map[key]T{}
	}
	wctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	src, err := m.src.Watch(wctx, &objects.Request{Verb: "watch", Resource: m.cfg.Resource},
		objects.WatchOptions{List: list, Timeout: m.cfg.Timeout, Decoded: true})
	if err != nil {
		return rv, err
	}
	if src == nil { // wctx ended while the watch waited to start
		return rv, errTimedOut
	}
	defer src.Stop()
	next = rv
	var last int64 // the revision of the last event applied after the list
	for {
		it, ok := src.TryNext()
		if !ok {
			if err := src.Wait(wctx, nil); err != nil {
				if wctx.Err() != nil && ctx.Err() == nil {
					m.finish(src, last)
					return next, errTimedOut
				}
				return next, err
			}
			continue
		}
		if it.Type == objects.Bookmark {
			if it.InitialEnd {
				m.endList(listed)
				listed = nil
			}
			if listed == nil {
				next = strconv.FormatInt(it.Rev, 10)
			}
			continue
		}
		u, ok := m.objectOf(it)
		if !ok {
			continue
		}
		if listed != nil {
			m.addListed(listed, u)
			continue
		}
		m.event(it.Type, u)
		next, last = u.GetResourceVersion(), it.Rev
	}
}

// finish applies what is left of revision rev, the last event's, when the
// watch's time is up: the next watch resumes after rev and would never
// bring the rest of a revision of several keys (a transaction).
func (m *Mirror[T]) finish(src objects.Source, rev int64) {
	objects.RestOfRevision(src, rev, func(it objects.Item) bool {
		if u, ok := m.objectOf(it); ok {
			m.event(it.Type, u)
		}
		return true
	})
}

// objectOf is it's object, decoded if it came encoded (errors logged).
func (m *Mirror[T]) objectOf(it objects.Item) (*unstructured.Unstructured, bool) {
	if it.Object != nil {
		return it.Object, true
	}
	u, err := objects.Decode(it.JSON)
	if err != nil {
		m.cfg.Log.Error(fmt.Sprintf("mirror %s: decode", m.cfg.Resource.Plural), "err", err)
		return nil, false
	}
	return u, true
}

// decode is cfg.Decode, its errors logged.
func (m *Mirror[T]) decode(u *unstructured.Unstructured) (T, bool) {
	v, err := m.cfg.Decode(u)
	if err != nil {
		m.cfg.Log.Error(fmt.Sprintf("mirror %s: decode", m.cfg.Resource.Plural), "namespace", u.GetNamespace(), "name", u.GetName(), "err", err)
		return v, false
	}
	return v, true
}

// addListed adds one object of a list to it; an unchanged one keeps the
// mirror's value, undecoded.
func (m *Mirror[T]) addListed(list map[key]T, u *unstructured.Unstructured) {
	k := keyOf(u)
	old, had := m.items[k]
	if had && old.GetResourceVersion() == u.GetResourceVersion() {
		list[k] = old
		return
	}
	if v, ok := m.decode(u); ok {
		list[k] = v
	} else if had {
		list[k] = old
	}
}

// endList makes list the copy and applies the difference.
func (m *Mirror[T]) endList(list map[key]T) {
	var changes []Change[T]
	var keys []key
	for k, old := range m.items {
		if _, ok := list[k]; !ok {
			changes, keys = append(changes, Change[T]{objects.Deleted, old}), append(keys, k)
		}
	}
	for k, v := range list {
		old, had := m.items[k]
		switch {
		case !had:
			changes, keys = append(changes, Change[T]{objects.Added, v}), append(keys, k)
		case old.GetResourceVersion() != v.GetResourceVersion():
			changes, keys = append(changes, Change[T]{objects.Modified, v}), append(keys, k)
		}
	}
	// In key order, so that what a list applies does not depend on map
	// order.
	slices.SortFunc(changes, func(a, b Change[T]) int { return compareKeys(keyOf(a.Value), keyOf(b.Value)) })
	m.mu.Lock()
	m.items = list
	m.mu.Unlock()
	m.cfg.Apply(changes)
	select {
	case <-m.synced:
	default:
		close(m.synced)
	}
}

// event applies one watch event.
func (m *Mirror[T]) event(typ string, u *unstructured.Unstructured) {
	k := keyOf(u)
	old, had := m.items[k]
	if typ == objects.Deleted {
		if !had {
			return
		}
		m.mu.Lock()
		delete(m.items, k)
		m.mu.Unlock()
		m.cfg.Apply([]Change[T]{{objects.Deleted, old}})
		return
	}
	v, ok := m.decode(u)
	if !ok {
		return
	}
	m.mu.Lock()
	m.items[k] = v
	m.mu.Unlock()
	typ = objects.Added
	if had {
		typ = objects.Modified
	}
	m.cfg.Apply([]Change[T]{{typ, v}})
}

// Convert is a Config.Decode for a typed API object (T is *E).
func Convert[E any, T interface {
	*E
	metav1.Object
}](u *unstructured.Unstructured) (T, error) {
	v := T(new(E))
	return v, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, v)
}

// Runner is a mirror of any type, as RunAll runs them.
type Runner interface {
	Run(ctx context.Context)
	Synced() <-chan struct{}
}

// RunAll runs ms until ctx ends and calls synced once every one of them
// is synced (not if ctx ends first), from a goroutine of its own. It
// returns when they all have stopped.
func RunAll(ctx context.Context, synced func(), ms ...Runner) {
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() { m.Run(ctx) })
	}
	wg.Go(func() {
		for _, m := range ms {
			select {
			case <-m.Synced():
			case <-ctx.Done():
				return
			}
		}
		synced()
	})
	wg.Wait()
}
