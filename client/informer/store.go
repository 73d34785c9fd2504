package informer

import (
	"fmt"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/client"
)

// Key identifies an object in a Store: its namespace ("" for cluster-scoped
// objects) and name.
type Key struct {
	Namespace, Name string
}

// KeyOf returns obj's key.
func KeyOf(obj metav1.Object) Key { return Key{Namespace: obj.GetNamespace(), Name: obj.GetName()} }

// String returns "namespace/name", or "name" for cluster-scoped objects.
func (k Key) String() string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.Namespace + "/" + k.Name
}

// IndexFunc returns the values under which an index files obj. It must be
// a pure function of obj.
//
// By owner UID, to find the objects a controller owns:
//
//	func(p *corev1.Pod) []string {
//		var uids []string
//		for _, ref := range p.OwnerReferences {
//			uids = append(uids, string(ref.UID))
//		}
//		return uids
//	}
//
// By node, to list the pods on one node:
//
//	func(p *corev1.Pod) []string { return []string{p.Spec.NodeName} }
type IndexFunc[T client.Object] func(obj T) []string

// Indexers names index functions.
type Indexers[T client.Object] map[string]IndexFunc[T]

// index maps an index value to the keys of the objects filed under it.
type index map[string]map[Key]struct{}

// Store is a thread-safe set of objects keyed by namespace and name, with
// a built-in namespace index and user-defined indexes.
//
// Objects in a Store are shared with every reader and must not be modified
// (see the package documentation). Reads may run concurrently with each
// other and with writes; each read sees a consistent state.
type Store[T client.Object] struct {
	// mu guards everything below. Never held while calling user code
	// other than index functions.
	mu sync.RWMutex
	// objects is namespace → name → object: a two-level map so that
	// listing one namespace needs no extra index and keys cost nothing.
	objects  map[string]map[string]T
	count    int
	indexers Indexers[T]
	indices  map[string]index
}

// NewStore returns an empty store with the given indexes.
func NewStore[T client.Object](indexers Indexers[T]) *Store[T] {
	s := &Store[T]{objects: map[string]map[string]T{}, indexers: Indexers[T]{}, indices: map[string]index{}}
	if err := s.AddIndexers(indexers); err != nil {
		panic(err) // cannot happen: the store is empty and has no indexes
	}
	return s
}

// AddIndexers adds indexes, filing the objects already stored. Adding an
// index name twice is an error.
func (s *Store[T]) AddIndexers(indexers Indexers[T]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range indexers {
		if _, ok := s.indexers[name]; ok {
			return fmt.Errorf("index %q already exists", name)
		}
	}
	for name, f := range indexers {
		s.indexers[name] = f
		idx := index{}
		s.indices[name] = idx
		for _, byName := range s.objects {
			for _, obj := range byName {
				idx.add(f(obj), KeyOf(obj))
			}
		}
	}
	return nil
}

func (idx index) add(values []string, k Key) {
	for _, v := range values {
		set := idx[v]
		if set == nil {
			set = map[Key]struct{}{}
			idx[v] = set
		}
		set[k] = struct{}{}
	}
}

func (idx index) remove(values []string, k Key) {
	for _, v := range values {
		set := idx[v]
		delete(set, k)
		if len(set) == 0 {
			delete(idx, v)
		}
	}
}

// Get returns the object with the given namespace and name.
func (s *Store[T]) Get(namespace, name string) (T, bool) {
	s.mu.RLock()
	obj, ok := s.objects[namespace][name]
	s.mu.RUnlock()
	return obj, ok
}

// getBytes is Get for a namespace and name given as bytes; it allocates
// nothing.
func (s *Store[T]) getBytes(namespace, name []byte) (T, bool) {
	s.mu.RLock()
	obj, ok := s.objects[string(namespace)][string(name)]
	s.mu.RUnlock()
	return obj, ok
}

// Len returns the number of objects.
func (s *Store[T]) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.count
}

// List returns the objects in namespace ("" for all) whose labels match
// sel (nil for all), in no particular order.
func (s *Store[T]) List(namespace string, sel labels.Selector) []T {
	if sel != nil && sel.Empty() {
		sel = nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []T
	add := func(byName map[string]T) {
		for _, obj := range byName {
			if sel == nil || sel.Matches(labels.Set(obj.GetLabels())) {
				out = append(out, obj)
			}
		}
	}
	if namespace != "" {
		add(s.objects[namespace])
		return out
	}
	out = make([]T, 0, s.count)
	for _, byName := range s.objects {
		add(byName)
	}
	return out
}

// ByIndex returns the objects filed under value in the named index.
func (s *Store[T]) ByIndex(indexName, value string) ([]T, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	idx, ok := s.indices[indexName]
	if !ok {
		return nil, fmt.Errorf("index %q does not exist", indexName)
	}
	set := idx[value]
	out := make([]T, 0, len(set))
	for k := range set {
		out = append(out, s.objects[k.Namespace][k.Name])
	}
	return out, nil
}

// IndexValues returns the values in the named index that have objects.
func (s *Store[T]) IndexValues(indexName string) ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	idx, ok := s.indices[indexName]
	if !ok {
		return nil, fmt.Errorf("index %q does not exist", indexName)
	}
	out := make([]string, 0, len(idx))
	for v := range idx {
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}

// Range calls fn for each object until fn returns false, holding the read
// lock: fn must be quick and must not write to the store.
func (s *Store[T]) Range(fn func(T) bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, byName := range s.objects {
		for _, obj := range byName {
			if !fn(obj) {
				return
			}
		}
	}
}

// Put stores obj, replacing any object with its key, and returns the
// replaced object.
func (s *Store[T]) Put(obj T) (old T, replaced bool) {
	k := KeyOf(obj)
	s.mu.Lock()
	defer s.mu.Unlock()
	byName := s.objects[k.Namespace]
	if byName == nil {
		byName = map[string]T{}
		s.objects[k.Namespace] = byName
	}
	old, replaced = byName[k.Name]
	byName[k.Name] = obj
	if !replaced {
		s.count++
	}
	for name, f := range s.indexers {
		idx := s.indices[name]
		if replaced {
			idx.remove(f(old), k)
		}
		idx.add(f(obj), k)
	}
	return old, replaced
}

// Delete removes the object with key k and returns it.
func (s *Store[T]) Delete(k Key) (old T, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	byName := s.objects[k.Namespace]
	old, ok = byName[k.Name]
	if !ok {
		return old, false
	}
	delete(byName, k.Name)
	if len(byName) == 0 {
		delete(s.objects, k.Namespace)
	}
	s.count--
	for name, f := range s.indexers {
		s.indices[name].remove(f(old), k)
	}
	return old, true
}
