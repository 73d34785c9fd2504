package informer

import (
	"cmp"
	"slices"
)

// keySet is the set of keys a relist strikes out as it lists them: per
// namespace, the store's names sorted, with a flag each. It holds the
// store's own strings, so it costs 17 bytes per key and no map slots.
// One goroutine uses it.
type keySet map[string]*nameSet

type nameSet struct {
	names  []string
	struck []bool
}

// strike marks the key as listed; keys it does not have are ignored.
func (s keySet) strike(namespace, name []byte) {
	ns := s[string(namespace)]
	if ns == nil {
		return
	}
	if i, ok := slices.BinarySearchFunc(ns.names, name, compareStringBytes); ok {
		ns.struck[i] = true
	}
}

// unstruck calls fn with each key not struck out, until fn returns false.
func (s keySet) unstruck(fn func(Key) bool) {
	for namespace, ns := range s {
		for i, name := range ns.names {
			if !ns.struck[i] && !fn(Key{Namespace: namespace, Name: name}) {
				return
			}
		}
	}
}

// compareStringBytes compares like strings.Compare(a, string(b)), without
// converting b.
func compareStringBytes(a string, b []byte) int {
	for i := range min(len(a), len(b)) {
		if c := cmp.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}
