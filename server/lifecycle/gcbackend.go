package lifecycle

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/objwatch/objwatch/server/gc"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// gcBackend is the server as the garbage collector (package gc) sees it:
// it resolves owner references through the registry and deletes and
// updates through the same paths as API requests (finalizers, namespace
// rules, validation, the watch cache's update guesses).
type gcBackend struct{ l *Lifecycle }

var _ gc.Backend = gcBackend{}

func (b gcBackend) OwnerKey(ref metav1.OwnerReference, ns string) (string, bool) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || ref.Name == "" {
		return "", false
	}
	res, ok := b.l.registry.ForKind(gv.Group, gv.Version, ref.Kind)
	if !ok || res.Namespaced && ns == "" {
		return "", false
	}
	if !res.Namespaced {
		ns = ""
	}
	return res.Key(ns, ref.Name), true
}

func (b gcBackend) Delete(ctx context.Context, key string, uid types.UID, rev int64, policy metav1.DeletionPropagation) error {
	res, ns, name, ok := b.l.registry.ForKey(key)
	if !ok {
		return nil // its resource is gone, and its objects with it
	}
	p := &metav1.Preconditions{UID: &uid}
	if rev > 0 {
		v := strconv.FormatInt(rev, 10)
		p.ResourceVersion = &v
	}
	req := &objects.Request{Actor: "system:serviceaccount:kube-system:generic-garbage-collector", Verb: "delete", Resource: res, Namespace: ns, Name: name}
	_, err := b.l.objects.Delete(ctx, req, &metav1.DeleteOptions{PropagationPolicy: &policy, Preconditions: p})
	var pf *objects.PreconditionError
	switch {
	case apierrors.IsNotFound(err) || objects.UIDChanged(err):
		return nil
	case errors.As(err, &pf):
		return gc.ErrChanged
	}
	return err
}

func (b gcBackend) Update(ctx context.Context, key string, uid types.UID, change func(*unstructured.Unstructured) bool) error {
	res, ns, name, ok := b.l.registry.ForKey(key)
	if !ok {
		return nil
	}
	err := b.l.update(ctx, res, ns, name, "", func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		if uid != "" && cur.GetUID() != uid {
			return nil, errUIDChanged
		}
		if !change(cur) {
			return nil, errUnchanged
		}
		cur.SetResourceVersion("") // not pinned: a conflict is retried
		return cur, nil
	})
	if apierrors.IsNotFound(err) || errors.Is(err, errUIDChanged) || errors.Is(err, errUnchanged) {
		return nil
	}
	return err
}

func (b gcBackend) Container(key string, m gc.Meta) (func(string) bool, bool) {
	if !m.Deleting() {
		return nil, false
	}
	res, _, name, ok := b.l.registry.ForKey(key)
	switch {
	case !ok:
	case isNamespaceResource(res):
		return func(k string) bool { return namespaceOfKey(k) == name }, true
	case isCRDResource(res) && m.HasFinalizer(registry.CRDCleanupFinalizer):
		prefix, ok := customResourcePrefix(name)
		return func(k string) bool { return strings.HasPrefix(k, prefix) }, ok
	}
	return nil, false
}

func (b gcBackend) Drain(ctx context.Context, key string) (int64, error) {
	res, _, name, ok := b.l.registry.ForKey(key)
	switch {
	case !ok:
		return 0, nil
	case isNamespaceResource(res):
		return b.l.drainNamespace(ctx, name)
	}
	return b.l.drainCustomResources(ctx, name)
}

func (b gcBackend) Finish(ctx context.Context, key string, uid types.UID) error {
	res, _, name, ok := b.l.registry.ForKey(key)
	switch {
	case !ok:
		return nil
	case isNamespaceResource(res):
		return b.l.finishNamespace(ctx, name, uid)
	}
	return b.Update(ctx, key, uid, func(obj *unstructured.Unstructured) bool {
		return gc.RemoveFinalizer(obj, registry.CRDCleanupFinalizer)
	})
}

