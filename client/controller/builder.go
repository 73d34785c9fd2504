package controller

import (
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
	"github.com/objwatch/objwatch/client/workqueue"
)

// Source is an informer whose events enqueue Requests, filtered by
// predicates. Make one with NewSource or NewMapSource, from an informer of
// informer.New or of a Factory (informer.Shared), and give it to a
// Builder.
type Source interface {
	bind(b binding) (source[Request], error)
	resource() client.Resource
	staleGuard(w *writes) func(Request) bool
}

type role uint8

const (
	rolePrimary role = iota // For: the object's own key
	roleOwned               // Owns: its controller owner's key
	roleMapped              // Watches: the map function's keys
)

type binding struct {
	role       role
	controller string
	owner      client.Resource // the primary resource
	index      int             // among the sources of its role
}

// NewSource is a Source of inf's objects for Builder.For and Builder.Owns.
//
// Predicates (all must hold) filter adds, as p(nil, obj), and updates, as
// p(old, new); deletes always pass, since a controller must see an object
// go whatever changed (a reconciler is called for a deleted object that
// was never its concern, and finds nothing to do).
// change.FieldsChanged("spec.replicas"), change.GenerationChanged,
// change.FieldsChangedExcept("metadata.labels") (ignore label-only
// updates) and change.LabelsMatch(sel) (which objects of a resource are
// primaries, when the controller also owns objects of that resource) are
// typical.
func NewSource[T client.Object](inf *informer.SharedInformer[T], predicates ...change.Predicate) Source {
	return &watchSource[T]{inf: inf, preds: predicates}
}

// NewMapSource is a Source for Builder.Watches: each event of inf's
// objects enqueues the Requests fn returns for the object (for an update,
// for the old and the new state). Predicates filter as for NewSource.
func NewMapSource[T client.Object](inf *informer.SharedInformer[T], fn func(T) []Request, predicates ...change.Predicate) Source {
	return &watchSource[T]{inf: inf, preds: predicates, fn: fn}
}

// Watch is NewSource.
//
// Deprecated: use NewSource (constructors are named New; Watch is the
// client's verb).
func Watch[T client.Object](inf *informer.SharedInformer[T], predicates ...change.Predicate) Source {
	return NewSource(inf, predicates...)
}

// Map is NewMapSource.
//
// Deprecated: use NewMapSource.
func Map[T client.Object](inf *informer.SharedInformer[T], fn func(T) []Request, predicates ...change.Predicate) Source {
	return NewMapSource(inf, fn, predicates...)
}

type watchSource[T client.Object] struct {
	inf   *informer.SharedInformer[T]
	preds []change.Predicate
	fn    func(T) []Request
}

func (s *watchSource[T]) resource() client.Resource { return s.inf.Resource() }

func (s *watchSource[T]) staleGuard(w *writes) func(Request) bool {
	v, gvr := view[T]{s.inf}, s.inf.Resource().GVR
	return func(r Request) bool {
		_, stale := w.pending(objectKey{gvr: gvr, namespace: r.Namespace, name: r.Name}, v)
		return stale
	}
}

func (s *watchSource[T]) bind(b binding) (source[Request], error) {
	h := &handlerSource[T]{inf: s.inf, preds: s.preds, name: fmt.Sprintf("controller/%s/%s%d", b.controller, [...]string{"for", "owns", "watches"}[b.role], b.index)}
	switch b.role {
	case rolePrimary, roleOwned:
		if s.fn != nil {
			return nil, fmt.Errorf("%s: For and Owns take a Source made by NewSource, not NewMapSource", s.inf.Name())
		}
		h.keys = func(obj T) []Request { return []Request{{Namespace: obj.GetNamespace(), Name: obj.GetName()}} }
		if b.role == roleOwned {
			h.keys = ownerKeys[T](b.owner)
		}
	case roleMapped:
		if s.fn == nil {
			return nil, fmt.Errorf("%s: Watches takes a Source made by NewMapSource", s.inf.Name())
		}
		h.keys = s.fn
	}
	return h, nil
}

// ownerKeys returns the key of an object's controller owner, if it is of
// the owner resource: same API group (any version) and kind.
func ownerKeys[T client.Object](owner client.Resource) func(T) []Request {
	return func(obj T) []Request {
		ref := metav1.GetControllerOfNoCopy(obj)
		if ref == nil || ref.Kind != owner.Kind {
			return nil
		}
		if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != owner.GVR.Group {
			return nil
		}
		r := Request{Name: ref.Name}
		if owner.Namespaced {
			r.Namespace = obj.GetNamespace()
		}
		return []Request{r}
	}
}

// handlerSource is a bound Source: an informer handler that enqueues.
type handlerSource[T client.Object] struct {
	inf   *informer.SharedInformer[T]
	preds []change.Predicate
	keys  func(T) []Request
	name  string // the handler's
}

