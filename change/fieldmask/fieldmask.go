// Package fieldmask parses and applies field masks: sets of RFC 6901 JSON
// Pointers naming the parts of an object a watcher cares about. It is the
// shared ground of the server's masked watches and of the client's
// emulation of them on servers without masks (issue 26's wire extension;
// not yet wired into either).
//
// A mask is written as comma-separated pointers, e.g.
// "/spec/replicas,/metadata/annotations/example.com~1weight"; a parameter
// may also repeat. In a pointer, "~1" stands for "/" and "~0" for "~"; any
// other "~" is malformed. A key that holds a comma cannot be masked, as the
// comma separates pointers. Every pointer starts with "/" (the empty
// pointer, the whole object, is refused: mask nothing instead). A segment
// that meets a list indexes it when it is a decimal index without leading
// zeros ("-", the position after the last element, names nothing).
//
// Objects are JSON values as encoding/json or apimachinery's unstructured
// decoding gives them: map[string]any, []any, string, bool, nil and
// numbers (float64, int64 or json.Number).
//
// A Mask is immutable after Parse and safe for concurrent use.
package fieldmask

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Limits of a mask, beyond which Parse refuses it.
const (
	MaxPointers      = 100
	MaxPointerLength = 1024
)

// Mask is a parsed field mask.
type Mask struct {
	pointers []pointer
}

type pointer struct {
	raw      string
	segments []string
}

// ErrEmpty is Parse's error for a mask without pointers.
var ErrEmpty = errors.New("field mask: no pointers")

// Parse parses values, each a comma-separated list of pointers. The error
// names the offending pointer; an empty mask is ErrEmpty.
func Parse(values ...string) (Mask, error) {
	var m Mask
	for _, v := range values {
		for _, raw := range strings.Split(v, ",") {
			if len(m.pointers) == MaxPointers {
				return Mask{}, fmt.Errorf("field mask: more than %d pointers", MaxPointers)
			}
			p, err := parsePointer(raw)
			if err != nil {
				return Mask{}, err
			}
			m.pointers = append(m.pointers, p)
		}
	}
	if len(m.pointers) == 0 {
		return Mask{}, ErrEmpty
	}
	return m, nil
}

func parsePointer(raw string) (pointer, error) {
	switch {
	case raw == "":
		return pointer{}, errors.New("field mask: empty pointer")
	case len(raw) > MaxPointerLength:
		return pointer{}, fmt.Errorf("field mask: pointer of %d bytes, longer than %d", len(raw), MaxPointerLength)
	case raw[0] != '/':
		return pointer{}, fmt.Errorf("field mask: pointer %q does not start with /", raw)
	}
	parts := strings.Split(raw[1:], "/")
	for i, s := range parts {
		if !strings.Contains(s, "~") {
			continue
		}
		var b strings.Builder
		for j := 0; j < len(s); j++ {
			if s[j] != '~' {
				b.WriteByte(s[j])
				continue
			}
			if j+1 == len(s) || (s[j+1] != '0' && s[j+1] != '1') {
				return pointer{}, fmt.Errorf("field mask: pointer %q: ~ not followed by 0 or 1", raw)
			}
			if s[j+1] == '0' {
				b.WriteByte('~')
			} else {
				b.WriteByte('/')
			}
			j++
		}
		parts[i] = b.String()
	}
	return pointer{raw: raw, segments: parts}, nil
}

// Len is the number of pointers.
func (m Mask) Len() int { return len(m.pointers) }

// String is the mask as Parse takes it.
func (m Mask) String() string {
	raws := make([]string, len(m.pointers))
	for i, p := range m.pointers {
		raws[i] = p.raw
	}
	return strings.Join(raws, ",")
}

// Changed reports whether the value at some pointer, or anything below
// it, differs between old and new. A value present in one and absent in
// the other differs; absent in both does not.
func (m Mask) Changed(old, new any) bool {
	for _, p := range m.pointers {
		a, aok := lookup(old, p.segments)
		b, bok := lookup(new, p.segments)
		if aok != bok || (aok && !Equal(a, b)) {
			return true
		}
	}
	return false
}