// namespaceOfKey returns the namespace of a namespaced object's key
// (registry.Root + group/plural/namespace/name), "" for other keys.
func namespaceOfKey(key string) string {
	parts := strings.Split(strings.TrimPrefix(key, registry.Root), "/")
	if len(parts) != 4 {
		return ""
	}
	return parts[2]
}

// errUIDChanged ends an update whose object was replaced by another of the
// same name; errUnchanged one that has nothing to change.
var (
	errUIDChanged = errors.New("another object of that name")
	errUnchanged  = errors.New("nothing to change")
)

// gcRunner runs the server's garbage collector: while this server holds
// the objwatch-garbage-collector lease (see elector), or always when
// election is off. Each term runs a new gc.Collector; the counters add up
// across terms. Its methods are safe for concurrent use.
type gcRunner struct {
	l       *Lifecycle
	elector *elector // nil: no election
	cur     atomic.Pointer[gc.Collector]

	mu   sync.Mutex
	past gc.Stats // of the terms that ended
}

func newGCRunner(l *Lifecycle) *gcRunner {
	r := &gcRunner{l: l}
	if l.cfg.GCLeaseDuration > 0 {
		r.elector = newElector(l, "objwatch-garbage-collector", l.cfg.GCLeaseDuration)
	}
	return r
}

// run runs the collector until ctx ends.
func (r *gcRunner) run(ctx context.Context) {
	if r.elector == nil {
		r.term(ctx)
		return
	}
	r.elector.run(ctx, r.term)
}

func (r *gcRunner) term(ctx context.Context) {
	c := gc.New(gc.Config{Store: r.l.store, Backend: gcBackend{r.l}, Prefix: registry.Root, Workers: r.l.cfg.GCWorkers, Log: r.l.cfg.Log})
	r.cur.Store(c)
	c.Run(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur.Store(nil)
	r.past = r.past.Add(c.Stats())
}

// kindsChanged tells the running collector that the served kinds changed.
func (r *gcRunner) kindsChanged() {
	if c := r.cur.Load(); c != nil {
		c.KindsChanged()
	}
}

// leading reports whether this server runs the collector now.
func (r *gcRunner) leading() bool { return r.cur.Load() != nil }

func (r *gcRunner) stats() gc.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.cur.Load(); c != nil {
		return r.past.Add(c.Stats())
	}
	return r.past
}

func (r *gcRunner) pending() int {
	if c := r.cur.Load(); c != nil {
		return c.Pending()
	}
	return 0
}

// metrics are the collector's metrics.
func (r *gcRunner) metrics() []prometheus.Collector {
	counter := func(name, help string, v func(gc.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "objwatch_gc_" + name, Help: help},
			func() float64 { return float64(v(r.stats())) })
	}
	gauge := func(name, help string, v func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "objwatch_gc_" + name, Help: help}, v)
	}
	return []prometheus.Collector{
		gauge("pending", "Objects waiting for the garbage collector.", func() float64 { return float64(r.pending()) }),
		gauge("leader", "1 while this server runs the garbage collector (holds its lease), else 0.", func() float64 {
			if r.leading() {
				return 1
			}
			return 0
		}),
		counter("deletions_total", "Objects the garbage collector deleted.", func(s gc.Stats) int64 { return s.Deleted }),
		counter("orphaned_total", "Owner references removed from dependents by Orphan deletions.", func(s gc.Stats) int64 { return s.Orphaned }),
		counter("released_total", "Dependents that lost references to absent or foreground-deleting owners but kept another.", func(s gc.Stats) int64 { return s.Released }),
		counter("errors_total", "Garbage collector attempts that failed and were retried.", func(s gc.Stats) int64 { return s.Errors }),
	}
}

// RunGC runs the garbage collector, while this server holds its lease,
// until ctx ends.
func (l *Lifecycle) RunGC(ctx context.Context) { l.gc.run(ctx) }

// GCMetrics are the collector's metrics, for the caller to register.
func (l *Lifecycle) GCMetrics() []prometheus.Collector { return l.gc.metrics() }
