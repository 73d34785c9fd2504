package change

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// Op is the kind of a change, named as in RFC 6902.
type Op string

const (
	OpAdd     Op = "add"
	OpRemove  Op = "remove"
	OpReplace Op = "replace"
	OpMove    Op = "move"
)

// Change is one field-level change between two objects.
//
// Old and New are JSON values (nil, bool, int64, float64, string, []any,
// map[string]any): Old is unset for OpAdd, New for OpRemove. For OpMove (a
// list item keyed by merge key that changed position) Path names the item,
// and Old and New are its old and new index (int). Values may share memory
// with the objects compared: never modify them.
type Change struct {
	Path     Path
	Op       Op
	Old, New any
}

// Operation is one RFC 6902 JSON Patch operation.
type Operation struct {
	Op    Op
	Path  string // JSON pointer (RFC 6901)
	From  string // for OpMove
	Value any    // for OpAdd and OpReplace; shared with the new object
}

// MarshalJSON encodes the operation as RFC 6902 does, with "value" for
// add and replace even when it is null.
func (o Operation) MarshalJSON() ([]byte, error) {
	type op struct {
		Op    Op     `json:"op"`
		From  string `json:"from,omitempty"`
		Path  string `json:"path"`
		Value *any   `json:"value,omitempty"`
	}
	out := op{Op: o.Op, Path: o.Path, From: o.From}
	if o.Op == OpAdd || o.Op == OpReplace {
		out.Value = &o.Value
	}
	return json.Marshal(out)
}

// DefaultMergeKeys name list items in paths: a list whose items all have a
// unique string "name" is keyed by name (containers, env, volumes, ports),
// else by "type" (conditions). Its capacity is its length, so an append
// to it makes a new slice instead of writing into the package's.
var DefaultMergeKeys = []string{"name", "type"}[:2:2]

// Noise returns the fields that every write changes without the object
// changing: metadata.resourceVersion and metadata.managedFields (the
// record of who wrote which field, with a time stamp per writer). Diffs
// leave them out unless Differ.KeepNoise is set. It returns a new slice
// each time, which the caller may change.
func Noise() []string {
	return []string{"metadata.managedFields", "metadata.resourceVersion"}
}

// Differ computes diffs. Its zero value uses DefaultMergeKeys and leaves
// the Noise fields out: what a user changed, not what the server recorded
// about the write. A Differ is a value, safe for concurrent use.
type Differ struct {
	// MergeKeys, in order of preference: a list is keyed by the first one
	// that every item of both the old and the new list has, as a string
	// unique within its list. Keyed lists are compared item by item by
	// key: paths name items [key=value], and the patch moves items that
	// changed position instead of rewriting them. Other lists are compared
	// by position, after skipping their common head and tail. Keys must be
	// plain names (letters, digits, _ - / $ @). Empty: DefaultMergeKeys.
	MergeKeys []string
	// Exclude names fields (patterns, see Pattern) whose changes the diff
	// leaves out, besides the Noise fields: "status" for a diff of what
	// clients asked for, "metadata.labels" to tell whether anything else
	// changed. A field is left out with everything below it; a change
	// above it (a whole object added) is kept as it is. Changes, Paths and
	// Patch all leave them out, so the patch turns old into new except for
	// the excluded fields. A malformed pattern is the Diff's Err.
	Exclude []string
	// KeepNoise keeps the Noise fields: every change, and a Patch that
	// turns old into new exactly. Diffs before this field existed kept
	// them.
	KeepNoise bool
}

// exact is the Differ of every change: what predicates on named fields
// and the drift reports of StateSyncer compare.
var exact = Differ{KeepNoise: true}

// Between returns the diff from old to new with the default Differ: every
// change but those to the Noise fields. For a ConfigMap patched by
// kubectl, Between(old, new).Changes() is the changed data keys alone.
func Between(old, new any) *Diff { return Differ{}.Between(old, new) }

