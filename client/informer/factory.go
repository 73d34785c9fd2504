package informer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/client"
)

// Selection is what an informer caches: a namespace ("" for all) and
// label and field selectors.
type Selection struct {
	Namespace, LabelSelector, FieldSelector string
}

// FactoryOptions are the settings a Factory gives its informers.
type FactoryOptions struct {
	// Name, if set, prefixes the names of the factory's informers:
	// "<Name>/<resource and selection>" (see Shared). Factories that share a
	// Metrics registerer and a selection need different names.
	Name string
	// Metrics receives every informer's metrics, labelled with its name.
	Metrics prometheus.Registerer
	Log     *slog.Logger
	// DisableStreamingList, DetectMutations: see Options.
	DisableStreamingList bool
	DetectMutations      bool
	// Namespaces, if set, scopes the factory to these namespaces, as a
	// tenant without cluster-wide access needs: Shared with a Selection of
	// no namespace, for a namespaced resource, returns an informer over
	// these namespaces (see Options.Namespaces) instead of one over all.
	// A Selection naming a namespace, and a cluster-scoped resource, are
	// not affected.
	Namespaces []string
	// Compact makes every informer of the factory keep a compact cache
	// (see Options.Compact). It is a factory setting, not a per-informer
	// one, so that all code sharing a factory's informers agrees on
	// whether objects read from a Lister are shared or owned; use two
	// factories to have both kinds.
	Compact bool
	// DefaultResync is the resync period (see HandlerOptions.Resync) of
	// every handler added to the factory's informers without one of its
	// own (Resync 0), package controller's sources included. 0: none.
	DefaultResync time.Duration
}

// Factory shares informers: Shared returns the same informer for the same Go
// type, resource and selection, so that every part of a program that
// watches ConfigMaps in one namespace shares one watch and one cache.
//
// Caching is explicit: nothing starts an informer behind your back. Run
// runs every informer the factory made, including those made while it
// runs. A Factory is safe for concurrent use.
type Factory struct {
	rest *client.REST
	opts FactoryOptions

	mu        sync.Mutex
	informers map[factoryKey]runner
	names     map[string]bool // of the informers
	order     []factoryKey
	errs      []error // see Err
	running   bool
	added     chan struct{} // cap 1: an informer was added
}

type factoryKey struct {
	typ reflect.Type
	gvr schema.GroupVersionResource
	sel Selection
}

type runner interface {
	Run(ctx context.Context) error
	HasSynced() bool
	refusal() error
}

// NewFactory returns a factory of informers reading through r.
func NewFactory(r *client.REST, opts FactoryOptions) *Factory {
	return &Factory{rest: r, opts: opts, informers: map[factoryKey]runner{}, names: map[string]bool{}, added: make(chan struct{}, 1)}
}