func (h *handlerSource[T]) pass(old any, new T) bool {
	for _, p := range h.preds {
		if !p(old, new) {
			return false
		}
	}
	return true
}

func (h *handlerSource[T]) start(q *workqueue.Queue[Request]) (started, error) {
	reg, err := h.inf.AddHandler(informer.HandlerFuncs[T]{
		Add: func(obj T, initial bool) {
			if !h.pass(nil, obj) {
				return
			}
			var o workqueue.AddOpts
			if initial {
				o.Priority = workqueue.LowPriority
			}
			q.AddWithOpts(o, h.keys(obj)...)
		},
		Update: func(old, new T) {
			if !h.pass(old, new) {
				return
			}
			var o workqueue.AddOpts
			if old.GetResourceVersion() == new.GetResourceVersion() {
				o.Priority = workqueue.LowPriority // a resync
			}
			q.AddWithOpts(o, append(h.keys(new), h.keys(old)...)...)
		},
		Delete: func(obj T, _ bool) { q.Add(h.keys(obj)...) },
	}, informer.HandlerOptions{Name: h.name})
	if err != nil {
		return started{}, fmt.Errorf("%s: %w", h.inf.Name(), err)
	}
	return started{
		name:    h.inf.Name(),
		synced:  func() bool { return h.inf.HasSynced() && reg.HasSynced() },
		lastErr: h.inf.LastError,
		remove:  reg.Remove,
		done:    reg.Done(),
	}, nil
}

// Builder assembles a Controller of Requests: its primary resource
// (For), the resources it owns (Owns) and any others it watches
// (Watches). Errors are collected and reported once, by Complete.
//
//	ctrl, err := controller.NewBuilder("web").
//		For(controller.NewSource(deployments, change.FieldsChanged("spec.replicas"))).
//		Owns(controller.NewSource(configMaps)).
//		Watches(controller.NewMapSource(secrets, secretUsers)).
//		WithOptions(controller.Options{MaxConcurrentReconciles: 4, Metrics: reg}).
//		Complete(reconciler)
type Builder struct {
	name     string
	opts     Options
	primary  Source
	owned    []Source
	watched  []Source
	errs     []error
	complete bool
}

// NewBuilder starts a controller named name (in logs, metrics and its
// handlers' names).
func NewBuilder(name string) *Builder { return &Builder{name: name} }

// For sets the primary resource: an event of one of its objects
// reconciles that object. Required, once.
func (b *Builder) For(s Source) *Builder {
	switch {
	case s == nil:
		b.errs = append(b.errs, errors.New("For: nil source"))
	case b.primary != nil:
		b.errs = append(b.errs, errors.New("For called twice"))
	default:
		b.primary = s
	}
	return b
}

// Owns adds an owned resource: an event of one of its objects reconciles
// the object's controller (its ownerReference with controller: true), if
// that is of the primary resource's group and kind.
func (b *Builder) Owns(s Source) *Builder { return b.add(&b.owned, s, "Owns") }

// Watches adds a resource whose events reconcile what a map function
// says (see NewMapSource).
func (b *Builder) Watches(s Source) *Builder { return b.add(&b.watched, s, "Watches") }

func (b *Builder) add(to *[]Source, s Source, method string) *Builder {
	if s == nil {
		b.errs = append(b.errs, fmt.Errorf("%s: nil source", method))
	} else {
		*to = append(*to, s)
	}
	return b
}

// WithOptions sets the controller's options.
func (b *Builder) WithOptions(o Options) *Builder {
	b.opts = o
	return b
}

// Complete returns the controller that calls r, or every error the
// builder met, joined. Run it with Run.
func (b *Builder) Complete(r Reconciler[Request]) (*Controller[Request], error) {
	errs := b.errs
	if b.complete {
		errs = append(errs, errors.New("Complete called twice"))
	}
	b.complete = true
	if b.primary == nil {
		errs = append(errs, errors.New("For is required"))
	}
	if r == nil {
		errs = append(errs, errors.New("nil reconciler"))
	}
	var sources []source[Request]
	if b.primary != nil {
		owner := b.primary.resource()
		bind := func(s Source, ro role, i int) {
			src, err := s.bind(binding{role: ro, controller: b.name, owner: owner, index: i})
			if err != nil {
				errs = append(errs, err)
				return
			}
			sources = append(sources, src)
		}
		bind(b.primary, rolePrimary, 0)
		for i, s := range b.owned {
			bind(s, roleOwned, i)
		}
		for i, s := range b.watched {
			bind(s, roleMapped, i)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("controller %s: %w", b.name, errors.Join(errs...))
	}
	c, err := New(b.name, r, b.opts)
	if err != nil {
		return nil, err
	}
	c.sources = sources
	c.stale = b.primary.staleGuard(c.writes)
	return c, nil
}
