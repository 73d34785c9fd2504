package objects

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Encoding metadata.managedFields for storage.
//
// A tracked object's managedFields are a deep tree of small maps (every
// field an entry names is an object of its own in fieldsV1), and
// encoding/json encodes each through reflection, sorting every map's keys
// into a fresh slice: for a small ConfigMap that is as much work as the
// rest of the object. appendJSON encodes such decoded JSON values
// directly, byte for byte as encoding/json.Marshal does (FuzzAppendJSON
// checks it), and the stored form embeds its output as a json.RawMessage.

// managedFieldsForStorage replaces m's metadata.managedFields, when they
// are there and all plain JSON values, with their encoding, and returns
// what puts the decoded value back (m may be the object being written).
func managedFieldsForStorage(m map[string]any) (restore func()) {
	md, _ := m["metadata"].(map[string]any)
	mf, ok := md["managedFields"].([]any)
	if !ok {
		return func() {}
	}
	b, ok := appendJSON(make([]byte, 0, 512), mf)
	if !ok {
		return func() {}
	}
	md["managedFields"] = json.RawMessage(b)
	return func() { md["managedFields"] = mf }
}

// appendJSON appends v's JSON encoding, as encoding/json.Marshal encodes
// it (keys sorted, HTML characters escaped), to dst. v is a decoded JSON
// value: maps of string keys, slices, strings, bools, int64 and float64
// numbers and nil. It returns false for any other type, or a number JSON
// cannot hold, leaving those to encoding/json.
func appendJSON(dst []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), true
	case string:
		return appendString(dst, v), true
	case bool:
		return strconv.AppendBool(dst, v), true
	case int64:
		return strconv.AppendInt(dst, v, 10), true
	case float64:
		return appendFloat(dst, v)
	case map[string]any:
		if v == nil {
			return append(dst, "null"...), true
		}
		if len(v) == 0 {
			return append(dst, "{}"...), true
		}
		var buf [16]string
		keys := buf[:0]
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			var ok bool
			if dst, ok = appendJSON(dst, v[k]); !ok {
				return dst, false
			}
		}
		return append(dst, '}'), true
	case []any:
		if v == nil {
			return append(dst, "null"...), true
		}
		dst = append(dst, '[')
		for i, e := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var ok bool
			if dst, ok = appendJSON(dst, e); !ok {
				return dst, false
			}
		}
		return append(dst, ']'), true
	}
	return dst, false
}

// appendFloat formats f as encoding/json does (ES6 number formatting).
func appendFloat(dst []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 is written e-9.
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

const hex = "0123456789abcdef"

// appendString quotes s as encoding/json does with HTML escaping: ", \
// and control characters escaped, <, > and & as \u00XX, invalid UTF-8 as
// \ufffd, U+2028 and U+2029 as \u2028 and \u2029.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// setManagedFields sets obj's metadata.managedFields to mf itself (where
// unstructured.SetNestedField would set a deep copy).
func setManagedFields(obj *unstructured.Unstructured, mf any) {
	md, ok := obj.Object["metadata"].(map[string]any)
	if !ok {
		md = map[string]any{}
		obj.Object["metadata"] = md
	}
	md["managedFields"] = mf
}
