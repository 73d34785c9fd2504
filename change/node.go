package change

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// kind is the JSON kind of a node.
type kind uint8

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindObject
	kindArray
)

// node is one JSON value, seen without converting it: either part of a
// decoded JSON tree (v: nil, bool, string, int64, float64, json.Number,
// map[string]any, []any, and the common shapes map[string]string and
// []string) or a typed Go value (rv), read by reflection exactly as
// runtime.DefaultUnstructuredConverter would convert it (JSON tags,
// omitempty, inline structs, and the types' own conversions such as
// metav1.Time and resource.Quantity, through structured-merge-diff's
// reflect cache, the one apimachinery uses). Typed objects are compared in
// place; only the parts that differ are ever converted.
type node struct {
	k  kind
	v  any           // tree value but strings; unused when rv is valid
	s  string        // tree string value
	rv reflect.Value // typed value, dereferenced; struct, map, slice, array or scalar
	te *value.TypeReflectCacheEntry
}

var null = node{}

// nodeOf returns the node for an object: a tree for maps, Unstructured and
// decoded JSON values, a typed view for everything else.
func nodeOf(x any) (node, error) {
	switch x := x.(type) {
	case runtime.Unstructured:
		if isNil(x) {
			return null, nil
		}
		return treeNode(x.UnstructuredContent())
	case json.RawMessage:
		return jsonNode(x)
	}
	return typedNode(reflect.ValueOf(x), nil)
}

// treeNode wraps a tree value. Values that are not tree types are viewed
// by reflection, so maps built by hand may hold any JSON-encodable value.
func treeNode(v any) (node, error) {
	// Keep v itself, not the switch variable: re-boxing allocates.
	switch x := v.(type) {
	case nil:
		return null, nil
	case bool:
		return node{k: kindBool, v: v}, nil
	case string:
		return node{k: kindString, s: x}, nil
	case int64, float64, json.Number:
		return node{k: kindNumber, v: v}, nil
	case map[string]any:
		if x == nil {
			return null, nil
		}
		return node{k: kindObject, v: v}, nil
	case map[string]string:
		if x == nil {
			return null, nil
		}
		return node{k: kindObject, v: v}, nil
	case []any:
		if x == nil {
			return null, nil
		}
		return node{k: kindArray, v: v}, nil
	case []string:
		if x == nil {
			return null, nil
		}
		return node{k: kindArray, v: v}, nil
	}
	return typedNode(reflect.ValueOf(v), nil)
}

// typedNode views rv as JSON. te is rv's type entry if the caller has it.
func typedNode(rv reflect.Value, te *value.TypeReflectCacheEntry) (node, error) {
	for {
		if !rv.IsValid() {
			return null, nil
		}
		if rv.Kind() == reflect.Interface {
			if rv.IsNil() {
				return null, nil
			}
			rv, te = rv.Elem(), nil
			continue
		}
		if te == nil {
			te = value.TypeReflectEntryOf(rv.Type())
		}
		if te.CanConvertToUnstructured() {
			target := rv
			if rv.Kind() != reflect.Pointer {
				// Convert through a pointer: value receivers would copy the
				// value into an interface, pointer receivers need one.
				if !rv.CanAddr() {
					c := reflect.New(rv.Type()).Elem()
					c.Set(rv)
					rv = c
				}
				target, te = rv.Addr(), value.TypeReflectEntryOf(reflect.PointerTo(rv.Type()))
			}
			u, err := te.ToUnstructured(target)
			if err != nil {
				return null, fmt.Errorf("convert %v: %w", rv.Type(), err)
			}
			return treeNode(u)
		}
		switch rv.Kind() {
		case reflect.Pointer:
			if rv.IsNil() {
				return null, nil
			}
			rv, te = rv.Elem(), nil
			continue
		case reflect.Map, reflect.Slice:
			if rv.IsNil() {
				return null, nil
			}
		}
		break
	}
	switch rv.Kind() {
	case reflect.Bool:
		return node{k: kindBool, rv: rv, te: te}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return node{k: kindNumber, rv: rv, te: te}, nil
	case reflect.String:
		return node{k: kindString, rv: rv, te: te}, nil
	case reflect.Struct:
		return node{k: kindObject, rv: rv, te: te}, nil
	case reflect.Map:
		if rv.CanInterface() {
			switch m := rv.Interface().(type) { // no allocation: maps are pointers
			case map[string]any:
				return node{k: kindObject, v: m}, nil
			case map[string]string:
				return node{k: kindObject, v: m}, nil
			}
		}
		if rv.Type().Key().Kind() != reflect.String {
			return encodedNode(rv)
		}
		return node{k: kindObject, rv: rv, te: te}, nil
	case reflect.Slice:
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			return node{k: kindString, s: base64.StdEncoding.EncodeToString(rv.Bytes())}, nil
		}
		return node{k: kindArray, rv: rv, te: te}, nil
	case reflect.Array:
		return node{k: kindArray, rv: rv, te: te}, nil
	}
	return null, fmt.Errorf("%v cannot be represented as JSON", rv.Type())
}

