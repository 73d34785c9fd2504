// Package shard routes a store's keys to several stores by key prefix: the
// keys of some resources (events, leases) live on etcd clusters of their
// own, as kube-apiserver's --etcd-servers-overrides puts them, and every
// other key on the main cluster.
//
// A Router is a storage.Partitioned store: Get, Create, Update, Delete
// and their notes (storage.WithNote, written in the transaction of the
// key's own cluster) go to the store of the key; List, Count, ListAll,
// DeletePrefix and Watch to the store of the prefix, the one holding
// every key under it. A prefix that spans clusters (the registry root) is
// refused with storage.ErrSpansParts: revisions of two clusters are not
// comparable, so one list or watch cannot stand for both. Callers that
// follow every key (the garbage collector, the history recorder) read each
// of Parts. Revision, Compact and Compacted, which name no key, are the
// main store's; a caller wanting a resource's revision asks Part.
//
// A route's prefix is a whole resource's (`/registry/events/`); routes may
// not nest. Keys left in the main store under a route's prefix (written
// before the route existed) are not read: moving them is a migration.
//
// # Concurrency
//
// A Router is immutable after New and safe for concurrent use; it starts
// no goroutine.
package shard

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/objwatch/objwatch/storage"
)

// Route sends the keys under Prefix to Store.
type Route struct {
	// Name names the store in errors and readiness checks
	// (`events`, `coordination.k8s.io/leases`).
	Name   string
	Prefix string
	Store  storage.Interface
}

// Router is a storage.Partitioned store; see the package doc.
type Router struct {
	main   storage.Interface
	routes []Route // longest prefix first
}

var (
	_ storage.Partitioned = (*Router)(nil)
	_ storage.Streamer    = (*Router)(nil)
	_ storage.RestReader  = (*Router)(nil)
)

// New returns a Router of main and routes. Prefixes must end in "/", be
// distinct, and not be under one another.
func New(main storage.Interface, routes ...Route) (*Router, error) {
	if main == nil {
		return nil, fmt.Errorf("shard: no main store")
	}
	rs := slices.Clone(routes)
	for i, r := range rs {
		switch {
		case r.Store == nil:
			return nil, fmt.Errorf("shard: route %q has no store", r.Name)
		case r.Prefix == "" || !strings.HasSuffix(r.Prefix, "/"):
			return nil, fmt.Errorf("shard: route %q: prefix %q does not end in /", r.Name, r.Prefix)
		}
		for _, o := range rs[:i] {
			if strings.HasPrefix(r.Prefix, o.Prefix) || strings.HasPrefix(o.Prefix, r.Prefix) {
				return nil, fmt.Errorf("shard: routes %q (%s) and %q (%s) overlap", o.Name, o.Prefix, r.Name, r.Prefix)
			}
		}
	}
	return &Router{main: main, routes: rs}, nil
}

// Main returns the main store.
func (r *Router) Main() storage.Interface { return r.main }

// Routes returns the routes (a copy).
func (r *Router) Routes() []Route { return slices.Clone(r.routes) }

// ofKey is the route of key (nil: main).
func (r *Router) ofKey(key string) *Route {
	for i := range r.routes {
		if strings.HasPrefix(key, r.routes[i].Prefix) {
			return &r.routes[i]
		}
	}
	return nil
}

func (r *Router) storeOf(key string) storage.Interface {
	if rt := r.ofKey(key); rt != nil {
		return rt.Store
	}
	return r.main
}

// ofPrefix is the store holding every key under prefix, or
// storage.ErrSpansParts.
func (r *Router) ofPrefix(prefix string) (storage.Interface, error) {
	if rt := r.ofKey(prefix); rt != nil {
		return rt.Store, nil
	}
	for _, rt := range r.routes {
		if strings.HasPrefix(rt.Prefix, prefix) {
			return nil, fmt.Errorf("%w: %s (%s is on %s)", storage.ErrSpansParts, prefix, rt.Prefix, rt.Name)
		}
	}
	return r.main, nil
}

