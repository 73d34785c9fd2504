package objects

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// get reads one object from the cache once it has reached rev.
func (c *Caches) get(ctx context.Context, res *registry.Resource, ns, name string, rev int64) (*unstructured.Unstructured, error) {
	wc := c.usable(res)
	if wc == nil {
		return nil, errNoCache
	}
	if _, init := wc.Initializing(); init {
		return nil, errNoCache // etcd answers while the cache loads, as Kubernetes
	}
	wctx, cancel := context.WithTimeout(ctx, c.cfg.FutureRVWait)
	err := wc.WaitFor(wctx, rev)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, watchcache.ErrNotReady):
		return nil, errNoCache // its list failed: etcd answers
	case err != nil && rev > 0:
		return nil, apistatus.TooLarge()
	case err != nil:
		return nil, errNoCache
	}
	o, _, ok := wc.Get(res.Key(ns, name))
	if !ok {
		return nil, apierrors.NewNotFound(gr(res), name)
	}
	return Decode(o.JSON)
}
