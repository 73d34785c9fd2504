package objects

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// decoder decodes stored values of res once for the cache: metadata for
// filtering, JSON for the wire. Values this server wrote come from hints
// without decoding.
func (c *Caches) decoder(res *registry.Resource, hints *writeHints) watchcache.Decoder {
	decode := decodeForCache(res, c.cfg.Verify)
	return func(kv storage.KeyValue) (*watchcache.Object, error) {
		o, ok := hints.take(kv)
		if !ok {
			return decode(kv)
		}
		c.hintsUsed.Add(1)
		if c.cfg.Verify {
			want, err := decode(kv)
			if err != nil || !bytes.Equal(want.JSON, o.JSON) || !maps.Equal(want.Labels, o.Labels) || !maps.Equal(want.Fields, o.Fields) ||
				want.Namespace != o.Namespace || want.Name != o.Name {
				panic(fmt.Sprintf("write hint for %s differs from decoding it (%v):\nhint   %s %v %v\ndecode %s %v %v", kv.Key, err, o.JSON, o.Labels, o.Fields, want.JSON, want.Labels, want.Fields))
			}
		}
		return o, nil
	}
}

// batchConverting is the store of the watch cache of a resource whose
// objects a conversion webhook converts: it converts each page of the
// cache's (re)list in as few ConversionReviews as the converter's batch
// bounds allow (one for up to 500 objects or 1 MiB of them, see package
// server/conversion), where decoding the page's values one by one would
// make a call per object, and the cache's decoder then takes the
// converted objects. A page whose batch fails is decoded one value at a
// time, each failing (and retried) on its own as before. Safe for
// concurrent use.
type batchConverting struct {
	storage.Interface
	res  *registry.Resource
	mu   sync.Mutex
	done map[keyRev]*watchcache.Object
}

// keyRev is a stored value's key and revision.
type keyRev struct {
	key string
	rev int64
}

func (b *batchConverting) List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListResult, error) {
	lr, err := b.Interface.List(ctx, prefix, opts)
	if err != nil || len(lr.KVs) < 2 {
		return lr, err
	}
	objs, err := decodeStored(ctx, b.res, lr.KVs)
	if err != nil {
		return lr, nil // decoded one by one: each value's own error
	}
	converted := make(map[keyRev]*watchcache.Object, len(objs))
	for i, obj := range objs {
		kv := lr.KVs[i]
		o, err := cacheObject(b.res, kv, obj)
		if err != nil {
			continue
		}
		converted[keyRev{kv.Key, kv.ModRevision}] = o
	}
	b.mu.Lock()
	b.done = converted // the cache decodes a page before it lists the next
	b.mu.Unlock()
	return lr, nil
}

// decoder takes the objects List converted, else decodes with decode.
func (b *batchConverting) decoder(decode watchcache.Decoder) watchcache.Decoder {
	return func(kv storage.KeyValue) (*watchcache.Object, error) {
		k := keyRev{kv.Key, kv.ModRevision}
		b.mu.Lock()
		o, ok := b.done[k]
		delete(b.done, k)
		b.mu.Unlock()
		if ok {
			return o, nil
		}
		return decode(kv)
	}
}

// decodeForCache decodes a stored value of res for the cache: converted
// once for every watcher of res's version. A conversion webhook that
// fails is retried (watchcache.ErrRetry): the cache waits for it rather
// than leave the object out. With verify, every value served as stored
// (asStored) is checked against encoding it, and a difference panics.
func decodeForCache(res *registry.Resource, verify bool) watchcache.Decoder {
	return func(kv storage.KeyValue) (*watchcache.Object, error) {
		obj, err := FromStorage(res, kv)
		var ce *ConversionError
		if errors.As(err, &ce) && res.Versions.Remote() {
			return nil, fmt.Errorf("%w: %w", watchcache.ErrRetry, err)
		}
		if err != nil {
			return nil, err
		}
		if b := asStored(res, kv); b != nil {
			o := cacheEntry(res, kv, obj, b)
			if verify {
				if want, err := cacheObject(res, kv, obj); err != nil || !bytes.Equal(want.JSON, b) {
					panic(fmt.Sprintf("stored %s served as stored differs from encoding it (%v):\nstored  %s\nencoded %s", kv.Key, err, b, want.JSON))
				}
			}
			return o, nil
		}
		return cacheObject(res, kv, obj)
	}
}

// asStored is kv's value with its resourceVersion spliced in, when that
// is what encoding the decoded object gives and re-encoding it can be
// skipped (a third of a cache's start): a built-in resource stored as it
// is served (no StoredAs, one version, a Stored that changes nothing),
// and a value as toStorage encodes it (sorted keys: apiVersion first, res's
// kind, no resourceVersion). nil otherwise.
func asStored(res *registry.Resource, kv storage.KeyValue) []byte {
	if res.Custom || res.StoredAs != nil || res.Versions != nil ||
		!bytes.HasPrefix(kv.Value, []byte(`{"apiVersion":"`+res.APIVersion()+`",`)) {
		return nil
	}
	if at, ok := topLevelValue(kv.Value, "kind"); !ok || !bytes.HasPrefix(kv.Value[at:], []byte(`"`+res.Kind+`"`)) {
		return nil
	}
	return withResourceVersion(kv.Value, kv.ModRevision)
}

// cacheObject is the cache's form of obj, decoded from kv.
func cacheObject(res *registry.Resource, kv storage.KeyValue, obj *unstructured.Unstructured) (*watchcache.Object, error) {
	b, err := json.Marshal(obj.Object)
	if err != nil {
		return nil, err
	}
	return cacheEntry(res, kv, obj, b), nil
}

// cacheEntry is the cache's form of obj, decoded from kv and encoded as b.
func cacheEntry(res *registry.Resource, kv storage.KeyValue, obj *unstructured.Unstructured, b []byte) *watchcache.Object {
	return &watchcache.Object{
		Key: kv.Key, Namespace: obj.GetNamespace(), Name: obj.GetName(),
		Labels: labels.Set(obj.GetLabels()), Fields: fieldSet(res, obj),
		Rev: kv.ModRevision, JSON: b,
	}
}