// Between returns the diff from old to new. It only records its arguments:
// the work happens when a result is first asked for.
//
// Objects may be maps as decoded from JSON, *unstructured.Unstructured,
// typed objects (pointers to k8s.io/api structs or your own), or any value
// encoding/json can encode; old and new are compared as the JSON they
// encode to (runtime.DefaultUnstructuredConverter's conversion, which
// matches encoding/json for Kubernetes types), but typed objects are read
// in place, never converted as a whole. Pass json.RawMessage for objects
// held as JSON text. A nil old (or new) is JSON null.
//
// old and new must not be modified while the Diff is in use.
func (d Differ) Between(old, new any) *Diff {
	keys := d.MergeKeys
	if len(keys) == 0 {
		keys = DefaultMergeKeys
	}
	diff := &Diff{old: old, new: new, keys: keys}
	if !d.KeepNoise {
		diff.exclude = noisePatterns
	}
	if len(d.Exclude) > 0 {
		ps, err := cachedPatterns(d.Exclude)
		if err != nil {
			diff.err = fmt.Errorf("diff: exclude: %w", err)
			diff.once.Do(func() {})
			return diff
		}
		diff.exclude = append(ps, diff.exclude...)
	}
	return diff
}

// noisePatterns are the parsed Noise fields.
var noisePatterns = func() []Pattern {
	var ps []Pattern
	for _, s := range Noise() {
		ps = append(ps, MustPattern(s))
	}
	return ps
}()

// patternCache holds parsed patterns by their text, so that a Differ with
// Exclude parses each pattern once per process, not once per diff.
var patternCache sync.Map // string -> Pattern

// cachedPatterns parses patterns through patternCache, into a new slice.
func cachedPatterns(patterns []string) ([]Pattern, error) {
	out := make([]Pattern, 0, len(patterns)+len(noisePatterns))
	for _, s := range patterns {
		if p, ok := patternCache.Load(s); ok {
			out = append(out, p.(Pattern))
			continue
		}
		p, err := ParsePattern(s)
		if err != nil {
			return nil, err
		}
		patternCache.Store(s, p)
		out = append(out, p)
	}
	return out, nil
}

// Diff is the difference between two objects, computed on first use and
// remembered. A Diff is safe for concurrent use.
type Diff struct {
	old, new any
	keys     []string
	exclude  []Pattern // fields left out, with what is below them

	once    sync.Once
	changes []Change
	patch   []Operation
	err     error

	pathsOnce sync.Once
	paths     []string
}

func (d *Diff) compute() {
	d.once.Do(func() {
		w := walker{keys: d.keys, exclude: d.exclude}
		w.path, w.arena = w.pathBuf[:0], w.arenaBuf[:0]
		a, err := nodeOf(d.old)
		if err != nil {
			d.err = err
			return
		}
		b, err := nodeOf(d.new)
		if err != nil {
			d.err = err
			return
		}
		w.diff(a, b)
		d.changes, d.patch, d.err = w.changes, w.ops, w.err
		if w.err != nil {
			d.changes, d.patch = nil, nil
		}
	})
}

// Changes returns the field-level changes, ordered by path (object members
// by name, list items in patch order). It returns nil if the objects are
// equal or could not be read (see Err).
func (d *Diff) Changes() []Change {
	d.compute()
	return d.changes
}

// Patch returns the RFC 6902 JSON Patch that turns old into new; nil if
// they are equal or could not be read (see Err).
func (d *Diff) Patch() []Operation {
	d.compute()
	return d.patch
}

// Paths returns the paths of the changes, as strings, without duplicates.
func (d *Diff) Paths() []string {
	d.pathsOnce.Do(func() {
		for _, c := range d.Changes() {
			p := c.Path.String()
			if n := len(d.paths); n > 0 && d.paths[n-1] == p {
				continue
			}
			d.paths = append(d.paths, p)
		}
	})
	return d.paths
}

// Empty reports whether old and new are equal. A Diff whose objects could
// not be read is not empty.
func (d *Diff) Empty() bool {
	d.compute()
	return d.err == nil && len(d.changes) == 0
}

// Err returns the error that kept the diff from being computed: one of the
// objects cannot be represented as JSON.
func (d *Diff) Err() error {
	d.compute()
	return d.err
}

// Old returns the old object as given to Between.
func (d *Diff) Old() any { return d.old }

// New returns the new object as given to Between.
func (d *Diff) New() any { return d.new }

// walker computes a diff in one pass over both objects.
type walker struct {
	keys    []string
	exclude []Pattern
	path    []Segment
	changes []Change
	ops     []Operation
	err     error
	spans   []span   // output of the members of the maps being compared
	arena   []string // list item keys of the lists being compared

	pathBuf  [12]Segment
	ptrBuf   [128]byte // scratch for pointer
	arenaBuf [32]string
}