// encodedNode converts rv through encoding/json, for the shapes the
// reflective view does not handle itself (maps with non-string keys).
func encodedNode(rv reflect.Value) (node, error) {
	data, err := json.Marshal(rv.Interface())
	if err != nil {
		return null, fmt.Errorf("encode %v: %w", rv.Type(), err)
	}
	return jsonNode(data)
}

// jsonNode decodes JSON text, keeping numbers exact.
func jsonNode(data []byte) (node, error) {
	var v any
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return null, fmt.Errorf("decode JSON: %w", err)
	}
	if d.InputOffset() != int64(len(bytes.TrimRight(data, " \t\r\n"))) {
		return null, errors.New("decode JSON: data after the value")
	}
	return treeNode(v)
}

func (n node) typed() bool { return n.rv.IsValid() }

// str returns a string node's value.
func (n node) str() string {
	if n.typed() {
		return n.rv.String()
	}
	return n.s
}

func (n node) boolean() bool {
	if n.typed() {
		return n.rv.Bool()
	}
	return n.v.(bool)
}

// number is a JSON number: an integer when it fits int64, else a float.
type number struct {
	i     int64
	f     float64
	isInt bool
}

func (n node) num() number {
	if n.typed() {
		switch n.rv.Kind() {
		case reflect.Float32, reflect.Float64:
			return floatNumber(n.rv.Float())
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			u := n.rv.Uint()
			if u > math.MaxInt64 {
				return number{f: float64(u)}
			}
			return number{i: int64(u), isInt: true}
		default:
			return number{i: n.rv.Int(), isInt: true}
		}
	}
	switch v := n.v.(type) {
	case int64:
		return number{i: v, isInt: true}
	case float64:
		return floatNumber(v)
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return number{i: i, isInt: true}
		}
		f, _ := v.Float64()
		return floatNumber(f)
	}
	panic(fmt.Sprintf("change: %T is not a number", n.v))
}

// floatNumber normalizes integral floats so that 1 and 1.0 compare and
// hash alike, as they are the same JSON number.
func floatNumber(f float64) number {
	if f == math.Trunc(f) && f >= -(1<<63) && f < 1<<63 {
		return number{i: int64(f), isInt: true}
	}
	return number{f: f}
}

func (a number) equal(b number) bool {
	if a.isInt && b.isInt {
		return a.i == b.i
	}
	return a.float() == b.float()
}

func (a number) float() float64 {
	if a.isInt {
		return float64(a.i)
	}
	return a.f
}

// size returns the number of items of an array node.
func (n node) size() int {
	if n.typed() {
		return n.rv.Len()
	}
	switch v := n.v.(type) {
	case []any:
		return len(v)
	case []string:
		return len(v)
	}
	return 0
}

// at returns item i of an array node.
func (n node) at(i int) (node, error) {
	if n.typed() {
		return typedNode(n.rv.Index(i), nil)
	}
	switch v := n.v.(type) {
	case []any:
		return treeNode(v[i])
	case []string:
		return node{k: kindString, s: v[i]}, nil
	}
	return null, nil
}

// each calls fn for every member of an object node, in no particular
// order, until fn returns false. The child passed to fn is valid only
// during the call.
func (n node) each(fn func(name string, child node) bool) error {
	return n.eachSkip(nil, fn)
}