// lookup returns the value at segments in v.
func lookup(v any, segments []string) (any, bool) {
	for _, s := range segments {
		switch c := v.(type) {
		case map[string]any:
			next, ok := c[s]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, ok := index(s, len(c))
			if !ok {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// index is s as an index of a list of n elements.
func index(s string, n int) (int, bool) {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i >= n {
		return 0, false
	}
	return i, true
}

// Equal compares two JSON values; numbers compare by value whatever their
// Go type (two int64 exactly).
func Equal(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !Equal(xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !Equal(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	if x, ok := a.(int64); ok {
		if y, ok := b.(int64); ok {
			return x == y
		}
	}
	if fa, ok := number(a); ok {
		fb, ok := number(b)
		return ok && fa == fb
	}
	return reflect.DeepEqual(a, b)
}

// number is v as a float64 when it is a JSON number.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case interface{ Float64() (float64, error) }: // json.Number
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// identity are the fields every projection keeps: what a metadata-only
// watch carries, so that a client can still key, order and resume.
var identity = [][]string{
	{"apiVersion"}, {"kind"},
	{"metadata", "name"}, {"metadata", "namespace"}, {"metadata", "uid"},
	{"metadata", "resourceVersion"}, {"metadata", "generation"}, {"metadata", "deletionTimestamp"},
}

// Project returns a new object holding only obj's identity fields
// (apiVersion, kind and metadata's name, namespace, uid, resourceVersion,
// generation and deletionTimestamp) and the values at the masked
// pointers, each at its own path. The projection is a function of those
// values alone: a map on the way to a value is there only when the value
// is, and a list on the way holds the masked elements at their indices
// with null before them (e.g. /spec/containers/1/image projects to
// "containers":[null,{"image":...}]). So two versions of an object whose
// masked values are equal project to the same object but for its
// identity fields, which a watch that sends changes relies on. A pointer
// below another is covered by it. Values are shared with obj, not copied:
// the caller must not change either afterwards.
func (m Mask) Project(obj map[string]any) map[string]any {
	out := map[string]any{}
	for _, p := range m.paths() {
		v, ok := lookup(obj, p)
		if !ok {
			continue
		}
		out = put(out, obj, p, v).(map[string]any)
	}
	return out
}

// paths are the identity paths and the mask's, without those below
// another (whose value the other's holds, shared with the object).
func (m Mask) paths() [][]string {
	all := make([][]string, 0, len(identity)+len(m.pointers))
	all = append(all, identity...)
	for _, p := range m.pointers {
		all = append(all, p.segments)
	}
	keep := all[:0:0]
	for i, p := range all {
		covered := false
		for j, q := range all {
			if i != j && isPrefix(q, p) && (len(q) < len(p) || j < i) {
				covered = true
				break
			}
		}
		if !covered {
			keep = append(keep, p)
		}
	}
	return keep
}

// isPrefix reports whether q is p or above it.
func isPrefix(q, p []string) bool {
	if len(q) > len(p) {
		return false
	}
	for i := range q {
		if q[i] != p[i] {
			return false
		}
	}
	return true
}

// put returns dst with v at path, making the maps and lists on the way
// after src's (in which path exists); no path put before is below path.
func put(dst, src any, path []string, v any) any {
	if len(path) == 0 {
		return v
	}
	switch s := src.(type) {
	case map[string]any:
		d, _ := dst.(map[string]any)
		if d == nil {
			d = map[string]any{}
		}
		d[path[0]] = put(d[path[0]], s[path[0]], path[1:], v)
		return d
	case []any:
		i, _ := index(path[0], len(s))
		d, _ := dst.([]any)
		for len(d) <= i {
			d = append(d, nil)
		}
		d[i] = put(d[i], s[i], path[1:], v)
		return d
	}
	return v
}
