package informer

import (
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/client"
)

// Lister reads an informer's cache. The objects it returns are shared with
// the cache and every other reader: never modify them (copy first). With
// Options.Compact, each call instead decodes new objects, which the caller
// owns and may modify.
//
// A Lister is safe for concurrent use. Its zero value is not usable; get
// one from SharedInformer.Lister.
type Lister[T client.Object] struct {
	store *Store[T]
}

// Get returns the cached object with the given namespace ("" for
// cluster-scoped objects) and name.
func (l Lister[T]) Get(namespace, name string) (T, bool) { return l.store.Get(namespace, name) }

// List returns the cached objects in namespace ("" for all namespaces)
// whose labels match sel (nil or labels.Everything() for all).
func (l Lister[T]) List(namespace string, sel labels.Selector) []T {
	return l.store.List(namespace, sel)
}

// ByIndex returns the cached objects filed under value in the named index.
func (l Lister[T]) ByIndex(indexName, value string) ([]T, error) {
	return l.store.ByIndex(indexName, value)
}

// Len returns the number of cached objects.
func (l Lister[T]) Len() int { return l.store.Len() }
