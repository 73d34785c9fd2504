package objects

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/storage"
)

// MaxHistory bounds the revisions History walks back through.
const MaxHistory = 1000

// History is the stored states of one object still in etcd's history.
type History struct {
	// Revisions are the object's states, oldest first; each carries its
	// resourceVersion (the revision that wrote it).
	Revisions []*unstructured.Unstructured
	// Compacted, when not 0, is etcd's compaction revision: the state
	// before Revisions[0] is gone. 0 with Complete: Revisions[0] is the
	// object's creation.
	Compacted int64
	// Complete: Revisions start at the object's creation (its current
	// life; an earlier object of the same name is not included).
	Complete bool
}

// History returns every stored state of the object req names that etcd
// still has, walking back from the current one through each state's mod
// revision (a read at the revision before it), up to MaxHistory states.
// It is a read of the object: Authorize sees req as it is (a get).
func (s *Service) History(ctx context.Context, req *Request) (History, error) {
	if err := s.hooks.authorize(ctx, req); err != nil {
		return History{}, err
	}
	res := req.Resource
	key := res.Key(req.Namespace, req.Name)
	kv, err := s.store.Get(ctx, key)
	if err != nil {
		return History{}, apistatus.Storage(err, gr(res), req.Name)
	}
	var h History
	for {
		obj, _, err := decodeCurrent(ctx, res, kv)
		if err != nil {
			return History{}, err
		}
		h.Revisions = append(h.Revisions, obj)
		if kv.ModRevision == kv.CreateRevision {
			h.Complete = true
			break
		}
		if len(h.Revisions) == MaxHistory {
			break
		}
		l, err := s.store.List(ctx, key, storage.ListOptions{Revision: kv.ModRevision - 1, StartKey: key, Limit: 1})
		var ce *storage.CompactedError
		if errors.As(err, &ce) {
			h.Compacted = ce.Compacted
			break
		}
		if errors.Is(err, storage.ErrCompacted) {
			h.Compacted = -1
			break
		}
		if err != nil {
			return History{}, apistatus.Storage(err, gr(res), req.Name)
		}
		if len(l.KVs) == 0 || l.KVs[0].Key != key {
			break // not there before: a create we did not see as one
		}
		kv = l.KVs[0]
	}
	for i, j := 0, len(h.Revisions)-1; i < j; i, j = i+1, j-1 {
		h.Revisions[i], h.Revisions[j] = h.Revisions[j], h.Revisions[i]
	}
	return h, nil
}