func (w *walker) fail(err error) bool {
	if err != nil && w.err == nil {
		w.err = err
	}
	return w.err != nil
}

func (w *walker) push(seg Segment) { w.path = append(w.path, seg) }

func (w *walker) pop() { w.path = w.path[:len(w.path)-1] }

// excluded reports whether an exclude pattern names the current path
// itself (not a field below it).
func (w *walker) excluded() bool {
	for _, p := range w.exclude {
		if p.names(w.path) {
			return true
		}
	}
	return false
}

// pointer returns the JSON pointer (RFC 6901) of path, where items are at
// their Index.
func (w *walker) pointer(path []Segment) string {
	b := w.ptrBuf[:0]
	for _, s := range path {
		b = append(b, '/')
		if s.Item {
			b = strconv.AppendInt(b, int64(s.Index), 10)
			continue
		}
		for i := 0; i < len(s.Field); i++ {
			switch c := s.Field[i]; c {
			case '~':
				b = append(b, '~', '0')
			case '/':
				b = append(b, '~', '1')
			default:
				b = append(b, c)
			}
		}
	}
	return string(b)
}

func (w *walker) pathCopy() Path {
	if len(w.path) == 0 {
		return nil
	}
	return slices.Clone(w.path)
}

func (w *walker) emit(op Op, a, b node) {
	if w.excluded() {
		return
	}
	c := Change{Path: w.pathCopy(), Op: op}
	o := Operation{Op: op, Path: w.pointer(w.path)}
	var err error
	if op != OpAdd {
		if c.Old, err = a.tree(); w.fail(err) {
			return
		}
	}
	if op != OpRemove {
		if c.New, err = b.tree(); w.fail(err) {
			return
		}
		o.Value = c.New
	}
	w.changes = append(w.changes, c)
	w.ops = append(w.ops, o)
}

// diff compares a and b, both present, at the current path.
func (w *walker) diff(a, b node) {
	if w.err != nil || w.excluded() {
		return
	}
	if a.k != b.k {
		w.emit(OpReplace, a, b)
		return
	}
	switch a.k {
	case kindObject:
		w.diffObject(a, b)
	case kindArray:
		w.diffArray(a, b)
	default:
		if eq, err := equal(a, b); !w.fail(err) && !eq {
			w.emit(OpReplace, a, b)
		}
	}
}

// member compares the member name of two objects; ok tells whether each
// has it.
func (w *walker) member(name string, a node, aok bool, b node, bok bool) {
	if !aok && !bok {
		return
	}
	if aok && bok && a.k == b.k && a.k < kindObject {
		// Equal scalars, the most common case, cost no path.
		if eq, err := equal(a, b); err == nil && eq {
			return
		}
	}
	w.push(Segment{Field: name})
	switch {
	case !aok:
		w.emit(OpAdd, null, b)
	case !bok:
		w.emit(OpRemove, a, null)
	default:
		w.diff(a, b)
	}
	w.pop()
}

func (w *walker) diffObject(a, b node) {
	if sameStruct(a, b) {
		// Fields come sorted by JSON name: output is in order already.
		for _, f := range a.te.OrderedFields() {
			fa, fb := f.GetFrom(a.rv), f.GetFrom(b.rv)
			if identical(fa, fb) {
				continue
			}
			ca, oka, err := fieldOf(fa, f)
			if w.fail(err) {
				return
			}
			cb, okb, err := fieldOf(fb, f)
			if w.fail(err) {
				return
			}
			w.member(f.JsonName, ca, oka, cb, okb)
		}
		return
	}
	// Maps: visit in map order, then sort the output by member name.
	s := w.startSpans()
	if sameMap(a, b) {
		missing := 0 // keys of a not in b
		zipMaps(a.rv, b.rv, func(name string, va, vb reflect.Value, vte *value.TypeReflectCacheEntry) bool {
			ca, err := typedNode(va, vte)
			if w.fail(err) {
				return false
			}
			cb := null
			if vb.IsValid() {
				if cb, err = typedNode(vb, vte); w.fail(err) {
					return false
				}
			} else {
				missing++
			}
			w.spanMember(s, name, ca, true, cb, vb.IsValid())
			return true
		})
		// b has keys a has not if it has more than a's keys it has.
		if w.err == nil && b.rv.Len() > a.rv.Len()-missing {
			zipMaps(b.rv, a.rv, func(name string, vb, va reflect.Value, vte *value.TypeReflectCacheEntry) bool {
				if va.IsValid() {
					return true
				}
				cb, err := typedNode(vb, vte)
				if w.fail(err) {
					return false
				}
				w.spanMember(s, name, null, false, cb, true)
				return true
			})
		}
		w.sortSpans(s)
		return
	}
	err := a.each(func(k string, ca node) bool {
		cb, okb, err := b.member(k)
		if w.fail(err) {
			return false
		}
		w.spanMember(s, k, ca, true, cb, okb)
		return w.err == nil
	})
	if w.fail(err) {
		return
	}
	err = b.each(func(k string, cb node) bool {
		_, oka, err := a.member(k)
		if w.fail(err) {
			return false
		}
		if !oka {
			w.spanMember(s, k, null, false, cb, true)
		}
		return w.err == nil
	})
	if w.fail(err) {
		return
	}
	w.sortSpans(s)
}

