package objects

import (
	"bytes"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// writeHints tells a resource's watch cache what this server is writing,
// so that the cache can build the object from the write's encoding instead
// of decoding the etcd event, applying the strategy's Stored and encoding it
// again (a third of a create's CPU). The etcd event still decides what the
// cache holds and when: a hint is used only for an event carrying exactly
// the bytes this server wrote to that key, and only where decoding them
// would change nothing (built-in types stored as they are served, and
// custom resources written in the cache's version, whose Stored is then a
// no-op on a fresh write). Safe for
// concurrent use.
type writeHints struct {
	mu sync.Mutex
	m  map[string]writeHint // storage key → the write in flight there
}

type writeHint struct {
	value []byte // the bytes written
	obj   *watchcache.Object
}

// maxHints bounds the hints kept: a hint whose event the cache never
// decodes (it relisted meanwhile, or the write's outcome was unknown) would
// otherwise stay. Past the bound all are dropped; they are only a shortcut.
const maxHints = 4096

// add records that value is being written to key for obj (the object as
// the cache would hold it, without a resourceVersion), if res's cache can
// use it.
func (h *writeHints) add(res *registry.Resource, key string, value []byte, obj *unstructured.Unstructured) {
	if h == nil || res.StoredAs != nil || convertsOnWrite(res) || (res.Custom && obj.GetAPIVersion() != res.APIVersion()) {
		return
	}
	o := &watchcache.Object{
		Key: key, Namespace: obj.GetNamespace(), Name: obj.GetName(),
		Labels: labels.Set(obj.GetLabels()), Fields: fieldSet(res, obj),
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.m) >= maxHints {
		clear(h.m)
	}
	h.m[key] = writeHint{value: value, obj: o}
}

// drop forgets the hint for a write of value to key that failed.
func (h *writeHints) drop(key string, value []byte) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur, ok := h.m[key]; ok && bytes.Equal(cur.value, value) {
		delete(h.m, key)
	}
}

// take returns the cache object for kv if this server wrote exactly kv's
// value, and forgets the hint.
func (h *writeHints) take(kv storage.KeyValue) (*watchcache.Object, bool) {
	h.mu.Lock()
	cur, ok := h.m[kv.Key]
	ok = ok && bytes.Equal(cur.value, kv.Value)
	if ok {
		delete(h.m, kv.Key)
	}
	h.mu.Unlock()
	if !ok {
		return nil, false
	}
	b := withResourceVersion(kv.Value, kv.ModRevision)
	if b == nil {
		return nil, false
	}
	h0 := cur.obj
	return &watchcache.Object{
		Key: h0.Key, Namespace: h0.Namespace, Name: h0.Name,
		Labels: h0.Labels, Fields: h0.Fields, Rev: kv.ModRevision, JSON: b,
	}, true
}
