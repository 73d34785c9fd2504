package change

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unsafe"
)

// Plain Go values. encoding/json sees only exported fields, so the diff
// of two values of `type user struct{ name string; age int }` through
// JSON is always empty. An Observable of a type that JSON would lose
// fields of (a struct with unexported fields, without a MarshalJSON or
// MarshalText of its own, anywhere in the type; mutexes, atomics,
// functions and channels do not count) diffs a plain view of
// its values instead: every field, exported or not, by its Go name (an
// exported field by its JSON name if it has a json tag; "-" still skips
// it; an embedded struct as a field named by its type), maps with their
// keys printed by fmt, pointers followed (values must not point in a
// cycle). The parts
// of the value JSON represents fully (time.Time, types with MarshalJSON,
// structs of exported fields) are viewed as their JSON, as everywhere in
// this package. Unexported fields are read, never written, through
// package unsafe.
//
// Values held in interface fields are viewed by their JSON if the
// interface's static type does not show the hidden fields.

// hiddenCache maps reflect.Type to bool: whether JSON loses fields of it.
var hiddenCache sync.Map

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// hasHidden reports whether encoding/json would leave out fields of
// values of type t.
func hasHidden(t reflect.Type) bool {
	if t == nil {
		return false
	}
	if h, ok := hiddenCache.Load(t); ok {
		return h.(bool)
	}
	h := hidden(t, map[reflect.Type]bool{})
	hiddenCache.Store(t, h)
	return h
}

// hidden is hasHidden without the cache; seen breaks cycles of types
// (a type in progress counts as not hiding anything).
func hidden(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	if marshals(t) {
		return false
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return hidden(t.Elem(), seen)
	case reflect.Map:
		return hidden(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Name == "_" || notData(f.Type) {
				continue
			}
			if !f.IsExported() && !f.Anonymous {
				return true
			}
			if hidden(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

// notData reports whether a field of type t is machinery rather than
// state: functions, channels, unsafe pointers, and the types of packages
// sync and sync/atomic (a struct's mutex). The plain view leaves such
// unexported fields out, and they do not make a type need it.
func notData(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return true
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	p := t.PkgPath()
	return p == "sync" || p == "sync/atomic"
}

// marshals reports whether t or *t encodes itself to JSON.
func marshals(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return t.Implements(jsonMarshaler) || t.Implements(textMarshaler) ||
		pt.Implements(jsonMarshaler) || pt.Implements(textMarshaler)
}

// plainView returns the value to diff for v: v itself if JSON sees all of
// it, else its plain view as a decoded JSON tree.
func plainView(v any) (any, error) {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || !hasHidden(rv.Type()) {
		return v, nil
	}
	return plainTree(accessible(rv))
}

// accessible returns v addressable and usable with Interface, even if it
// was reached through an unexported field.
func accessible(v reflect.Value) reflect.Value {
	if !v.CanInterface() && v.CanAddr() {
		return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
	}
	if !v.CanAddr() && v.CanInterface() {
		c := reflect.New(v.Type()).Elem()
		c.Set(v)
		return c
	}
	return v
}

// plainTree converts v (accessible) to a tree: map[string]any, []any and
// JSON scalars.
func plainTree(v reflect.Value) (any, error) {
	if !hasHidden(v.Type()) {
		return jsonTree(v)
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil, nil
		}
		return plainTree(accessible(v.Elem()))
	case reflect.Slice:
		if v.IsNil() {
			return nil, nil
		}
		return plainItems(v)
	case reflect.Array:
		return plainItems(v)
	case reflect.Map:
		return plainMap(v)
	case reflect.Struct:
		return plainStruct(v)
	}
	return nil, fmt.Errorf("%v cannot be viewed as a plain value", v.Type())
}

func plainItems(v reflect.Value) (any, error) {
	out := make([]any, v.Len())
	for i := range out {
		x, err := plainTree(accessible(v.Index(i)))
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out[i] = x
	}
	return out, nil
}

func plainMap(v reflect.Value) (any, error) {
	if v.IsNil() {
		return nil, nil
	}
	out := make(map[string]any, v.Len())
	it := v.MapRange()
	for it.Next() {
		k := fmt.Sprint(accessible(it.Key()).Interface())
		x, err := plainTree(accessible(it.Value()))
		if err != nil {
			return nil, fmt.Errorf("[%s]: %w", k, err)
		}
		out[k] = x
	}
	return out, nil
}

func plainStruct(v reflect.Value) (any, error) {
	t := v.Type()
	out := make(map[string]any, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, ok := plainName(f)
		if !ok {
			continue
		}
		x, err := plainTree(accessible(v.Field(i)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = x
	}
	return out, nil
}

// plainName is a struct field's name in the plain view; false to skip it.
func plainName(f reflect.StructField) (string, bool) {
	if f.Name == "_" {
		return "", false
	}
	if !f.IsExported() {
		if notData(f.Type) {
			return "", false
		}
		return f.Name, true
	}
	tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	switch tag {
	case "-":
		return "", false
	case "":
		return f.Name, true
	}
	return tag, true
}

// jsonTree is v's JSON as a decoded tree, numbers kept exact.
func jsonTree(v reflect.Value) (any, error) {
	data, err := json.Marshal(v.Interface())
	if err != nil {
		return nil, fmt.Errorf("encode %v: %w", v.Type(), err)
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var out any
	if err := d.Decode(&out); err != nil {
		return nil, fmt.Errorf("decode %v: %w", v.Type(), err)
	}
	return out, nil
}