// span is the output one member of a map produced.
type span struct {
	name     string
	ch0, ch1 int
	op0, op1 int
}

// startSpans starts recording the spans of one map; it returns the index
// of its first span in w.spans.
func (w *walker) startSpans() int { return len(w.spans) }

// spanMember compares member name and records its output as a span.
func (w *walker) spanMember(start int, name string, a node, aok bool, b node, bok bool) {
	ch0, op0 := len(w.changes), len(w.ops)
	w.member(name, a, aok, b, bok)
	if len(w.changes) > ch0 {
		w.spans = append(w.spans, span{name: name, ch0: ch0, ch1: len(w.changes), op0: op0, op1: len(w.ops)})
	}
}

// sortSpans orders the output of the spans since start by member name,
// and drops them.
func (w *walker) sortSpans(start int) {
	spans := w.spans[start:]
	defer func() { w.spans = w.spans[:start] }()
	byName := func(x, y span) int { return strings.Compare(x.name, y.name) }
	if w.err != nil || len(spans) < 2 || slices.IsSortedFunc(spans, byName) {
		return
	}
	slices.SortFunc(spans, byName)
	ch0, op0 := len(w.changes), len(w.ops)
	for _, s := range spans {
		ch0, op0 = min(ch0, s.ch0), min(op0, s.op0)
	}
	changes := slices.Clone(w.changes[ch0:])
	ops := slices.Clone(w.ops[op0:])
	w.changes, w.ops = w.changes[:ch0], w.ops[:op0]
	for _, s := range spans {
		w.changes = append(w.changes, changes[s.ch0-ch0:s.ch1-ch0]...)
		w.ops = append(w.ops, ops[s.op0-op0:s.op1-op0]...)
	}
}

func (w *walker) diffArray(a, b node) {
	mark := len(w.arena)
	if key, ka, kb, ok := w.mergeKey(a, b); ok {
		w.diffKeyed(a, b, key, ka, kb)
		w.arena = w.arena[:mark]
		return
	}
	la, lb := a.size(), b.size()
	same := func(i, j int) bool {
		ca, err := a.at(i)
		if w.fail(err) {
			return false
		}
		cb, err := b.at(j)
		if w.fail(err) {
			return false
		}
		eq, err := equal(ca, cb)
		return !w.fail(err) && eq
	}
	// Skip the common head and tail, so that one insertion or removal is
	// one operation.
	p := 0
	for p < min(la, lb) && same(p, p) {
		p++
	}
	s := 0
	for s < min(la, lb)-p && same(la-1-s, lb-1-s) {
		s++
	}
	if w.err != nil {
		return
	}
	ma, mb := la-s-p, lb-s-p
	m := min(ma, mb)
	for i := p; i < p+m; i++ {
		ca, err := a.at(i)
		if w.fail(err) {
			return
		}
		cb, err := b.at(i)
		if w.fail(err) {
			return
		}
		w.push(Segment{Item: true, Index: i})
		w.diff(ca, cb)
		w.pop()
	}
	for i := p + ma - 1; i >= p+m; i-- { // from the end, so indexes hold
		ca, err := a.at(i)
		if w.fail(err) {
			return
		}
		w.push(Segment{Item: true, Index: i})
		w.emit(OpRemove, ca, null)
		w.pop()
	}
	for i := p + m; i < p+mb; i++ {
		cb, err := b.at(i)
		if w.fail(err) {
			return
		}
		w.push(Segment{Item: true, Index: i})
		w.emit(OpAdd, null, cb)
		w.pop()
	}
}

