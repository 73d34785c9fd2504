package objects

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/history"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// ChangesOptions select the changes Changes reports.
type ChangesOptions struct {
	// User asks; only the changes of resources it may list (in their
	// namespace) are reported.
	User *auth.User
	// Namespace: only its objects ("": every namespace, and the
	// cluster-scoped objects).
	Namespace string
	// Resource: only its objects (nil: every served resource's).
	Resource *registry.Resource
	// Selector: only the changes of objects whose labels it matches,
	// before or after the change (nil: every one).
	Selector labels.Selector
	// From and To: the changes after revision From, up to To.
	From, To int64
}

// ChangeItem is one change of one object.
type ChangeItem struct {
	// Type is Added, Modified or Deleted.
	Type            string
	Resource        *registry.Resource
	Namespace, Name string
	Revision        int64
	Time            time.Time
	Author          *history.Author // nil: unknown
	// InGap: a deletion at some revision within a gap.
	InGap bool
	// Object is the object after the change (the deleted object for a
	// deletion), Old before it (nil for a creation).
	Object, Old *unstructured.Unstructured
}

// Changes calls fn with every change of a served object that opts
// select, in revision order, from the history store (400 without one;
// 410 when From is older than it retains). A resource the user may not
// list is left out, not refused. fn's error ends it and is returned.
func (s *Service) Changes(ctx context.Context, opts ChangesOptions, fn func(ChangeItem) error) error {
	past := s.etcd.past
	if past == nil {
		return apierrors.NewBadRequest("changes: this server keeps no history store (objwatch serve --history)")
	}
	if err := s.notRecorded("changes", opts.Resource); err != nil {
		return err
	}
	if opts.From < past.hs.Oldest() {
		return pastError(history.ErrNotRetained)
	}
	if err := s.historyCaughtUp(ctx); err != nil {
		return err
	}
	type access struct {
		res *registry.Resource
		ns  string
	}
	allowed := map[access]bool{}
	may := func(res *registry.Resource, ns string) bool {
		a := access{res, ns}
		ok, seen := allowed[a]
		if !seen {
			req := &Request{User: opts.User, Verb: "list", Resource: res, Namespace: ns}
			ok = s.hooks.authorize(ctx, req) == nil
			allowed[a] = ok
		}
		return ok
	}
	last := map[string]*unstructured.Unstructured{} // each key's state before its next change
	prefix := registry.Root
	if opts.Resource != nil {
		prefix = opts.Resource.Prefix(opts.Namespace)
	}
	return past.hs.Changes(prefix, opts.From, opts.To, func(e history.Entry) error {
		res, ns, name, ok := s.registry.ForKey(e.Key)
		if !ok || (opts.Resource != nil && res.StoragePrefix != opts.Resource.StoragePrefix) || (opts.Namespace != "" && ns != opts.Namespace) || !may(res, ns) {
			return nil
		}
		old, seen := last[e.Key]
		if !seen {
			before, err := past.hs.Get(e.Key, opts.From)
			switch {
			case errors.Is(err, storage.ErrNotFound):
			case err != nil:
				return pastError(err)
			default:
				if old, err = s.pastObject(ctx, res, before); err != nil {
					return err
				}
			}
		}
		it := ChangeItem{Resource: res, Namespace: ns, Name: name, Revision: e.Revision, Time: e.Time, Author: e.Author, InGap: e.InGap, Old: old}
		if e.Deleted {
			if old == nil {
				return nil // deleted before it was recorded
			}
			it.Type, it.Object, it.Old = Deleted, old, nil
			last[e.Key] = nil
		} else {
			obj, err := s.pastObject(ctx, res, e)
			if err != nil {
				return err
			}
			it.Type, it.Object = Modified, obj
			if old == nil {
				it.Type = Added
			}
			last[e.Key] = obj
		}
		if opts.Selector != nil && !matchesEither(opts.Selector, it.Object, it.Old) {
			return nil
		}
		return fn(it)
	})
}

func matchesEither(sel labels.Selector, objs ...*unstructured.Unstructured) bool {
	for _, o := range objs {
		if o != nil && sel.Matches(labels.Set(o.GetLabels())) {
			return true
		}
	}
	return false
}

// HistoryRecorded is the history store's last recorded revision (0: no
// store).
func (s *Service) HistoryRecorded() int64 {
	if s.etcd.past == nil {
		return 0
	}
	return s.etcd.past.hs.Recorded()
}

// HistoryOldest is the history store's oldest retained revision (0: no
// store).
func (s *Service) HistoryOldest() int64 {
	if s.etcd.past == nil {
		return 0
	}
	return s.etcd.past.hs.Oldest()
}

// notRecorded is the 400 of a read of the history store (what) about res
// when res lives on an etcd cluster of its own (--etcd-servers-overrides):
// the history store records the main cluster only. nil for nil.
func (s *Service) notRecorded(what string, res *registry.Resource) error {
	if res == nil {
		return nil
	}
	if name := clusterOf(s.store, res.StoragePrefix); name != "" {
		return apierrors.NewBadRequest(fmt.Sprintf("%s: the history store does not record %s: they live on an etcd cluster of their own (%s, --etcd-servers-overrides), and the history store records the main cluster only", what, gr(res), name))
	}
	return nil
}