// eachSkip is each without the members skip (if not nil) names, which are
// not even read.
func (n node) eachSkip(skip func(name string) bool, fn func(name string, child node) bool) error {
	if !n.typed() {
		switch m := n.v.(type) {
		case map[string]any:
			for k, v := range m {
				if skip != nil && skip(k) {
					continue
				}
				c, err := treeNode(v)
				if err != nil {
					return err
				}
				if !fn(k, c) {
					return nil
				}
			}
		case map[string]string:
			for k, v := range m {
				if skip != nil && skip(k) {
					continue
				}
				if !fn(k, node{k: kindString, s: v}) {
					return nil
				}
			}
		}
		return nil
	}
	if n.rv.Kind() == reflect.Struct {
		for _, f := range n.te.OrderedFields() {
			if skip != nil && skip(f.JsonName) {
				continue
			}
			c, ok, err := field(n, f)
			if err != nil {
				return err
			}
			if ok && !fn(f.JsonName, c) {
				return nil
			}
		}
		return nil
	}
	// Read entries into one addressable key and value, instead of a copy
	// of each.
	t := n.rv.Type()
	key, val := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
	var vte *value.TypeReflectCacheEntry
	it := n.rv.MapRange()
	for it.Next() {
		key.SetIterKey(it)
		name := key.String()
		if skip != nil && skip(name) {
			continue
		}
		val.SetIterValue(it)
		if vte == nil {
			vte = value.TypeReflectEntryOf(t.Elem())
		}
		c, err := typedNode(val, vte)
		if err != nil {
			return err
		}
		if !fn(name, c) {
			return nil
		}
	}
	return nil
}

// member returns an object node's member.
func (n node) member(key string) (node, bool, error) {
	if !n.typed() {
		switch m := n.v.(type) {
		case map[string]any:
			v, ok := m[key]
			if !ok {
				return null, false, nil
			}
			c, err := treeNode(v)
			return c, true, err
		case map[string]string:
			v, ok := m[key]
			return node{k: kindString, s: v}, ok, nil
		}
		return null, false, nil
	}
	if n.rv.Kind() == reflect.Struct {
		f, ok := n.te.Fields()[key]
		if !ok {
			return null, false, nil
		}
		return field(n, f)
	}
	v := n.rv.MapIndex(reflect.ValueOf(key).Convert(n.rv.Type().Key()))
	if !v.IsValid() {
		return null, false, nil
	}
	c, err := typedNode(v, nil)
	return c, true, err
}

// field returns a struct field's node, and false if JSON omits it.
func field(n node, f *value.FieldCacheEntry) (node, bool, error) {
	return fieldOf(f.GetFrom(n.rv), f)
}

// fieldOf returns the node of fv, the value of field f.
func fieldOf(fv reflect.Value, f *value.FieldCacheEntry) (node, bool, error) {
	if f.CanOmit(fv) {
		return null, false, nil
	}
	c, err := typedNode(fv, f.TypeEntry)
	return c, true, err
}

// sameStruct reports whether a and b are structs of one type, whose
// fields can be compared pairwise.
func sameStruct(a, b node) bool {
	return a.typed() && b.typed() && a.rv.Kind() == reflect.Struct && a.rv.Type() == b.rv.Type()
}

// sameMap reports whether a and b are typed maps of one type.
func sameMap(a, b node) bool {
	return a.typed() && b.typed() && a.rv.Kind() == reflect.Map && a.rv.Type() == b.rv.Type()
}

// identical reports whether two values of one type are equal by ==, which
// implies equal JSON. It is a shortcut before reading them as JSON, which
// for types with their own conversion (quantities, times) costs
// allocations; false says nothing.
func identical(a, b reflect.Value) bool {
	t := a.Type()
	if !t.Comparable() {
		return false
	}
	switch t.Kind() {
	case reflect.Interface, reflect.Float32, reflect.Float64:
		return false // dynamic types may not be comparable; NaN
	case reflect.Struct:
		if !plainComparable(t) {
			return false
		}
	}
	return a.Equal(b)
}

var plainCache sync.Map // reflect.Type -> bool

// plainComparable reports whether == on t never panics and implies equal
// content: no interfaces (dynamic types may not be comparable) and no
// floats (NaN) anywhere in it.
func plainComparable(t reflect.Type) bool {
	if v, ok := plainCache.Load(t); ok {
		return v.(bool)
	}
	var ok bool
	switch t.Kind() {
	case reflect.Interface, reflect.Float32, reflect.Float64:
		ok = false
	case reflect.Struct:
		ok = true
		for i := range t.NumField() {
			if !plainComparable(t.Field(i).Type) {
				ok = false
				break
			}
		}
	case reflect.Array:
		ok = plainComparable(t.Elem())
	default:
		ok = t.Comparable()
	}
	plainCache.Store(t, ok)
	return ok
}

