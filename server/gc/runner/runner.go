// Package runner runs the garbage collector (package gc) in the server:
// on the one server, among those sharing an etcd, that holds its lease
// (elect.go), acting through the object service as API requests do.
//
// # Concurrency
//
// A Runner's methods are safe for concurrent use. Run blocks until its
// context ends; the caller owns that goroutine.
package runner

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/objwatch/objwatch/server/gc"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// Config configures a Runner.
type Config struct {
	Registry *registry.Registry
	Storage  storage.Interface
	Log      *slog.Logger
	// Workers is how many objects the collector processes at once.
	Workers int
	// LeaseDuration is the duration of the collector's lease (negative:
	// no election, this server always runs it).
	LeaseDuration time.Duration
	// NamespaceDeletionDelay is how long the collector waits after it sees
	// a namespace start being deleted before it deletes its content and
	// finalizes it (kube-controller-manager's namespace controller: 5 s);
	// 0: at once. See gc.Config.DrainDelay.
	NamespaceDeletionDelay time.Duration
}

// Containers are the objects whose deletion waits until their content is
// gone (namespaces, custom resource definitions): gc.Backend's Container
// and Drain, and for its Finish how a container's content finalizer is
// removed. Package lifecycle has them.
type Containers interface {
	Container(key string, m gc.Meta) (contains func(key string) bool, ok bool)
	Drain(ctx context.Context, key string) (left int64, err error)
	// Finalizer returns the subresource through which the content
	// finalizer of the container at key is removed, and the change that
	// removes it (reporting whether it changed anything); ok is false
	// when key is no container.
	Finalizer(key string) (subresource string, remove func(*unstructured.Unstructured) bool, ok bool)
}

// Runner runs the server's garbage collector: while this server holds
// the objwatch-garbage-collector lease (see elector), or always when
// election is off. Each term runs a new gc.Collector; the counters add up
// across terms. Create it with New, then Use the object service.
type Runner struct {
	cfg     Config
	elector *elector // nil: no election
	backend backend
	cur     atomic.Pointer[gc.Collector]

	mu   sync.Mutex
	past gc.Stats // of the terms that ended
}

// New returns a Runner; it starts nothing.
func New(cfg Config) *Runner {
	r := &Runner{cfg: cfg}
	r.backend.registry = cfg.Registry
	if cfg.LeaseDuration > 0 {
		r.elector = newElector(cfg, "objwatch-garbage-collector", cfg.LeaseDuration)
	}
	return r
}

// Use sets what the collector acts through: the object service, and the
// containers. Call it once, before Run.
func (r *Runner) Use(s *objects.Service, c Containers) {
	r.backend.objects, r.backend.Containers = s, c
}

// Run runs the collector, while this server holds its lease, until ctx
// ends.
func (r *Runner) Run(ctx context.Context) {
	if r.elector == nil {
		r.term(ctx)
		return
	}
	r.elector.run(ctx, r.term)
}

func (r *Runner) term(ctx context.Context) {
	c := gc.New(gc.Config{Store: r.cfg.Storage, Backend: r.backend, Prefix: registry.Root, Workers: r.cfg.Workers, Log: r.cfg.Log, DrainDelay: r.drainDelay})
	r.cur.Store(c)
	r.cfg.Log.Info("garbage collector: started")
	c.Run(ctx)
	r.cfg.Log.Info("garbage collector: stopped")
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur.Store(nil)
	r.past = r.past.Add(c.Stats())
}

// drainDelay is how long the collector waits before draining the container
// at key: NamespaceDeletionDelay for a namespace, nothing for a custom
// resource definition (Kubernetes' finalizer of their resources does not
// wait).
func (r *Runner) drainDelay(key string) time.Duration {
	res, _, _, ok := r.cfg.Registry.ForKey(key)
	if !ok || res.Group != "" || res.Plural != "namespaces" {
		return 0
	}
	return r.cfg.NamespaceDeletionDelay
}

