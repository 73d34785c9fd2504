package objects

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/history"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// pastReader answers reads at revisions etcd has compacted from the
// history store (Config.History): lists and gets at an exact revision,
// and the events of a watch from such a revision (pastwatch.go). Its
// methods are safe for concurrent use.
type pastReader struct {
	hs     *history.Store
	atRest storage.RestReader // nil: values are kept as written
	wait   time.Duration      // for the store to record a revision (FutureRVWait)
}

// kv is e as the store would have returned it, its value transformed
// back from its form at rest.
func (p *pastReader) kv(ctx context.Context, e history.Entry) (storage.KeyValue, error) {
	kv := storage.KeyValue{Key: e.Key, Value: e.Value, CreateRevision: e.CreateRevision, ModRevision: e.Revision}
	if p.atRest != nil && !e.Deleted {
		v, err := p.atRest.FromRest(ctx, e.Key, e.Revision, e.Value)
		if err != nil {
			return storage.KeyValue{}, err
		}
		kv.Value = v
	}
	return kv, nil
}

// recorded waits until the store has recorded rev (at most wait): a store
// that was down records what etcd compacted meanwhile (a gap) only once
// it has caught up.
func (p *pastReader) recorded(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithTimeout(ctx, p.wait)
	defer cancel()
	err := p.hs.WaitRecorded(wctx, rev)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return apierrors.NewTimeoutError(fmt.Sprintf("the history store has not recorded revision %d yet (it is at %d)", rev, p.hs.Recorded()), 1)
	}
	return err
}

// list is storage's List at o.Revision, from the history store.
func (p *pastReader) list(ctx context.Context, prefix string, o storage.ListOptions) (storage.ListResult, error) {
	if err := p.recorded(ctx, o.Revision); err != nil {
		return storage.ListResult{}, err
	}
	entries, remaining, err := p.hs.List(prefix, o.StartKey, o.Revision, int(o.Limit))
	if err != nil {
		return storage.ListResult{}, err
	}
	lr := storage.ListResult{Revision: o.Revision, More: remaining > 0, Remaining: remaining, KVs: make([]storage.KeyValue, 0, len(entries))}
	for _, e := range entries {
		kv, err := p.kv(ctx, e)
		if err != nil {
			return storage.ListResult{}, err
		}
		lr.KVs = append(lr.KVs, kv)
	}
	return lr, nil
}

// pastError is the Status of a history store error: a revision it no
// longer retains is 410 Expired, as one etcd compacted; one in a gap 410
// too, saying so; a damaged or closed store 500; a Status as it is.
func pastError(err error) error {
	var ge *history.GapError
	var te *storage.TransformError
	var st apierrors.APIStatus
	switch {
	case errors.As(err, &st):
		return err // already a Status (a store that has not caught up: 504)
	case errors.As(err, &ge):
		return apierrors.NewResourceExpired(ge.Error())
	case errors.Is(err, history.ErrNotRetained):
		return apierrors.NewResourceExpired("too old resource version: " + err.Error())
	case errors.As(err, &te):
		return apierrors.NewInternalError(te)
	}
	return apierrors.NewInternalError(err)
}

// GetAt reads the object req names as it was at revision rev (any
// revision: from etcd while it still has rev, else from the history
// store). It is a read of the object now: Authorize sees req as it is
// (a get). 404 when the object did not exist then.
func (s *Service) GetAt(ctx context.Context, req *Request, rev int64) (*unstructured.Unstructured, error) {
	if err := s.hooks.authorize(ctx, req); err != nil {
		return nil, err
	}
	res := req.Resource
	if err := s.etcd.waitFor(ctx, res.StoragePrefix, rev); err != nil {
		return nil, err
	}
	key := res.Key(req.Namespace, req.Name)
	lr, err := s.etcd.store.List(ctx, key, storage.ListOptions{Revision: rev, StartKey: key, Limit: 1})
	var ce *storage.CompactedError
	if past := s.etcd.pastOf(res.StoragePrefix); errors.As(err, &ce) && past != nil {
		var e history.Entry
		if err = past.recorded(ctx, rev); err == nil {
			e, err = past.hs.Get(key, rev)
		}
		if err == nil {
			var kv storage.KeyValue
			if kv, err = past.kv(ctx, e); err == nil {
				lr = storage.ListResult{KVs: []storage.KeyValue{kv}, Revision: rev}
			}
		}
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return nil, pastError(err)
		}
		err = nil
	}
	if err != nil {
		return nil, apistatus.Storage(err, gr(res), req.Name)
	}
	if len(lr.KVs) == 0 || lr.KVs[0].Key != key {
		return nil, apierrors.NewNotFound(gr(res), req.Name)
	}
	obj, _, err := decodeCurrent(ctx, res, lr.KVs[0])
	return obj, err
}

// RevisionAt is the revision of the state at t of res's objects (nil:
// every resource on the main etcd cluster): the last change recorded at
// or before it. It needs the history store (400 without one, and for a
// resource on an etcd cluster of its own, which it does not record); t in
// the future is 400, before the history store's oldest revision 410.
func (s *Service) RevisionAt(ctx context.Context, res *registry.Resource, t time.Time) (int64, error) {
	if s.etcd.past == nil {
		return 0, apierrors.NewBadRequest("asOf: this server keeps no history store (objwatch serve --history)")
	}
	if err := s.notRecorded("asOf", res); err != nil {
		return 0, err
	}
	if t.After(time.Now()) {
		return 0, apierrors.NewBadRequest(fmt.Sprintf("asOf: %s is in the future", t.UTC().Format(time.RFC3339Nano)))
	}
	if err := s.historyCaughtUp(ctx); err != nil {
		return 0, err
	}
	rev, err := s.etcd.past.hs.RevisionAt(t)
	if err != nil {
		return 0, pastError(err)
	}
	return rev, nil
}
