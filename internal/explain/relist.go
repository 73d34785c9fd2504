package explain

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/client"
)

// Relisted is one difference a relist found between the objects a
// watcher held and the ones the list returned: Added (Obj listed),
// Modified (Old held, Obj listed: their resourceVersions differ; the
// caller drops the ones whose diff is empty) or Deleted (Obj held).
type Relisted struct {
	Type     client.EventType
	Old, Obj *unstructured.Unstructured
}

// RelistChanges is what a watcher that held cache (by KeyOf) missed
// when a relist returns items, in the order of items, then the objects
// gone in the order of their keys; a name whose UID changed is a
// Deleted then an Added. It then makes cache hold items. It is the one
// relist of `objwatch watch` and of objwatch ui's live page; it is not
// safe for concurrent use with another user of cache.
func RelistChanges(cache map[string]*unstructured.Unstructured, items []*unstructured.Unstructured) []Relisted {
	var out []Relisted
	seen := make(map[string]bool, len(items))
	for _, obj := range items {
		k := KeyOf(obj)
		seen[k] = true
		old := cache[k]
		switch {
		case old == nil:
			out = append(out, Relisted{Type: client.Added, Obj: obj})
		case old.GetUID() != obj.GetUID():
			out = append(out, Relisted{Type: client.Deleted, Obj: old}, Relisted{Type: client.Added, Obj: obj})
		case old.GetResourceVersion() != obj.GetResourceVersion():
			out = append(out, Relisted{Type: client.Modified, Old: old, Obj: obj})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(cache)) {
		if !seen[k] {
			out = append(out, Relisted{Type: client.Deleted, Obj: cache[k]})
		}
	}
	clear(cache)
	for _, obj := range items {
		cache[KeyOf(obj)] = obj
	}
	return out
}
