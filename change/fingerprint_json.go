package change

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// errSlowPath: the JSON text has something the scanner leaves to the
// decoder (invalid UTF-8 or surrogates, which decoding replaces).
var errSlowPath = errors.New("use the decoder")

// hashJSON hashes JSON text as hash would hash its decoded value, without
// decoding it: an informer can fingerprint an event before decoding it.
func (h *hasher) hashJSON(data []byte) (uint64, error) {
	s := scanner{h: h, data: data}
	s.space()
	sum, err := s.value(1<<len(h.exclude)-1, 0)
	if err != nil {
		return 0, err
	}
	if s.space(); s.pos != len(s.data) {
		return 0, s.errorf("data after the value")
	}
	return sum, nil
}

// keyedPatterns reports whether patterns name items by merge key, which
// the scanner cannot apply: it would need the item decoded.
func keyedPatterns(patterns []Pattern) bool {
	for _, p := range patterns {
		for _, s := range p.segs {
			if s.kind == pKeyed {
				return true
			}
		}
	}
	return false
}

type scanner struct {
	h    *hasher
	data []byte
	pos  int
}

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("json at %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *scanner) space() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *scanner) literal(lit string) bool {
	if len(s.data)-s.pos >= len(lit) && string(s.data[s.pos:s.pos+len(lit)]) == lit {
		s.pos += len(lit)
		return true
	}
	return false
}

// value hashes the value at s.pos; see hasher.hash for live and depth.
func (s *scanner) value(live uint64, depth int) (uint64, error) {
	if s.pos >= len(s.data) {
		return 0, s.errorf("unexpected end")
	}
	h := s.h
	start := len(h.buf)
	defer func() { h.buf = h.buf[:start] }()
	switch c := s.data[s.pos]; {
	case c == 'n' && s.literal("null"):
		return hashNull, nil
	case c == 't' && s.literal("true"):
		return hashTrue, nil
	case c == 'f' && s.literal("false"):
		return hashFalse, nil
	case c == '"':
		h.buf = append(h.buf, 's')
		if err := s.str(); err != nil {
			return 0, err
		}
	case c == '-' || '0' <= c && c <= '9':
		num, err := s.number()
		if err != nil {
			return 0, err
		}
		if num.isInt {
			h.buf = binary.LittleEndian.AppendUint64(append(h.buf, 'i'), uint64(num.i))
		} else {
			h.buf = binary.LittleEndian.AppendUint64(append(h.buf, 'd'), math.Float64bits(num.f))
		}
	case c == '[':
		s.pos++
		h.buf = binary.LittleEndian.AppendUint64(append(h.buf, 'a'), 0)
		count := 0
		for i := 0; ; i++ {
			s.space()
			if s.pos < len(s.data) && s.data[s.pos] == ']' && i == 0 {
				s.pos++
				break
			}
			cl, skip := h.itemLive(live, depth, i, null)
			var ch uint64
			var err error
			if skip {
				err = s.skip()
			} else {
				ch, err = s.value(cl, depth+1)
			}
			if err != nil {
				return 0, err
			}
			if !skip {
				h.buf = binary.LittleEndian.AppendUint64(h.buf, ch)
				count++
			}
			s.space()
			if s.pos < len(s.data) && s.data[s.pos] == ',' {
				s.pos++
				continue
			}
			if s.pos < len(s.data) && s.data[s.pos] == ']' {
				s.pos++
				break
			}
			return 0, s.errorf("want , or ]")
		}
		binary.LittleEndian.PutUint64(h.buf[start+1:], uint64(count))
	case c == '{':
		s.pos++
		var sum, count uint64
		for i := 0; ; i++ {
			s.space()
			if s.pos < len(s.data) && s.data[s.pos] == '}' && i == 0 {
				s.pos++
				break
			}
			if s.pos >= len(s.data) || s.data[s.pos] != '"' {
				return 0, s.errorf("want a member name")
			}
			at := len(h.buf)
			if err := s.str(); err != nil {
				return 0, err
			}
			s.space()
			if s.pos >= len(s.data) || s.data[s.pos] != ':' {
				return 0, s.errorf("want :")
			}
			s.pos++
			s.space()
			cl, skip := h.fieldLive(live, depth, string(h.buf[at:])) // no allocation
			if skip {
				if err := s.skip(); err != nil {
					return 0, err
				}
				h.buf = h.buf[:at]
			} else {
				ch, err := s.value(cl, depth+1)
				if err != nil {
					return 0, err
				}
				// The name is still in h.buf[at:]: hash name, value.
				h.buf = binary.LittleEndian.AppendUint64(h.buf, ch)
				sum += xxhash.Sum64(h.buf[at:])
				h.buf = h.buf[:at]
				count++
			}
			s.space()
			if s.pos < len(s.data) && s.data[s.pos] == ',' {
				s.pos++
				continue
			}
			if s.pos < len(s.data) && s.data[s.pos] == '}' {
				s.pos++
				break
			}
			return 0, s.errorf("want , or }")
		}
		h.buf = binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(append(h.buf, 'o'), count), sum)
	default:
		return 0, s.errorf("unexpected %q", c)
	}
	return xxhash.Sum64(h.buf[start:]), nil
}

