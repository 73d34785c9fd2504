package rbac

import (
	"hash/maphash"
	"maps"
)

// shardCount is how many shards a copy-on-write map has: a write clones
// one shard (about 1/64 of the map) and the shard array, not the map.
const shardCount = 64

// Key kinds: what a key names.
const (
	kindObject uint8 = iota // a role or binding by namespace and name
	kindUser                // a user name (service accounts included)
	kindGroup               // a group name
)

// key is a map key of every index: an object by (namespace, name), or a
// subject (user or group name) bound in namespace ("" for cluster-wide).
type key struct {
	ns   string
	kind uint8
	name string
}

var seed = maphash.MakeSeed()

func (k key) shard() int {
	h := maphash.String(seed, k.name)
	if k.ns != "" {
		h = h*31 + maphash.String(seed, k.ns)
	}
	return int(h % shardCount)
}

// smap is an immutable sharded map; readers use it without locks, a
// writer changes a copy of it through an smapTx.
type smap[V any] struct {
	shards [shardCount]map[key]V
}

func (m *smap[V]) get(k key) (V, bool) {
	v, ok := m.shards[k.shard()][k]
	return v, ok
}

func (m *smap[V]) len() int {
	n := 0
	for _, s := range m.shards {
		n += len(s)
	}
	return n
}

// each calls f for every entry, in no particular order.
func (m *smap[V]) each(f func(key, V)) {
	for _, s := range m.shards {
		for k, v := range s {
			f(k, v)
		}
	}
}

// smapTx changes m, which must be a copy not yet published to readers:
// the first write to a shard replaces it with a private clone.
type smapTx[V any] struct {
	m   *smap[V]
	own [shardCount]bool
}

func (t *smapTx[V]) shardFor(k key) map[key]V {
	i := k.shard()
	if !t.own[i] {
		c := maps.Clone(t.m.shards[i])
		if c == nil {
			c = map[key]V{}
		}
		t.m.shards[i] = c
		t.own[i] = true
	}
	return t.m.shards[i]
}

func (t *smapTx[V]) set(k key, v V) { t.shardFor(k)[k] = v }

func (t *smapTx[V]) del(k key) {
	if _, ok := t.m.get(k); ok {
		delete(t.shardFor(k), k)
	}
}
