package informer

import (
	"fmt"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

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

// Store is a thread-safe set of objects keyed by namespace and name, with
// a built-in namespace index and user-defined indexes.
//
// Objects in a Store are shared with every reader and must not be modified
// (see the package documentation). In compact mode (Options.Compact) the
// store keeps objects encoded and every read returns new objects the
// caller owns. Reads may run concurrently with each other and with
// writes; each read sees a consistent state.
type Store[T client.Object] struct {
	core storeCore[T]
	// objects is chosen by newStore and never changes: decodedObjects or
	// compactObjects (compact.go).
	objects objects[T]
}

// objects is where a Store keeps its objects, in one of the two forms
// of the store's mode. Each method is one Store operation; the methods
// take the core's lock themselves (except allLocked), so that a compact
// store can encode and decode without holding it.
type objects[T client.Object] interface {
	get(namespace, name string) (T, bool)
	identity(namespace, name string) (identity, bool)
	identityBytes(namespace, name []byte) (identity, bool)
	list(namespace string, sel labels.Selector) []T
	byIndex(indexName, value string) ([]T, error)
	each(fn func(T) bool)
	entries(fn func(k Key, obj T, blob []byte) bool)
	keySet(namespace string) keySet
	put(k Key, obj T, wantOld bool) (old T, replaced bool)
	delete(k Key, wantOld bool) (old T, uid types.UID, ok bool)
	// allLocked yields every key and object; core.mu must be held.
	allLocked(yield func(Key, T) bool)
	// decode decodes a blob that entries passed.
	decode(blob []byte) T
}

// storeCore is what both forms share: the lock, the count and the
// indexes.
type storeCore[T client.Object] struct {
	// mu guards everything below and the objects. Never held while
	// calling user code other than index functions and Range's fn.
	mu       sync.RWMutex
	count    int
	indexers Indexers[T]
	indices  map[string]index
}

// reindexLocked moves k from old's index values (if hadOld) to obj's (if
// hasNew). c.mu must be held.
func (c *storeCore[T]) reindexLocked(k Key, old T, hadOld bool, obj T, hasNew bool) {
	for name, f := range c.indexers {
		idx := c.indices[name]
		if hadOld {
			idx.remove(f(old), k)
		}
		if hasNew {
			idx.add(f(obj), k)
		}
	}
}

// indexedLocked returns the keys filed under value in the named index.
// c.mu must be held.
func (c *storeCore[T]) indexedLocked(indexName, value string) (map[Key]struct{}, error) {
	idx, ok := c.indices[indexName]
	if !ok {
		return nil, fmt.Errorf("index %q does not exist", indexName)
	}
	return idx[value], nil
}

// NewStore returns an empty store with the given indexes.
func NewStore[T client.Object](indexers Indexers[T]) *Store[T] { return newStore(indexers, false) }

// newStore returns an empty store, in compact mode if compact.
func newStore[T client.Object](indexers Indexers[T], compact bool) *Store[T] {
	s := &Store[T]{core: storeCore[T]{indexers: Indexers[T]{}, indices: map[string]index{}}}
	if compact {
		s.objects = newCompactObjects(&s.core)
	} else {
		s.objects = &decodedObjects[T]{tableOf[T, T]{storeCore: &s.core, table: table[T]{}}}
	}
	if err := s.AddIndexers(indexers); err != nil {
		panic(err) // cannot happen: the store is empty and has no indexes
	}
	return s
}

// AddIndexers adds indexes, filing the objects already stored (decoding
// each, in compact mode). Adding an index name twice is an error.
func (s *Store[T]) AddIndexers(indexers Indexers[T]) error {
	c := &s.core
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range indexers {
		if _, ok := c.indexers[name]; ok {
			return fmt.Errorf("index %q already exists", name)
		}
	}
	for name, f := range indexers {
		c.indexers[name] = f
		c.indices[name] = index{}
	}
	for k, obj := range s.objects.allLocked {
		for name, f := range indexers {
			c.indices[name].add(f(obj), k)
		}
	}
	return nil
}

// Get returns the object with the given namespace and name.
func (s *Store[T]) Get(namespace, name string) (T, bool) { return s.objects.get(namespace, name) }

// identity is what a store knows of an object without decoding it.
type identity struct {
	rv  string
	uid types.UID
}

// identity returns the resourceVersion and UID of the object with the
// given namespace and name.
func (s *Store[T]) identity(namespace, name string) (identity, bool) {
	return s.objects.identity(namespace, name)
}

// identityBytes is identity for a namespace and name given as bytes; it
// allocates nothing.
func (s *Store[T]) identityBytes(namespace, name []byte) (identity, bool) {
	return s.objects.identityBytes(namespace, name)
}

// Len returns the number of objects.
func (s *Store[T]) Len() int {
	s.core.mu.RLock()
	defer s.core.mu.RUnlock()
	return s.core.count
}

// List returns the objects in namespace ("" for all) whose labels match
// sel (nil for all), in no particular order.
func (s *Store[T]) List(namespace string, sel labels.Selector) []T {
	if sel != nil && sel.Empty() {
		sel = nil
	}
	return s.objects.list(namespace, sel)
}

// ByIndex returns the objects filed under value in the named index.
func (s *Store[T]) ByIndex(indexName, value string) ([]T, error) {
	return s.objects.byIndex(indexName, value)
}

// IndexValues returns the values in the named index that have objects.
func (s *Store[T]) IndexValues(indexName string) ([]string, error) {
	s.core.mu.RLock()
	defer s.core.mu.RUnlock()
	idx, ok := s.core.indices[indexName]
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
// lock: fn must be quick and must not write to the store. In compact mode
// fn gets new objects decoded from a snapshot, without the lock held.
func (s *Store[T]) Range(fn func(T) bool) { s.objects.each(fn) }

// rangeEntries calls fn for each object until fn returns false, holding
// the read lock: fn must be quick and must not write to the store. A
// decoded store passes the object, a compact one its blob (decode it with
// decode, after releasing the lock).
func (s *Store[T]) rangeEntries(fn func(k Key, obj T, blob []byte) bool) { s.objects.entries(fn) }

// decode decodes a blob rangeEntries passed. It panics if that fails: the
// blob was encoded by the same codec, so T does not survive a round trip
// through its encoding, which is a bug.
func (s *Store[T]) decode(blob []byte) T { return s.objects.decode(blob) }

// keySet returns the store's keys in namespace ("" for all) for a relist
// to strike out, built from the store's own strings: it decodes nothing
// and allocates only slices.
func (s *Store[T]) keySet(namespace string) keySet { return s.objects.keySet(namespace) }

// Put stores obj, replacing any object with its key, and returns the
// replaced object. It panics if a compact store cannot encode obj.
func (s *Store[T]) Put(obj T) (old T, replaced bool) { return s.put(obj, true) }

// put is Put; in compact mode it decodes the replaced object only if
// wantOld or an index needs it, and returns a zero old otherwise.
func (s *Store[T]) put(obj T, wantOld bool) (old T, replaced bool) {
	return s.objects.put(KeyOf(obj), obj, wantOld)
}

// Delete removes the object with key k and returns it.
func (s *Store[T]) Delete(k Key) (old T, ok bool) {
	old, _, ok = s.delete(k, true)
	return old, ok
}

// delete is Delete that also returns the removed object's UID; in compact
// mode it decodes the removed object only if wantOld or an index needs it,
// and returns a zero old otherwise.
func (s *Store[T]) delete(k Key, wantOld bool) (old T, uid types.UID, ok bool) {
	return s.objects.delete(k, wantOld)
}

// table is namespace → name → object: a two-level map so that listing one
// namespace needs no extra index and keys cost nothing.
type table[E any] map[string]map[string]E

func (t table[E]) put(k Key, e E) (old E, replaced bool) {
	byName := t[k.Namespace]
	if byName == nil {
		byName = map[string]E{}
		t[k.Namespace] = byName
	}
	old, replaced = byName[k.Name]
	byName[k.Name] = e
	return old, replaced
}

func (t table[E]) delete(k Key) (old E, ok bool) {
	byName := t[k.Namespace]
	old, ok = byName[k.Name]
	if ok {
		delete(byName, k.Name)
		if len(byName) == 0 {
			delete(t, k.Namespace)
		}
	}
	return old, ok
}

// all yields every key (the table's own strings) and object.
func (t table[E]) all(yield func(Key, E) bool) {
	for ns, byName := range t {
		for name, e := range byName {
			if !yield(Key{Namespace: ns, Name: name}, e) {
				return
			}
		}
	}
}

// filter returns what keep makes of the entries of namespace ("" for
// all) that it accepts; size is how many entries the table has.
func filter[E, R any](t table[E], namespace string, size int, keep func(E) (R, bool)) []R {
	var out []R
	add := func(byName map[string]E) {
		for _, e := range byName {
			if r, ok := keep(e); ok {
				out = append(out, r)
			}
		}
	}
	if namespace != "" {
		add(t[namespace])
		return out
	}
	out = make([]R, 0, size)
	for _, byName := range t {
		add(byName)
	}
	return out
}

// pick returns what get makes of the entries of the keys in set, which
// the table has.
func pick[E, R any](t table[E], set map[Key]struct{}, get func(E) R) []R {
	out := make([]R, 0, len(set))
	for k := range set {
		out = append(out, get(t[k.Namespace][k.Name]))
	}
	return out
}

// keySet returns the table's keys in namespace ("" for all) for a relist
// to strike out.
func (t table[E]) keySet(namespace string) keySet {
	if namespace != "" {
		out := keySet{}
		if byName, ok := t[namespace]; ok {
			out[namespace] = newNameSet(byName)
		}
		return out
	}
	out := make(keySet, len(t))
	for ns, byName := range t {
		out[ns] = newNameSet(byName)
	}
	return out
}

func newNameSet[E any](byName map[string]E) *nameSet {
	ns := &nameSet{names: make([]string, 0, len(byName)), struck: make([]bool, len(byName))}
	for name := range byName {
		ns.names = append(ns.names, name)
	}
	slices.Sort(ns.names)
	return ns
}

// tableOf is what both forms of storage do alike: look an entry up, list
// the keys.
type tableOf[T client.Object, E any] struct {
	*storeCore[T]
	table table[E]
}

func (t *tableOf[T, E]) lookup(namespace, name string) (E, bool) {
	t.mu.RLock()
	e, ok := t.table[namespace][name]
	t.mu.RUnlock()
	return e, ok
}

// lookupBytes is lookup for a namespace and name given as bytes; it
// allocates nothing.
func (t *tableOf[T, E]) lookupBytes(namespace, name []byte) (E, bool) {
	t.mu.RLock()
	e, ok := t.table[string(namespace)][string(name)]
	t.mu.RUnlock()
	return e, ok
}

func (t *tableOf[T, E]) keySet(namespace string) keySet {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.table.keySet(namespace)
}

// decodedObjects keeps the objects themselves, shared with every reader.
type decodedObjects[T client.Object] struct {
	tableOf[T, T]
}

func (d *decodedObjects[T]) get(namespace, name string) (T, bool) { return d.lookup(namespace, name) }

func identityOf[T client.Object](obj T, ok bool) (identity, bool) {
	if !ok {
		return identity{}, false
	}
	return identity{rv: obj.GetResourceVersion(), uid: obj.GetUID()}, true
}

func (d *decodedObjects[T]) identity(namespace, name string) (identity, bool) {
	return identityOf(d.lookup(namespace, name))
}

func (d *decodedObjects[T]) identityBytes(namespace, name []byte) (identity, bool) {
	return identityOf(d.lookupBytes(namespace, name))
}

func (d *decodedObjects[T]) list(namespace string, sel labels.Selector) []T {
	keep := func(obj T) (T, bool) { return obj, true }
	if sel != nil {
		keep = func(obj T) (T, bool) { return obj, sel.Matches(labels.Set(obj.GetLabels())) }
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	return filter(d.table, namespace, d.count, keep)
}

func (d *decodedObjects[T]) byIndex(indexName, value string) ([]T, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	set, err := d.indexedLocked(indexName, value)
	if err != nil {
		return nil, err
	}
	return pick(d.table, set, func(obj T) T { return obj }), nil
}

func (d *decodedObjects[T]) each(fn func(T) bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, obj := range d.table.all {
		if !fn(obj) {
			return
		}
	}
}

func (d *decodedObjects[T]) entries(fn func(k Key, obj T, blob []byte) bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for k, obj := range d.table.all {
		if !fn(k, obj, nil) {
			return
		}
	}
}

func (d *decodedObjects[T]) put(k Key, obj T, _ bool) (old T, replaced bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	old, replaced = d.table.put(k, obj)
	if !replaced {
		d.count++
	}
	d.reindexLocked(k, old, replaced, obj, true)
	return old, replaced
}

func (d *decodedObjects[T]) delete(k Key, _ bool) (old T, uid types.UID, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok = d.table.delete(k); !ok {
		return old, "", false
	}
	d.count--
	var zero T
	d.reindexLocked(k, old, true, zero, false)
	return old, old.GetUID(), true
}

func (d *decodedObjects[T]) allLocked(yield func(Key, T) bool) { d.table.all(yield) }

func (d *decodedObjects[T]) decode([]byte) T {
	panic("informer: a decoded store has no blobs to decode")
}