// Shared returns the factory's informer of T objects of res matching sel,
// creating it on first use: every caller asking for the same type,
// resource and selection shares it. Add indexes with AddIndexers.
//
// The informer is named after res and sel (see Options.Name), prefixed
// with FactoryOptions.Name if set; when the factory already has an
// informer of that name, for another Go type, the type is added:
// "configmaps (*v2.Widget)". An informer of *unstructured.Unstructured
// objects always has its type added, "configmaps
// (*unstructured.Unstructured)", so that a typed and an unstructured
// informer of one selection get the same names in whichever order they
// are created; only two typed informers of one selection depend on the
// order (the later one names its type). Should its metrics fail to
// register (FactoryOptions.Metrics already has an informer of that name,
// from another factory or from New), Shared does not fail: it returns the
// informer, working but without metrics, and reports the error through
// Err and the informer's log. It panics, as for a programming error, if T
// is not a pointer to a struct or a selector does not parse.
func Shared[T client.Object](f *Factory, res client.Resource, sel Selection) *SharedInformer[T] {
	typ := reflect.TypeFor[T]()
	k := factoryKey{typ: typ, gvr: res.GVR, sel: sel}
	f.mu.Lock()
	defer f.mu.Unlock()
	if inf, ok := f.informers[k]; ok {
		return inf.(*SharedInformer[T])
	}
	ns, namespaces := sel.Namespace, []string(nil)
	if ns == "" && res.Namespaced && len(f.opts.Namespaces) > 0 {
		var err error
		if namespaces, err = scopes("", f.opts.Namespaces); err != nil {
			panic(fmt.Sprintf("informer.Shared: %v", err))
		}
		ns = strings.Join(namespaces, ",")
	}
	name := selectionName(res, ns, sel.LabelSelector, sel.FieldSelector)
	if f.opts.Name != "" {
		name = f.opts.Name + "/" + name
	}
	// An informer of unstructured objects always names its type, so that
	// a typed and an unstructured informer of one selection are named the
	// same whichever a program creates first.
	if typ == unstructuredType || f.names[name] {
		name += " (" + typ.String() + ")"
	}
	inf, err := newInformer(client.NewClient[T](f.rest, res), Options[T]{
		Name:      name,
		Namespace: sel.Namespace, Namespaces: namespaces, LabelSelector: sel.LabelSelector, FieldSelector: sel.FieldSelector,
		Log:                  f.opts.Log,
		DisableStreamingList: f.opts.DisableStreamingList, DetectMutations: f.opts.DetectMutations,
		Compact: f.opts.Compact,
	})
	if err != nil {
		panic(fmt.Sprintf("informer.Shared: %v", err))
	}
	if f.opts.Metrics != nil {
		if err := inf.exportMetrics(f.opts.Metrics); err != nil {
			inf.logger.Error("running without metrics", "err", err)
			f.errs = append(f.errs, err)
		}
	}
	inf.defaultResync = f.opts.DefaultResync // before anyone else has inf
	f.informers[k] = inf
	f.names[name] = true
	f.order = append(f.order, k)
	select {
	case f.added <- struct{}{}:
	default:
	}
	return inf
}

// DefaultResync returns the resync period of the factory that made i
// (FactoryOptions.DefaultResync), or 0: what a handler added with
// HandlerOptions.Resync 0 resyncs with.
func (i *SharedInformer[T]) DefaultResync() time.Duration { return i.defaultResync }

// Err returns the errors Shared reported so far (informers whose metrics
// could not be registered), joined, or nil.
func (f *Factory) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

// Run runs the factory's informers until ctx ends, starting informers
// created meanwhile as they come, and returns once all of them returned.
// It may be called only once.
func (f *Factory) Run(ctx context.Context) error {
	f.mu.Lock()
	if f.running {
		f.mu.Unlock()
		return errors.New("informer: factory already ran")
	}
	f.running = true
	f.mu.Unlock()
	var wg sync.WaitGroup
	started := 0
	for {
		f.mu.Lock()
		for _, k := range f.order[started:] {
			inf := f.informers[k]
			wg.Go(func() { inf.Run(ctx) })
		}
		started = len(f.order)
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-f.added:
		}
	}
}

// WaitForSync waits until every informer made so far has synced, or ctx
// ends, also while the server refuses one access (see
// WaitForSyncOrRefusal).
func (f *Factory) WaitForSync(ctx context.Context) error {
	f.mu.Lock()
	var fns []func() bool
	for _, inf := range f.informers {
		fns = append(fns, inf.HasSynced)
	}
	f.mu.Unlock()
	return WaitForSync(ctx, fns...)
}

// WaitForSyncOrRefusal waits until every informer made so far has synced, or one is
// refused access, or ctx ends. A refusal is returned at once, as a
// *RefusedError naming the informer, resource, namespace and verb (those
// of every informer refused, joined); see SharedInformer.WaitForSyncOrRefusal.
func (f *Factory) WaitForSyncOrRefusal(ctx context.Context) error {
	f.mu.Lock()
	infs := make([]runner, 0, len(f.order))
	for _, k := range f.order {
		infs = append(infs, f.informers[k])
	}
	f.mu.Unlock()
	return waitSynced(ctx, infs)
}

// WaitSynced is WaitForSyncOrRefusal.
//
// Deprecated: use WaitForSyncOrRefusal (waits are named WaitFor and what
// ends them; see the package documentation, # Names).
func (f *Factory) WaitSynced(ctx context.Context) error { return f.WaitForSyncOrRefusal(ctx) }

// For is Shared.
//
// Deprecated: use Shared (For is the Builder's word in package
// controller; see the package documentation, # Names).
func For[T client.Object](f *Factory, res client.Resource, sel Selection) *SharedInformer[T] {
	return Shared[T](f, res, sel)
}

var unstructuredType = reflect.TypeFor[*unstructured.Unstructured]()