// Part implements storage.Partitioned.
func (r *Router) Part(prefix string) (storage.Interface, string) {
	if rt := r.ofKey(prefix); rt != nil {
		return rt.Store, rt.Name
	}
	return r.main, ""
}

// Parts implements storage.Partitioned.
func (r *Router) Parts(prefix string) []storage.Part {
	if rt := r.ofKey(prefix); rt != nil {
		return []storage.Part{{Name: rt.Name, Store: rt.Store}}
	}
	parts := []storage.Part{{Store: r.main}}
	for _, rt := range r.routes {
		if strings.HasPrefix(rt.Prefix, prefix) {
			parts[0].Skip = append(parts[0].Skip, rt.Prefix)
			parts = append(parts, storage.Part{Name: rt.Name, Store: rt.Store})
		}
	}
	return parts
}

func (r *Router) Get(ctx context.Context, key string) (storage.KeyValue, error) {
	return r.storeOf(key).Get(ctx, key)
}

func (r *Router) List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListResult, error) {
	s, err := r.ofPrefix(prefix)
	if err != nil {
		return storage.ListResult{}, err
	}
	return s.List(ctx, prefix, opts)
}

// ListAll streams when the prefix's store can (storage.Streamer).
func (r *Router) ListAll(ctx context.Context, prefix string, chunk func(kvs []storage.KeyValue) error) (int64, error) {
	s, err := r.ofPrefix(prefix)
	if err != nil {
		return 0, err
	}
	st, ok := s.(storage.Streamer)
	if !ok {
		return 0, storage.ErrStreamUnsupported
	}
	return st.ListAll(ctx, prefix, chunk)
}

func (r *Router) Count(ctx context.Context, prefix string) (int64, error) {
	s, err := r.ofPrefix(prefix)
	if err != nil {
		return 0, err
	}
	return s.Count(ctx, prefix)
}

func (r *Router) Create(ctx context.Context, key string, value []byte) (storage.KeyValue, error) {
	return r.storeOf(key).Create(ctx, key, value)
}

func (r *Router) Update(ctx context.Context, key string, value []byte, expectedRevision int64) (storage.KeyValue, error) {
	return r.storeOf(key).Update(ctx, key, value, expectedRevision)
}

func (r *Router) Delete(ctx context.Context, key string, expectedRevision int64) (storage.KeyValue, error) {
	return r.storeOf(key).Delete(ctx, key, expectedRevision)
}

func (r *Router) DeletePrefix(ctx context.Context, prefix string) (int64, error) {
	s, err := r.ofPrefix(prefix)
	if err != nil {
		return 0, err
	}
	return s.DeletePrefix(ctx, prefix)
}

func (r *Router) Watch(ctx context.Context, prefix string, fromRevision int64) (storage.Watcher, error) {
	s, err := r.ofPrefix(prefix)
	if err != nil {
		return nil, err
	}
	return s.Watch(ctx, prefix, fromRevision)
}

// Revision is the main store's.
func (r *Router) Revision(ctx context.Context) (int64, error) { return r.main.Revision(ctx) }

// Compact compacts the main store (each cluster is compacted on its own).
func (r *Router) Compact(ctx context.Context, revision int64) error {
	return r.main.Compact(ctx, revision)
}

// Compacted is the main store's.
func (r *Router) Compacted(ctx context.Context, rev int64) (int64, error) {
	return r.main.Compacted(ctx, rev)
}

// FromRest transforms back with the key's store (storage.RestReader).
func (r *Router) FromRest(ctx context.Context, key string, rev int64, value []byte) ([]byte, error) {
	if rr, ok := r.storeOf(key).(storage.RestReader); ok {
		return rr.FromRest(ctx, key, rev, value)
	}
	return value, nil
}