// str appends the string at s.pos, unescaped, to h.buf.
func (s *scanner) str() error {
	s.pos++ // "
	for {
		i := s.pos
		for i < len(s.data) && s.data[i] != '"' && s.data[i] != '\\' && s.data[i] >= 0x20 && s.data[i] < utf8.RuneSelf {
			i++
		}
		s.h.buf = append(s.h.buf, s.data[s.pos:i]...)
		s.pos = i
		if i >= len(s.data) {
			return s.errorf("unterminated string")
		}
		switch c := s.data[i]; {
		case c == '"':
			s.pos++
			return nil
		case c < 0x20:
			return s.errorf("control character in string")
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(s.data[i:])
			if r == utf8.RuneError && n == 1 {
				return errSlowPath
			}
			s.h.buf = append(s.h.buf, s.data[i:i+n]...)
			s.pos += n
		default: // backslash
			if i+1 >= len(s.data) {
				return s.errorf("unterminated escape")
			}
			s.pos += 2
			switch e := s.data[i+1]; e {
			case '"', '\\', '/':
				s.h.buf = append(s.h.buf, e)
			case 'b':
				s.h.buf = append(s.h.buf, '\b')
			case 'f':
				s.h.buf = append(s.h.buf, '\f')
			case 'n':
				s.h.buf = append(s.h.buf, '\n')
			case 'r':
				s.h.buf = append(s.h.buf, '\r')
			case 't':
				s.h.buf = append(s.h.buf, '\t')
			case 'u':
				r, ok := s.hex4()
				if !ok {
					return s.errorf("bad \\u escape")
				}
				if utf16.IsSurrogate(r) {
					// Only a valid pair decodes to itself.
					if !s.literal(`\u`) {
						return errSlowPath
					}
					r2, ok := s.hex4()
					if !ok {
						return s.errorf("bad \\u escape")
					}
					if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
						return errSlowPath
					}
				}
				s.h.buf = utf8.AppendRune(s.h.buf, r)
			default:
				return s.errorf("bad escape \\%c", e)
			}
		}
	}
}

func (s *scanner) hex4() (rune, bool) {
	if len(s.data)-s.pos < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s.data[s.pos:s.pos+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	s.pos += 4
	return rune(v), true
}

// number reads the number at s.pos as the decoder reads it.
func (s *scanner) number() (number, error) {
	start := s.pos
	isInt := true
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		if '0' <= c && c <= '9' || c == '-' || c == '+' {
			s.pos++
			continue
		}
		if c == '.' || c == 'e' || c == 'E' {
			isInt = false
			s.pos++
			continue
		}
		break
	}
	raw := s.data[start:s.pos]
	if !validNumber(raw) {
		return number{}, s.errorf("bad number %q", raw)
	}
	if isInt && len(raw) <= 18 { // fits int64: no strconv, which allocates
		neg := raw[0] == '-'
		if neg {
			raw = raw[1:]
		}
		var i int64
		for _, c := range raw {
			i = i*10 + int64(c-'0')
		}
		if neg {
			i = -i
		}
		return number{i: i, isInt: true}, nil
	}
	text := string(raw)
	if isInt {
		if i, err := strconv.ParseInt(text, 10, 64); err == nil {
			return number{i: i, isInt: true}, nil
		}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return number{}, s.errorf("bad number %q", text)
	}
	if math.IsInf(f, 0) {
		return number{}, s.errorf("number %q out of range", text)
	}
	return floatNumber(f), nil
}

// validNumber checks JSON's number grammar, which strconv is laxer than.
func validNumber(s []byte) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && '1' <= s[i] && s[i] <= '9':
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return false
		}
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return false
		}
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	}
	return i == len(s)
}

// skip passes over the value at s.pos, checking it as it goes.
func (s *scanner) skip() error {
	// Hash it into the scratch and drop the result: one scanner, one set
	// of checks.
	_, err := s.value(0, 0)
	return err
}
