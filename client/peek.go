package client

import (
	"bytes"
	"unicode/utf8"
)

// A minimal JSON scanner that finds an object's identity (metadata
// namespace, name, uid, resourceVersion) without decoding or allocating,
// so a cache can compare a listed object with what it holds for almost no
// cost. Anything unusual (escapes or repeats in those fields, a malformed
// document) makes it give up; callers then decode properly.

// RawMeta is an object's identity as slices of its JSON bytes: valid as
// long as the Raw it came from.
type RawMeta struct {
	Namespace, Name, UID, ResourceVersion []byte
}

type peeker struct {
	b []byte
	i int
}

func (p *peeker) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *peeker) peek() byte {
	p.ws()
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

// str reads a string and returns its raw content; escaped reports a
// backslash in it.
func (p *peeker) str() (s []byte, escaped, ok bool) {
	if p.peek() != '"' {
		return nil, false, false
	}
	p.i++
	start := p.i
	for {
		end := bytes.IndexByte(p.b[p.i:], '"')
		if end < 0 {
			return nil, false, false
		}
		end += p.i
		bs := bytes.IndexByte(p.b[p.i:end], '\\')
		if bs < 0 {
			p.i = end + 1
			return p.b[start:end], escaped, true
		}
		escaped = true
		p.i += bs + 2 // the backslash and the character it escapes
		if p.i > len(p.b) {
			return nil, false, false
		}
	}
}

// null reads a null.
func (p *peeker) null() bool {
	if p.peek() != 'n' || !bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		return false
	}
	p.i += len("null")
	return true
}

// skip skips one value of any kind.
func (p *peeker) skip() bool {
	switch p.peek() {
	case '"':
		_, _, ok := p.str()
		return ok
	case '{', '[':
		depth := 0
		for p.i < len(p.b) {
			switch p.b[p.i] {
			case '"':
				if _, _, ok := p.str(); !ok {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					p.i++
					return true
				}
			}
			p.i++
		}
		return false
	case 0:
		return false
	default: // number, true, false, null
		for p.i < len(p.b) {
			switch p.b[p.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return true
			}
			p.i++
		}
		return true
	}
}

// members calls fn for each member of an object, positioned at its value;
// fn consumes the value and returns false to stop early.
func (p *peeker) members(fn func(key []byte) (more, ok bool)) bool {
	if p.peek() != '{' {
		return false
	}
	p.i++
	if p.peek() == '}' {
		p.i++
		return true
	}
	for {
		key, escaped, ok := p.str()
		if !ok || escaped || p.peek() != ':' {
			return false
		}
		p.i++
		more, ok := fn(key)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return true
		default:
			return false
		}
	}
}

// peekMeta finds the identity fields; ok is false if it cannot be sure.
// It reads the whole top-level object, so that a second "metadata"
// (which decoders would merge into or put in place of the first) makes it
// give up, like an identity field given twice, of another type than
// string or null, escaped, or not valid UTF-8 (which decoders replace).
// Nested values are skipped, not validated: data must be JSON, as callers'
// decoders have checked.
func peekMeta(data []byte) (m RawMeta, ok bool) {
	p := &peeker{b: data}
	found := false
	ok = p.members(func(key []byte) (bool, bool) {
		if string(key) != "metadata" {
			return true, p.skip()
		}
		if found {
			return false, false
		}
		found = true
		var seen [4]bool
		return true, p.members(func(key []byte) (bool, bool) {
			var dst *[]byte
			var i int
			switch string(key) {
			case "namespace":
				dst, i = &m.Namespace, 0
			case "name":
				dst, i = &m.Name, 1
			case "uid":
				dst, i = &m.UID, 2
			case "resourceVersion":
				dst, i = &m.ResourceVersion, 3
			default:
				return true, p.skip()
			}
			if seen[i] {
				return false, false
			}
			seen[i] = true
			if p.peek() != '"' {
				// null decodes to nothing; any other type is not an
				// identity, and decoding reports it.
				return true, p.null()
			}
			s, escaped, ok := p.str()
			*dst = s
			return true, ok && !escaped && utf8.Valid(s)
		})
	})
	return m, ok && found
}