// equal reports whether a and b are the same JSON value.
func equal(a, b node) (bool, error) {
	if a.k != b.k {
		return false, nil
	}
	switch a.k {
	case kindNull:
		return true, nil
	case kindBool:
		return a.boolean() == b.boolean(), nil
	case kindNumber:
		return a.num().equal(b.num()), nil
	case kindString:
		return a.str() == b.str(), nil
	case kindArray:
		n := a.size()
		if n != b.size() {
			return false, nil
		}
		for i := range n {
			ca, err := a.at(i)
			if err != nil {
				return false, err
			}
			cb, err := b.at(i)
			if err != nil {
				return false, err
			}
			if eq, err := equal(ca, cb); !eq || err != nil {
				return false, err
			}
		}
		return true, nil
	}
	if sameStruct(a, b) {
		for _, f := range a.te.OrderedFields() {
			fa, fb := f.GetFrom(a.rv), f.GetFrom(b.rv)
			if identical(fa, fb) {
				continue
			}
			ca, oka, err := fieldOf(fa, f)
			if err != nil {
				return false, err
			}
			cb, okb, err := fieldOf(fb, f)
			if err != nil {
				return false, err
			}
			if oka != okb {
				return false, nil
			}
			if eq, err := equal(ca, cb); !eq || err != nil {
				return false, err
			}
		}
		return true, nil
	}
	if sameMap(a, b) {
		if a.rv.Len() != b.rv.Len() {
			return false, nil
		}
		eq := true
		zipMaps(a.rv, b.rv, func(_ string, va, vb reflect.Value, vte *value.TypeReflectCacheEntry) bool {
			if !vb.IsValid() {
				eq = false
				return false
			}
			ca, err := typedNode(va, vte)
			if err != nil {
				eq = false
				return false
			}
			cb, err := typedNode(vb, vte)
			if err != nil {
				eq = false
				return false
			}
			eq, _ = equal(ca, cb)
			return eq
		})
		return eq, nil
	}
	if !a.typed() && !b.typed() {
		if ma, ok := a.v.(map[string]string); ok {
			if mb, ok := b.v.(map[string]string); ok {
				return mapsEqual(ma, mb), nil
			}
		}
	}
	na, eq, err := 0, true, error(nil)
	err2 := a.each(func(k string, ca node) bool {
		na++
		var cb node
		var ok bool
		cb, ok, err = b.member(k)
		if err != nil || !ok {
			eq = false
			return false
		}
		eq, err = equal(ca, cb)
		return eq && err == nil
	})
	if err == nil {
		err = err2
	}
	if !eq || err != nil {
		return false, err
	}
	nb := 0
	err = b.each(func(string, node) bool { nb++; return true })
	return na == nb, err
}

// zipMaps calls fn for every entry of the typed map a with b's value for
// the same key (invalid if b has none), skipping entries identical in
// both, until fn returns false. The values are valid only during the call.
func zipMaps(a, b reflect.Value, fn func(name string, va, vb reflect.Value, vte *value.TypeReflectCacheEntry) bool) {
	t := a.Type()
	key, va := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
	vte := value.TypeReflectEntryOf(t.Elem())
	it := a.MapRange()
	for it.Next() {
		key.SetIterKey(it)
		va.SetIterValue(it)
		vb := b.MapIndex(key)
		if vb.IsValid() && identical(va, vb) {
			continue
		}
		if !fn(key.String(), va, vb, vte) {
			return
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v != w {
			return false
		}
	}
	return true
}

// tree converts n to a JSON value as encoding/json decodes it, with int64
// for integers: nil, bool, int64, float64, string, []any, map[string]any.
// Parts of trees are returned as they are, not copied.
func (n node) tree() (any, error) {
	switch n.k {
	case kindNull:
		return nil, nil
	case kindBool:
		return n.boolean(), nil
	case kindString:
		return n.str(), nil
	case kindNumber:
		if !n.typed() {
			if v, ok := n.v.(json.Number); ok {
				num := n.num()
				if num.isInt {
					return num.i, nil
				}
				return strconv.ParseFloat(string(v), 64)
			}
			return n.v, nil
		}
		if k := n.rv.Kind(); k == reflect.Float32 || k == reflect.Float64 {
			return n.rv.Float(), nil
		}
		if num := n.num(); num.isInt {
			return num.i, nil
		} else {
			return num.f, nil
		}
	case kindArray:
		if v, ok := n.v.([]any); ok {
			return v, nil
		}
		out := make([]any, n.size())
		for i := range out {
			c, err := n.at(i)
			if err != nil {
				return nil, err
			}
			if out[i], err = c.tree(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	if v, ok := n.v.(map[string]any); ok {
		return v, nil
	}
	out := map[string]any{}
	var err error
	err2 := n.each(func(k string, c node) bool {
		out[k], err = c.tree()
		return err == nil
	})
	if err == nil {
		err = err2
	}
	return out, err
}
