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

// Store is a thread-safe set of objects keyed by namespace and name, with
// a built-in namespace index and user-defined indexes.
//
// Objects in a Store are shared with every reader and must not be modified
// (see the package documentation). In compact mode (Options.Compact) the
// store keeps objects encoded and every read returns new objects the
// caller owns. Reads may run concurrently with each other and with
// writes; each read sees a consistent state.
type Store[T client.Object] struct {
	// mu guards everything below. Never held while calling user code
	// other than index functions.
	mu sync.RWMutex
	// objects holds the objects in decoded mode, compact in compact mode
	// (codec set); the other one is nil.
	objects  table[T]
	compact  table[compactObject]
	codec    *compactCodec[T]
	count    int
	indexers Indexers[T]
	indices  map[string]index
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

// NewStore returns an empty store with the given indexes.
func NewStore[T client.Object](indexers Indexers[T]) *Store[T] { return newStore(indexers, false) }

// newStore returns an empty store, in compact mode if compact.
func newStore[T client.Object](indexers Indexers[T], compact bool) *Store[T] {
	s := &Store[T]{indexers: Indexers[T]{}, indices: map[string]index{}}
	if compact {
		s.codec, s.compact = newCompactCodec[T](), table[compactObject]{}
	} else {
		s.objects = table[T]{}
	}
	if err := s.AddIndexers(indexers); err != nil {
		panic(err) // cannot happen: the store is empty and has no indexes
	}
	return s
}

// AddIndexers adds indexes, filing the objects already stored (decoding
// each, in compact mode). Adding an index name twice is an error.
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
		s.indices[name] = index{}
	}
	file := func(k Key, obj T) bool {
		for name, f := range indexers {
			s.indices[name].add(f(obj), k)
		}
		return true
	}
	if s.codec == nil {
		s.objects.all(file)
		return nil
	}
	for k, c := range s.compact.all {
		file(k, s.decode(c.blob))
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

// decode decodes a blob of this store. It panics if that fails: the blob
// was encoded by the same codec, so T does not survive a round trip
// through its encoding, which is a bug.
func (s *Store[T]) decode(blob []byte) T {
	obj, err := s.codec.decode(blob)
	if err != nil {
		panic(fmt.Sprintf("informer: compact cache: decode %T: %v", obj, err))
	}
	return obj
}

// decodeAll decodes blobs, collected under the lock, without holding it.
func (s *Store[T]) decodeAll(blobs [][]byte) []T {
	if blobs == nil {
		return nil
	}
	out := make([]T, len(blobs))
	for i, b := range blobs {
		out[i] = s.decode(b)
	}
	return out
}

// Get returns the object with the given namespace and name.
func (s *Store[T]) Get(namespace, name string) (T, bool) {
	s.mu.RLock()
	if s.codec == nil {
		obj, ok := s.objects[namespace][name]
		s.mu.RUnlock()
		return obj, ok
	}
	c, ok := s.compact[namespace][name]
	s.mu.RUnlock()
	if !ok {
		var zero T
		return zero, false
	}
	return s.decode(c.blob), true
}

// identity is what a store knows of an object without decoding it.
type identity struct {
	rv  string
	uid types.UID
}

// identity returns the resourceVersion and UID of the object with the
// given namespace and name.
func (s *Store[T]) identity(namespace, name string) (identity, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.codec == nil {
		obj, ok := s.objects[namespace][name]
		if !ok {
			return identity{}, false
		}
		return identity{rv: obj.GetResourceVersion(), uid: obj.GetUID()}, true
	}
	c, ok := s.compact[namespace][name]
	return identity{rv: c.rv(), uid: c.uid()}, ok
}

// identityBytes is identity for a namespace and name given as bytes; it
// allocates nothing.
func (s *Store[T]) identityBytes(namespace, name []byte) (identity, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.codec == nil {
		obj, ok := s.objects[string(namespace)][string(name)]
		if !ok {
			return identity{}, false
		}
		return identity{rv: obj.GetResourceVersion(), uid: obj.GetUID()}, true
	}
	c, ok := s.compact[string(namespace)][string(name)]
	return identity{rv: c.rv(), uid: c.uid()}, ok
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
	if s.codec != nil {
		return s.decodeAll(s.listCompact(namespace, sel))
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

// listCompact returns the blobs of the objects List returns.
func (s *Store[T]) listCompact(namespace string, sel labels.Selector) [][]byte {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out [][]byte
	var ls compactLabels // one variable, so that only it escapes to the heap
	add := func(byName map[string]compactObject) {
		for _, c := range byName {
			ls = c.labels()
			if sel == nil || sel.Matches(&ls) {
				out = append(out, c.blob)
			}
		}
	}
	if namespace != "" {
		add(s.compact[namespace])
		return out
	}
	out = make([][]byte, 0, s.count)
	for _, byName := range s.compact {
		add(byName)
	}
	return out
}

// ByIndex returns the objects filed under value in the named index.
func (s *Store[T]) ByIndex(indexName, value string) ([]T, error) {
	s.mu.RLock()
	idx, ok := s.indices[indexName]
	if !ok {
		s.mu.RUnlock()
		return nil, fmt.Errorf("index %q does not exist", indexName)
	}
	set := idx[value]
	if s.codec == nil {
		out := make([]T, 0, len(set))
		for k := range set {
			out = append(out, s.objects[k.Namespace][k.Name])
		}
		s.mu.RUnlock()
		return out, nil
	}
	blobs := make([][]byte, 0, len(set))
	for k := range set {
		blobs = append(blobs, s.compact[k.Namespace][k.Name].blob)
	}
	s.mu.RUnlock()
	return s.decodeAll(blobs), nil
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
// lock: fn must be quick and must not write to the store. In compact mode
// fn gets new objects decoded from a snapshot, without the lock held.
func (s *Store[T]) Range(fn func(T) bool) {
	s.mu.RLock()
	if s.codec == nil {
		defer s.mu.RUnlock()
		for _, byName := range s.objects {
			for _, obj := range byName {
				if !fn(obj) {
					return
				}
			}
		}
		return
	}
	blobs := make([][]byte, 0, s.count)
	for _, c := range s.compact.all {
		blobs = append(blobs, c.blob)
	}
	s.mu.RUnlock()
	for _, b := range blobs {
		if !fn(s.decode(b)) {
			return
		}
	}
}

// rangeEntries calls fn for each object until fn returns false, holding
// the read lock: fn must be quick and must not write to the store. A
// decoded store passes the object, a compact one its blob (decode it with
// decode, after releasing the lock).
func (s *Store[T]) rangeEntries(fn func(k Key, obj T, blob []byte) bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var zero T
	if s.codec == nil {
		for k, obj := range s.objects.all {
			if !fn(k, obj, nil) {
				return
			}
		}
		return
	}
	for k, c := range s.compact.all {
		if !fn(k, zero, c.blob) {
			return
		}
	}
}

// keySet returns the store's keys for a relist to strike out, built from
// the store's own strings: it decodes nothing and allocates only slices.
func (s *Store[T]) keySet() keySet {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.codec == nil {
		return keySetOf(s.objects)
	}
	return keySetOf(s.compact)
}

func keySetOf[E any](t table[E]) keySet {
	out := make(keySet, len(t))
	for namespace, byName := range t {
		ns := &nameSet{names: make([]string, 0, len(byName)), struck: make([]bool, len(byName))}
		for name := range byName {
			ns.names = append(ns.names, name)
		}
		slices.Sort(ns.names)
		out[namespace] = ns
	}
	return out
}

// Put stores obj, replacing any object with its key, and returns the
// replaced object. It panics if a compact store cannot encode obj.
func (s *Store[T]) Put(obj T) (old T, replaced bool) { return s.put(obj, true) }

// put is Put; in compact mode it decodes the replaced object only if
// wantOld or an index needs it, and returns a zero old otherwise.
func (s *Store[T]) put(obj T, wantOld bool) (old T, replaced bool) {
	k := KeyOf(obj)
	if s.codec != nil {
		return s.putCompact(k, obj, wantOld)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, replaced = s.objects.put(k, obj)
	if !replaced {
		s.count++
	}
	s.reindexLocked(k, old, replaced, obj, true)
	return old, replaced
}

func (s *Store[T]) putCompact(k Key, obj T, wantOld bool) (old T, replaced bool) {
	blob, err := s.codec.encode(obj) // before locking: it takes a while
	if err != nil {
		panic(fmt.Sprintf("informer: compact cache: encode %s: %v", k, err))
	}
	c := newCompactObject(blob, obj)
	s.mu.Lock()
	prev, replaced := s.compact.put(k, c)
	if !replaced {
		s.count++
	}
	// Indexes need the replaced object's values: decoding it here is
	// cheaper than keeping every object's values.
	decoded := replaced && len(s.indexers) > 0
	if decoded {
		old = s.decode(prev.blob)
	}
	s.reindexLocked(k, old, replaced, obj, true)
	s.mu.Unlock()
	if replaced && wantOld && !decoded {
		old = s.decode(prev.blob) // blobs never change: no lock needed
	}
	return old, replaced
}

// reindexLocked moves k from old's index values (if hadOld) to obj's (if
// hasNew). s.mu must be held.
func (s *Store[T]) reindexLocked(k Key, old T, hadOld bool, obj T, hasNew bool) {
	for name, f := range s.indexers {
		idx := s.indices[name]
		if hadOld {
			idx.remove(f(old), k)
		}
		if hasNew {
			idx.add(f(obj), k)
		}
	}
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
	var zero T
	s.mu.Lock()
	if s.codec == nil {
		defer s.mu.Unlock()
		if old, ok = s.objects.delete(k); !ok {
			return old, "", false
		}
		s.count--
		s.reindexLocked(k, old, true, zero, false)
		return old, old.GetUID(), true
	}
	prev, ok := s.compact.delete(k)
	if !ok {
		s.mu.Unlock()
		return zero, "", false
	}
	s.count--
	decoded := len(s.indexers) > 0
	if decoded {
		old = s.decode(prev.blob)
		s.reindexLocked(k, old, true, zero, false)
	}
	s.mu.Unlock()
	if wantOld && !decoded {
		old = s.decode(prev.blob)
	}
	return old, prev.uid(), true
}
