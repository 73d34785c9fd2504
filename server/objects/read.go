package objects

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// Get reads the object req names. With opts.ResourceVersion set ("0":
// any state; a number: no older than it) the watch cache may answer;
// without it the read is a quorum read. opts may be nil.
func (s *Service) Get(ctx context.Context, req *Request, opts *metav1.GetOptions) (*unstructured.Unstructured, error) {
	if err := s.hooks.authorize(ctx, req); err != nil {
		return nil, err
	}
	res := req.Resource
	if opts != nil && opts.ResourceVersion != "" {
		rv, err := ParseRV(opts.ResourceVersion)
		if err != nil {
			return nil, err
		}
		if obj, err := s.caches.get(ctx, res, req.Namespace, req.Name, rv); !errors.Is(err, errNoCache) {
			return obj, err
		}
		if rv > 0 {
			if err := s.etcd.waitFor(ctx, res.StoragePrefix, rv); err != nil {
				return nil, err
			}
		}
	}
	obj, _, err := s.etcd.get(ctx, res, req.Namespace, req.Name)
	return obj, err
}

// storeReader reads objects from etcd: every read the watch cache does
// not serve (see cachelist.go, cacheget.go, cachewatch.go for those it
// does) and every write's quorum read. Its methods are safe for
// concurrent use; it is copied by value into the types that read etcd.
type storeReader struct {
	store storage.Interface
	// futureRVWait is how long a read waits for a resourceVersion the
	// store has not reached (Config.FutureRVWait).
	futureRVWait time.Duration
	// bookmarkEvery is the interval between a watch's bookmarks
	// (Config.BookmarkInterval).
	bookmarkEvery time.Duration
	// past answers what etcd compacted (nil: no history store).
	past *pastReader
}

// pastOf is the history store's reader for the keys under prefix: nil
// without a history store, and for a resource on an etcd cluster of its
// own (--etcd-servers-overrides): the history store records the main
// cluster only, so reads of such a resource past etcd's compaction are
// 410, as without one.
func (r *storeReader) pastOf(prefix string) *pastReader {
	if r.past == nil || clusterOf(r.store, prefix) != "" {
		return nil
	}
	return r.past
}

// clusterOf names the etcd cluster holding the keys under prefix: "" for
// the main one, else the resource's own (storage.Partitioned).
func clusterOf(store storage.Interface, prefix string) string {
	if p, ok := store.(storage.Partitioned); ok {
		_, name := p.Part(prefix)
		return name
	}
	return ""
}

// waitFor waits until the store of the keys under prefix (the etcd
// cluster they live on: revisions of two clusters are not comparable) has
// reached rev, up to futureRVWait; then it is a 504 "Too large resource
// version".
func (r *storeReader) waitFor(ctx context.Context, prefix string, rev int64) error {
	deadline := time.Now().Add(r.futureRVWait)
	store := storage.PartOf(r.store, prefix)
	for {
		cur, err := store.Revision(ctx)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		if cur >= rev {
			return nil
		}
		if time.Now().After(deadline) {
			return apistatus.TooLarge()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// get reads an object with a quorum read.
func (r *storeReader) get(ctx context.Context, res *registry.Resource, ns, name string) (*unstructured.Unstructured, storage.KeyValue, error) {
	kv, err := r.store.Get(ctx, res.Key(ns, name))
	if err != nil {
		return nil, kv, apistatus.Storage(err, gr(res), name)
	}
	return decodeCurrent(ctx, res, kv)
}

// decodeCurrent decodes a stored value read from etcd for an update.
func decodeCurrent(ctx context.Context, res *registry.Resource, kv storage.KeyValue) (*unstructured.Unstructured, storage.KeyValue, error) {
	objs, err := decodeStored(ctx, res, []storage.KeyValue{kv})
	if err != nil {
		return nil, kv, apierrors.NewInternalError(err)
	}
	return objs[0], kv, nil
}
