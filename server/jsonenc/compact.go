package jsonenc

// AppendCompact appends src, one JSON text, as encoding/json embeds it
// as a json.RawMessage (and kube-apiserver's audit records hold request
// and response bodies): insignificant whitespace removed, <, >, &,
// U+2028 and U+2029 escaped, everything else byte for byte. ok is false,
// and dst returned as it was, when src is not valid JSON as json.Compact
// judges it (its nesting limit included; strings are not checked for
// valid UTF-8, as json.Compact does not check them).
//
// It does in one pass what json.Compact and json.HTMLEscape do in two,
// and walks a string's plain bytes without a state machine: a record of
// a request at level RequestResponse spent half its encoding in them.
func AppendCompact(dst, src []byte) (_ []byte, ok bool) {
	c := compactor{src: src, dst: dst}
	c.space()
	if !c.value(0) {
		return dst, false
	}
	if c.space(); c.i != len(src) {
		return dst, false
	}
	return c.dst, true
}

// maxNesting is encoding/json's limit on nested objects and arrays.
const maxNesting = 10000

type compactor struct {
	src, dst []byte
	i        int // the next byte of src
}

// inString are the bytes a string's fast path copies as they are: not
// its end, an escape, a control character, an HTML character or the
// first byte of U+2028 and U+2029.
var inString = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' && c != 0xE2
	}
	return t
}()

func (c *compactor) space() { c.i = skipSpace(c.src, c.i) }

// skipSpace returns the index after the insignificant whitespace at i.
func skipSpace(s []byte, i int) int {
	for ; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return i
		}
	}
	return i
}

func (c *compactor) is(b byte) bool { return c.i < len(c.src) && c.src[c.i] == b }

// take copies the next byte, b, and the space after it.
func (c *compactor) take(b byte) {
	c.dst = append(c.dst, b)
	c.i++
	c.space()
}

func (c *compactor) value(depth int) bool {
	if c.i >= len(c.src) {
		return false
	}
	switch b := c.src[c.i]; {
	case b == '{' || b == '[':
		if depth >= maxNesting {
			return false
		}
		return c.container(b, depth+1)
	case b == '"':
		return c.string()
	case b == 't':
		return c.literal("true")
	case b == 'f':
		return c.literal("false")
	case b == 'n':
		return c.literal("null")
	case b == '-' || '0' <= b && b <= '9':
		return c.number()
	}
	return false
}

// container copies an object or an array, open its first byte.
func (c *compactor) container(open byte, depth int) bool {
	end := byte(']')
	if open == '{' {
		end = '}'
	}
	c.take(open)
	if c.is(end) {
		c.take(end)
		return true
	}
	for {
		if open == '{' {
			if !c.is('"') || !c.string() {
				return false
			}
			if c.space(); !c.is(':') {
				return false
			}
			c.take(':')
		}
		if !c.value(depth) {
			return false
		}
		switch c.space(); {
		case c.is(','):
			c.take(',')
		case c.is(end):
			c.take(end)
			return true
		default:
			return false
		}
	}
}

func (c *compactor) string() bool {
	s := c.src
	start := c.i
	for i := c.i + 1; i < len(s); {
		if inString[s[i]] {
			i++
			continue
		}
		switch b := s[i]; {
		case b == '"':
			c.dst = append(c.dst, s[start:i+1]...)
			c.i = i + 1
			return true
		case b == '\\':
			n := escapeLen(s[i:])
			if n == 0 {
				return false
			}
			i += n
		case b < 0x20:
			return false
		case b == '<' || b == '>' || b == '&':
			c.dst = append(c.dst, s[start:i]...)
			c.dst = append(c.dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			i++
			start = i
		case i+2 < len(s) && s[i+1] == 0x80 && s[i+2]&^1 == 0xA8: // U+2028, U+2029
			c.dst = append(c.dst, s[start:i]...)
			c.dst = append(c.dst, '\\', 'u', '2', '0', '2', hex[s[i+2]&0xF])
			i += 3
			start = i
		default: // 0xE2 starting another character
			i++
		}
	}
	return false
}

// escapeLen is the length of the escape sequence e starts with; 0 if it
// is not one.
func escapeLen(e []byte) int {
	if len(e) < 2 {
		return 0
	}
	switch e[1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
		if len(e) < 6 {
			return 0
		}
		for _, h := range e[2:6] {
			if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
				return 0
			}
		}
		return 6
	}
	return 0
}

func (c *compactor) literal(lit string) bool {
	if !hasLiteral(c.src, c.i, lit) {
		return false
	}
	c.dst = append(c.dst, lit...)
	c.i += len(lit)
	return true
}

// hasLiteral reports whether lit is at s[i:].
func hasLiteral(s []byte, i int, lit string) bool {
	return len(s)-i >= len(lit) && string(s[i:i+len(lit)]) == lit
}

// number copies a number.
func (c *compactor) number() bool {
	end, _, ok := numberEnd(c.src, c.i)
	if !ok {
		return false
	}
	c.dst = append(c.dst, c.src[c.i:end]...)
	c.i = end
	return true
}

// numberEnd scans the number at i,
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and returns the index
// after it and whether it has neither fraction nor exponent.
func numberEnd(s []byte, i int) (end int, integer, ok bool) {
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && '1' <= s[i] && s[i] <= '9':
		i = digits(s, i)
	default:
		return 0, false, false
	}
	integer = true
	if i < len(s) && s[i] == '.' {
		if i++; i >= len(s) || !isDigit(s[i]) {
			return 0, false, false
		}
		i, integer = digits(s, i), false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		if i++; i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || !isDigit(s[i]) {
			return 0, false, false
		}
		i, integer = digits(s, i), false
	}
	return i, integer, true
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// digits returns the index after the run of digits at i.
func digits(s []byte, i int) int {
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}
