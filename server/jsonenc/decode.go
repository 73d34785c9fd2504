package jsonenc

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDecodeDepth bounds the nesting Decode follows itself; deeper input is
// left to the caller's decoder (encoding/json's limit is 10,000).
const maxDecodeDepth = 512

// Decode decodes one JSON object as k8s.io/apimachinery's json.Unmarshal
// does into a map[string]any (sigs.k8s.io/json, case-sensitive, integers
// kept as int64, other numbers float64, the last of duplicate keys kept),
// without reflection. ok is false for anything it does not decode exactly
// as that decoder would: invalid JSON, but also valid input it leaves
// alone (invalid UTF-8 or a lone surrogate in a string, which that decoder
// replaces with U+FFFD; nesting deeper than 512): the caller then decodes
// with apimachinery, which also gives invalid input its error message.
// FuzzDecode checks it against apimachinery.
func Decode(b []byte) (_ map[string]any, ok bool) {
	d := decoder{b: b}
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != '{' {
		return nil, false
	}
	v, ok := d.object(0)
	if !ok {
		return nil, false
	}
	if d.space(); d.i != len(d.b) {
		return nil, false
	}
	return v, true
}

type decoder struct {
	b []byte
	i int
}

func (d *decoder) space() { d.i = skipSpace(d.b, d.i) }

func (d *decoder) value(depth int) (any, bool) {
	d.space()
	if d.i >= len(d.b) {
		return nil, false
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object(depth + 1)
	case c == '[':
		return d.array(depth + 1)
	case c == '"':
		return d.string()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	}
	return nil, false
}

func (d *decoder) literal(lit string) bool {
	if !hasLiteral(d.b, d.i, lit) {
		return false
	}
	d.i += len(lit)
	return true
}

// object decodes an object whose '{' is at d.i.
func (d *decoder) object(depth int) (map[string]any, bool) {
	if depth > maxDecodeDepth {
		return nil, false
	}
	d.i++ // '{'
	m := map[string]any{}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return m, true
	}
	for {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, false
		}
		k, ok := d.string()
		if !ok {
			return nil, false
		}
		if d.space(); d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, false
		}
		d.i++
		v, ok := d.value(depth)
		if !ok {
			return nil, false
		}
		m[k] = v
		if d.space(); d.i >= len(d.b) {
			return nil, false
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			return m, true
		default:
			return nil, false
		}
	}
}

// array decodes an array whose '[' is at d.i.
func (d *decoder) array(depth int) ([]any, bool) {
	if depth > maxDecodeDepth {
		return nil, false
	}
	d.i++ // '['
	l := []any{}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return l, true
	}
	for {
		v, ok := d.value(depth)
		if !ok {
			return nil, false
		}
		l = append(l, v)
		if d.space(); d.i >= len(d.b) {
			return nil, false
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case ']':
			d.i++
			return l, true
		default:
			return nil, false
		}
	}
}

// string decodes a string whose '"' is at d.i.
func (d *decoder) string() (string, bool) {
	d.i++ // '"'
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			if !utf8.Valid(s) {
				return "", false
			}
			return string(s), true
		case c == '\\':
			return d.escaped(start)
		case c < 0x20:
			return "", false
		}
		d.i++
	}
	return "", false
}

// escaped decodes the rest of a string that has an escape at d.i; start
// is where its content began.
func (d *decoder) escaped(start int) (string, bool) {
	out := append([]byte(nil), d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			if !utf8.Valid(out) {
				return "", false
			}
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			d.i++
			continue
		}
		if d.i+1 >= len(d.b) {
			return "", false
		}
		switch e := d.b[d.i+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := d.hex4(d.i + 2)
			if !ok {
				return "", false
			}
			d.i += 6
			if utf16.IsSurrogate(r) {
				if d.i+1 >= len(d.b) || d.b[d.i] != '\\' || d.b[d.i+1] != 'u' {
					return "", false // a lone surrogate: apimachinery writes U+FFFD
				}
				r2, ok := d.hex4(d.i + 2)
				if !ok {
					return "", false
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return "", false
				}
				d.i += 6
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return "", false
		}
		d.i += 2
	}
	return "", false
}

func (d *decoder) hex4(at int) (rune, bool) {
	if at+4 > len(d.b) {
		return 0, false
	}
	var r rune
	for _, c := range d.b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number decodes a JSON number at d.i: int64 when it is an integer that
// fits, else float64 (as sigs.k8s.io/json's PreserveInts).
func (d *decoder) number() (any, bool) {
	end, integer, ok := numberEnd(d.b, d.i)
	if !ok {
		return nil, false
	}
	s := d.b[d.i:end]
	d.i = end
	if integer && len(s) <= 18 { // fits int64 without overflow checks
		var n int64
		neg := s[0] == '-'
		if neg {
			s = s[1:]
		}
		for _, c := range s {
			n = n*10 + int64(c-'0')
		}
		if neg {
			n = -n
		}
		return n, true
	}
	str := string(s)
	if integer {
		if n, err := strconv.ParseInt(str, 10, 64); err == nil {
			return n, true
		}
	}
	f, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return nil, false // out of float64's range: apimachinery refuses it
	}
	return f, true
}