// mergeKey returns the merge key both lists are keyed by, and their items'
// keys.
func (w *walker) mergeKey(a, b node) (string, []string, []string, bool) {
	mark := len(w.arena)
	for _, key := range w.keys {
		ka, ok := w.itemKeys(a, key)
		if !ok {
			continue
		}
		kb, ok := w.itemKeys(b, key)
		if !ok {
			w.arena = w.arena[:mark]
			continue
		}
		return key, ka, kb, true
	}
	return "", nil, nil, false
}

// itemKeys returns the value of key of every item of l, if all items are
// objects with a string key, unique within the list. The keys live in
// w.arena, which the caller truncates when done with them.
func (w *walker) itemKeys(l node, key string) ([]string, bool) {
	n := l.size()
	start := len(w.arena)
	for i := range n {
		c, err := l.at(i)
		if w.fail(err) || c.k != kindObject {
			w.arena = w.arena[:start]
			return nil, false
		}
		v, ok, err := c.member(key)
		if w.fail(err) || !ok || v.k != kindString {
			w.arena = w.arena[:start]
			return nil, false
		}
		w.arena = append(w.arena, v.str())
	}
	keys := w.arena[start:len(w.arena):len(w.arena)]
	unique := true
	if n <= 16 {
		for i := range keys {
			if slices.Contains(keys[:i], keys[i]) {
				unique = false
				break
			}
		}
	} else {
		seen := make(map[string]struct{}, n)
		for _, k := range keys {
			if _, dup := seen[k]; dup {
				unique = false
				break
			}
			seen[k] = struct{}{}
		}
	}
	if !unique {
		w.arena = w.arena[:start]
		return nil, false
	}
	return keys, true
}

// diffKeyed compares two lists keyed by key; ka and kb are their items'
// keys. The patch removes the items that went away, then walks the new
// list in order, adding new items, moving items that changed position and
// comparing the rest.
func (w *walker) diffKeyed(a, b node, key string, ka, kb []string) {
	item := func(i int, v string) Segment {
		return Segment{Item: true, Index: i, MergeKey: key, MergeValue: v}
	}
	if slices.Equal(ka, kb) {
		for i, k := range ka {
			ca, err := a.at(i)
			if w.fail(err) {
				return
			}
			cb, err := b.at(i)
			if w.fail(err) {
				return
			}
			w.push(item(i, k))
			w.diff(ca, cb)
			w.pop()
		}
		return
	}
	oldIndex := make(map[string]int, len(ka))
	for i, k := range ka {
		oldIndex[k] = i
	}
	inB := make(map[string]bool, len(kb))
	for _, k := range kb {
		inB[k] = true
	}
	cur := make([]string, 0, max(len(ka), len(kb))) // keys of the list being patched
	for _, k := range ka {
		if inB[k] {
			cur = append(cur, k)
		}
	}
	for i := len(ka) - 1; i >= 0; i-- {
		if inB[ka[i]] {
			continue
		}
		ca, err := a.at(i)
		if w.fail(err) {
			return
		}
		w.push(item(i, ka[i]))
		w.emit(OpRemove, ca, null)
		w.pop()
	}
	for j, k := range kb {
		cb, err := b.at(j)
		if w.fail(err) {
			return
		}
		i, ok := oldIndex[k]
		if !ok {
			w.push(item(j, k))
			w.emit(OpAdd, null, cb)
			w.pop()
			cur = slices.Insert(cur, j, k)
			continue
		}
		if at := slices.Index(cur[j:], k) + j; at != j {
			w.push(item(at, k))
			from := w.pointer(w.path)
			w.path[len(w.path)-1].Index = j
			if !w.excluded() {
				w.changes = append(w.changes, Change{Path: w.pathCopy(), Op: OpMove, Old: i, New: j})
				w.ops = append(w.ops, Operation{Op: OpMove, From: from, Path: w.pointer(w.path)})
			}
			w.pop()
			cur = slices.Insert(slices.Delete(cur, at, at+1), j, k)
		}
		ca, err := a.at(i)
		if w.fail(err) {
			return
		}
		w.push(item(j, k))
		w.diff(ca, cb)
		w.pop()
	}
}
