package jsonenc

import "bytes"

// Scanning encoded JSON without decoding it, for the hot paths that find
// a member of a stored object (the resourceVersion splice, list items
// without their type): ReadKey and SkipValue. They assume well-formed
// JSON (what this server encoded) and report what they cannot read
// rather than validate.

// ReadKey reads the object key at raw[i], a string without
// escapes (ok is false for one with escapes: the caller decodes instead),
// and the index just after it.
func ReadKey(raw []byte, i int) (key []byte, after int, ok bool) {
	if i >= len(raw) || raw[i] != '"' {
		return nil, 0, false
	}
	j := bytes.IndexByte(raw[i+1:], '"')
	if j < 0 || bytes.IndexByte(raw[i+1:i+1+j], '\\') >= 0 {
		return nil, 0, false
	}
	return raw[i+1 : i+1+j], i + j + 2, true
}

// SkipValue returns the index just after the JSON value at raw[i]. Strings
// are skipped a quote at a time (bytes.IndexByte), which is most of an
// object's bytes.
func SkipValue(raw []byte, i int) (int, bool) {
	if i >= len(raw) {
		return 0, false
	}
	switch raw[i] {
	case '"':
		return skipString(raw, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(raw); j++ {
			switch raw[j] {
			case '"':
				end, ok := skipString(raw, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	default: // number, true, false, null
		j := i
		for j < len(raw) {
			switch raw[j] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return j, j > i
			}
			j++
		}
		return j, j > i
	}
}

// skipString returns the index just after the string at raw[i].
func skipString(raw []byte, i int) (int, bool) {
	j := i + 1
	for {
		q := bytes.IndexByte(raw[j:], '"')
		if q < 0 {
			return 0, false
		}
		q += j
		bs := 0 // backslashes right before the quote
		for k := q - 1; k > i && raw[k] == '\\'; k-- {
			bs++
		}
		if bs%2 == 0 {
			return q + 1, true
		}
		j = q + 1
	}
}