// KindsChanged tells the running collector that the served kinds changed.
func (r *Runner) KindsChanged() {
	if c := r.cur.Load(); c != nil {
		c.KindsChanged()
	}
}

// leading reports whether this server runs the collector now.
func (r *Runner) leading() bool { return r.cur.Load() != nil }

func (r *Runner) stats() gc.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.cur.Load(); c != nil {
		return r.past.Add(c.Stats())
	}
	return r.past
}

func (r *Runner) pending() int {
	if c := r.cur.Load(); c != nil {
		return c.Pending()
	}
	return 0
}

// Metrics are the collector's metrics, for the caller to register.
func (r *Runner) Metrics() []prometheus.Collector {
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

// backend is the server as the collector sees it: it resolves owner
// references through the registry and deletes and updates through the
// same paths as API requests (finalizers, namespace rules, validation,
// the watch cache's update guesses).
type backend struct {
	registry *registry.Registry
	objects  *objects.Service
	Containers
}

var _ gc.Backend = backend{}

// collectorActor is the user the collector's writes are audited as.
const collectorActor = "system:serviceaccount:kube-system:generic-garbage-collector"

// ownerResource is the served resource of ref's kind.
func (b backend) ownerResource(ref metav1.OwnerReference) (*registry.Resource, bool) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || ref.Name == "" {
		return nil, false
	}
	return b.registry.ForKind(gv.Group, gv.Version, ref.Kind)
}

func (b backend) OwnerKey(ref metav1.OwnerReference, ns string) (string, bool) {
	res, ok := b.ownerResource(ref)
	if !ok || res.Namespaced && ns == "" {
		return "", false
	}
	if !res.Namespaced {
		ns = ""
	}
	return res.Key(ns, ref.Name), true
}

func (b backend) OwnerKind(ref metav1.OwnerReference) (string, bool, bool) {
	res, ok := b.ownerResource(ref)
	if !ok {
		return "", false, false
	}
	return res.StoragePrefix, res.Namespaced, true
}

func (b backend) Delete(ctx context.Context, key string, uid types.UID, rev int64, policy metav1.DeletionPropagation) error {
	res, ns, name, ok := b.registry.ForKey(key)
	if !ok {
		return nil // its resource is gone, and its objects with it
	}
	p := &metav1.Preconditions{UID: &uid}
	if rev > 0 {
		v := strconv.FormatInt(rev, 10)
		p.ResourceVersion = &v
	}
	req := &objects.Request{Actor: collectorActor, Verb: "delete", Resource: res, Namespace: ns, Name: name}
	_, err := b.objects.Delete(ctx, req, &metav1.DeleteOptions{PropagationPolicy: &policy, Preconditions: p})
	var pf *objects.PreconditionError
	switch {
	case apierrors.IsNotFound(err) || objects.UIDChanged(err):
		return nil
	case errors.As(err, &pf):
		return gc.ErrChanged
	}
	return err
}

func (b backend) Update(ctx context.Context, key string, uid types.UID, change func(*unstructured.Unstructured) bool) error {
	return b.update(ctx, key, "", uid, change)
}

func (b backend) Finish(ctx context.Context, key string, uid types.UID) error {
	subresource, remove, ok := b.Finalizer(key)
	if !ok {
		return nil
	}
	return b.update(ctx, key, subresource, uid, remove)
}

// update changes the object at key (through subresource) as Update does.
func (b backend) update(ctx context.Context, key, subresource string, uid types.UID, change func(*unstructured.Unstructured) bool) error {
	res, ns, name, ok := b.registry.ForKey(key)
	if !ok {
		return nil
	}
	req := &objects.Request{Verb: "update", Resource: res, Namespace: ns, Name: name, Subresource: subresource}
	_, err := b.objects.Update(ctx, req, objects.WriteOptions{}, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
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

// errUIDChanged ends an update whose object was replaced by another of the
// same name; errUnchanged one that has nothing to change.
var (
	errUIDChanged = errors.New("another object of that name")
	errUnchanged  = errors.New("nothing to change")
)
