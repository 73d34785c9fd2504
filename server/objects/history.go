package objects

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/history"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// MaxHistory bounds the revisions History walks back through.
const MaxHistory = 1000

// History is the stored states of one object: from the history store
// when the server keeps one (every retained change of the name, deletions
// and earlier objects of the same name included), else those still in
// etcd's history (the current object's).
type History struct {
	// Revisions are the object's states, oldest first; each carries its
	// resourceVersion (the revision that wrote it). A deletion is the
	// object as it was deleted, with the deletion's resourceVersion.
	Revisions []*unstructured.Unstructured
	// Changes, from the history store, say for each revision when it was
	// made, by whom and whether it deleted the object (nil from etcd).
	Changes []Change
	// Oldest is the history store's oldest retained revision (the first
	// revision may be older: the object's state then), and Gaps the
	// revisions it could not record.
	Oldest int64
	Gaps   []history.Gap
	// Compacted, when not 0, is etcd's compaction revision: the state
	// before Revisions[0] is gone. 0 with Complete: Revisions[0] is the
	// object's creation.
	Compacted int64
	// Complete: Revisions start at the object's creation (its current
	// life; an earlier object of the same name is not included).
	Complete bool
}

// History returns every stored state of the object req names: what the
// history store retains, or without one what etcd still has, walking back
// from the current one through each state's mod revision (a read at the
// revision before it), up to MaxHistory states. It is a read of the
// object: Authorize sees req as it is (a get).
func (s *Service) History(ctx context.Context, req *Request) (History, error) {
	if err := s.hooks.authorize(ctx, req); err != nil {
		return History{}, err
	}
	if s.cfg.History != nil && clusterOf(s.store, req.Resource.StoragePrefix) == "" {
		// (A resource on an etcd cluster of its own is not recorded: its
		// history is what its etcd still has.)
		return s.recordedHistory(ctx, req)
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

// Change is when a revision of a history was made and by whom (nil:
// unknown), and whether it deleted the object (InGap: somewhere within a
// gap, not at its revision).
type Change struct {
	Time    time.Time
	Author  *history.Author
	Deleted bool
	InGap   bool
}

// recordedHistory is History from the history store: every retained
// change of the key, each value decoded as a read at its revision would.
func (s *Service) recordedHistory(ctx context.Context, req *Request) (History, error) {
	res := req.Resource
	if err := s.historyCaughtUp(ctx); err != nil {
		return History{}, err
	}
	key := res.Key(req.Namespace, req.Name)
	entries, err := s.cfg.History.KeyHistory(key)
	if err != nil {
		return History{}, pastError(err)
	}
	if len(entries) == 0 {
		return History{}, apierrors.NewNotFound(gr(res), req.Name)
	}
	h := History{Oldest: s.cfg.History.Oldest(), Gaps: s.cfg.History.Gaps(), Complete: true}
	var last *unstructured.Unstructured
	for _, e := range entries {
		c := Change{Time: e.Time, Author: e.Author, Deleted: e.Deleted, InGap: e.InGap}
		var obj *unstructured.Unstructured
		if e.Deleted {
			if last == nil {
				continue // deleted before the retained history starts
			}
			obj = last.DeepCopy()
			obj.SetResourceVersion(strconv.FormatInt(e.Revision, 10))
		} else {
			if obj, err = s.pastObject(ctx, res, e); err != nil {
				return History{}, err
			}
			last = obj
		}
		h.Revisions = append(h.Revisions, obj)
		h.Changes = append(h.Changes, c)
	}
	if len(h.Revisions) > 0 && !h.Changes[0].Deleted {
		first := entries[0]
		h.Complete = first.CreateRevision == first.Revision
	}
	return h, nil
}

// historyCaughtUp waits until the history store has recorded every change
// etcd has made until now, at most FutureRVWait: a read of the history
// sees the writes that ended before it (504 when the store lags further).
func (s *Service) historyCaughtUp(ctx context.Context) error {
	rev, err := s.store.Revision(ctx) // the main etcd cluster's, the one it records
	if err != nil {
		return apistatus.Storage(err, schema.GroupResource{}, "")
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.FutureRVWait)
	defer cancel()
	if err := s.cfg.History.WaitRecorded(wctx, rev); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return apierrors.NewTimeoutError(fmt.Sprintf("the history store has not recorded revision %d yet (it is at %d)", rev, s.cfg.History.Recorded()), 1)
	}
	return nil
}

// pastObject decodes a value of the history store as a read of res at
// its revision would.
func (s *Service) pastObject(ctx context.Context, res *registry.Resource, e history.Entry) (*unstructured.Unstructured, error) {
	kv, err := s.etcd.past.kv(ctx, e)
	if err != nil {
		return nil, apistatus.Storage(err, gr(res), "")
	}
	obj, _, err := decodeCurrent(ctx, res, kv)
	return obj, err
}
