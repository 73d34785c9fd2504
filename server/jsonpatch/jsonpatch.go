// Package jsonpatch makes RFC 6902 JSON Patches between two decoded JSON
// values, for watch events that carry what changed instead of the whole
// object (watchDeltas).
//
// Values are what jsonenc.Decode or apimachinery's unstructured decoding
// give: map[string]any, []any, string, bool, nil and numbers (int64,
// float64 or json.Number), compared by value. A patch uses only add,
// remove and replace, never on a list's shape: lists of the same length
// are compared element by element, lists whose length changed are
// replaced whole. So no operation shifts an index another one names, and
// the operations may be applied in any order; Diff sorts them by path so
// that equal inputs give equal bytes.
//
// Functions are safe for concurrent use; they never modify their inputs,
// and a patch shares values with its "to" argument.
package jsonpatch

import (
	"slices"
	"strings"

	"github.com/objwatch/objwatch/change/fieldmask"
	"github.com/objwatch/objwatch/server/jsonenc"
)

// Op is one operation of a patch. Value is unused for remove.
type Op struct {
	Op    string // "add", "remove" or "replace"
	Path  string // an RFC 6901 pointer
	Value any
}

// Diff returns the operations that turn from into to.
func Diff(from, to map[string]any) []Op {
	var ops []Op
	diffMaps(&ops, "", from, to)
	slices.SortFunc(ops, func(a, b Op) int { return strings.Compare(a.Path, b.Path) })
	return ops
}

func diffMaps(ops *[]Op, path string, from, to map[string]any) {
	for k, fv := range from {
		p := path + "/" + escape(k)
		tv, ok := to[k]
		if !ok {
			*ops = append(*ops, Op{Op: "remove", Path: p})
			continue
		}
		diffValues(ops, p, fv, tv)
	}
	for k, tv := range to {
		if _, ok := from[k]; !ok {
			*ops = append(*ops, Op{Op: "add", Path: path + "/" + escape(k), Value: tv})
		}
	}
}

func diffValues(ops *[]Op, path string, from, to any) {
	switch f := from.(type) {
	case map[string]any:
		if t, ok := to.(map[string]any); ok {
			diffMaps(ops, path, f, t)
			return
		}
	case []any:
		if t, ok := to.([]any); ok && len(t) == len(f) {
			for i := range f {
				diffValues(ops, path+"/"+itoa(i), f[i], t[i])
			}
			return
		}
	}
	if !fieldmask.Equal(from, to) {
		*ops = append(*ops, Op{Op: "replace", Path: path, Value: to})
	}
}

// escape is s as a pointer segment: "~" is "~0", "/" is "~1".
func escape(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	var b [20]byte
	n := len(b)
	for i > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	return string(b[n:])
}

// Append appends ops encoded as a JSON array to dst; ok is false when a
// value cannot be encoded (see jsonenc.Append).
func Append(dst []byte, ops []Op) (_ []byte, ok bool) {
	dst = append(dst, '[')
	for i, op := range ops {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"op":"`...)
		dst = append(dst, op.Op...)
		dst = append(dst, `","path":`...)
		dst = jsonenc.AppendString(dst, op.Path)
		if op.Op != "remove" {
			dst = append(dst, `,"value":`...)
			if dst, ok = jsonenc.Append(dst, op.Value); !ok {
				return dst, false
			}
		}
		dst = append(dst, '}')
	}
	return append(dst, ']'), true
}
