package client

// A minimal JSON scanner that finds an object's identity (metadata
// namespace, name, uid, resourceVersion) without decoding or allocating,
// so a cache can compare a listed object with what it holds for almost no
// cost. Anything unusual (escapes in those fields, a malformed document)
// makes it give up; callers then decode properly.

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
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case '\\':
			escaped = true
			p.i += 2
			continue
		case '"':
			s = p.b[start:p.i]
			p.i++
			return s, escaped, true
		}
		p.i++
	}
	return nil, false, false
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
func peekMeta(data []byte) (m RawMeta, ok bool) {
	p := &peeker{b: data}
	found := false
	ok = p.members(func(key []byte) (bool, bool) {
		if string(key) != "metadata" {
			return true, p.skip()
		}
		found = true
		ok := p.members(func(key []byte) (bool, bool) {
			var dst *[]byte
			switch string(key) {
			case "namespace":
				dst = &m.Namespace
			case "name":
				dst = &m.Name
			case "uid":
				dst = &m.UID
			case "resourceVersion":
				dst = &m.ResourceVersion
			default:
				return true, p.skip()
			}
			if p.peek() != '"' {
				return true, p.skip() // null
			}
			s, escaped, ok := p.str()
			*dst = s
			return true, ok && !escaped
		})
		return false, ok // the rest of the object does not matter
	})
	return m, ok && found
}
