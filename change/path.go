package change

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Path locates a changed value inside an object, from the root:
// spec.replicas, metadata.labels.app, spec.containers[name=web].image,
// spec.args[2]. The empty Path is the object itself.
type Path []Segment

// Segment is one step of a Path: an object member (Field) or a list item
// (Item). A list item is named by its merge key when the list has one
// (MergeKey and MergeValue set, see Differ.MergeKeys), else by Index; for
// keyed items Index is still the item's position (in the new list, or in
// the old one for removed items).
type Segment struct {
	Field      string
	Item       bool
	Index      int
	MergeKey   string
	MergeValue string
}

// String returns the path in the syntax patterns use: members joined by
// dots, list items in brackets. Members whose names are not plain (letters,
// digits, and _ - / $ @) are quoted in brackets, as in
// metadata.labels["app.kubernetes.io/name"]; merge key values that are not
// plain (plain here also allows . and :) are quoted too, as in
// [name="my app"].
func (p Path) String() string {
	var b strings.Builder
	for i, s := range p {
		switch {
		case s.Item && s.MergeKey != "":
			b.WriteByte('[')
			b.WriteString(s.MergeKey)
			b.WriteByte('=')
			writeValue(&b, s.MergeValue)
			b.WriteByte(']')
		case s.Item:
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.Index))
			b.WriteByte(']')
		case plainField(s.Field):
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.Field)
		default:
			b.WriteByte('[')
			b.WriteString(strconv.Quote(s.Field))
			b.WriteByte(']')
		}
	}
	return b.String()
}

func plainField(s string) bool {
	if s == "" || s == "*" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !plainByte(s[i]) {
			return false
		}
	}
	return true
}

func plainByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '_' || c == '-' || c == '/' || c == '$' || c == '@'
}

func plainValue(s string) bool {
	if s == "" || s == "*" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !plainByte(c) && c != '.' && c != ':' {
			return false
		}
	}
	return true
}

func writeValue(b *strings.Builder, v string) {
	if plainValue(v) {
		b.WriteString(v)
	} else {
		b.WriteString(strconv.Quote(v))
	}
}

// ErrPattern reports a malformed path pattern.
var ErrPattern = errors.New("invalid path pattern")

// Pattern is a path with optional wildcards, in the syntax of
// Path.String plus two wildcards: * for any member of an object
// (metadata.labels.*) and [*] for any item of a list
// (spec.containers[*].image). An item may be named by index ([0]) or by
// merge key ([name=web]); an index matches items named by key too, by
// their position.
//
// A pattern matches a change at its path or below it (spec matches a
// change of spec.replicas), and a change above it that changes what it
// names (spec.containers[*].image matches the addition of a container
// with an image).
type Pattern struct {
	segs []pseg
	text string
}

type pkind uint8

const (
	pField pkind = iota
	pAnyField
	pIndex
	pAnyItem
	pKeyed
)

type pseg struct {
	kind       pkind
	field      string // pField
	index      int    // pIndex
	key, value string // pKeyed
}

// ParsePattern parses a path pattern.
func ParsePattern(s string) (Pattern, error) {
	segs, err := parsePattern(s)
	if err != nil {
		return Pattern{}, fmt.Errorf("%w %q: %v", ErrPattern, s, err)
	}
	return Pattern{segs: segs, text: s}, nil
}

// MustPattern is ParsePattern for patterns known to be valid; it panics
// on an error.
func MustPattern(s string) Pattern {
	p, err := ParsePattern(s)
	if err != nil {
		panic(err)
	}
	return p
}

// String returns the pattern as it was written.
func (p Pattern) String() string { return p.text }

func parsePattern(s string) ([]pseg, error) {
	if s == "" {
		return nil, errors.New("empty")
	}
	var segs []pseg
	i := 0
	for i < len(s) {
		switch {
		case s[i] == '[':
			seg, n, err := parseBracket(s[i:])
			if err != nil {
				return nil, err
			}
			segs = append(segs, seg)
			i += n
		case s[i] == '.' && len(segs) > 0 || len(segs) == 0:
			if len(segs) > 0 {
				i++
			}
			j := i
			for j < len(s) && s[j] != '.' && s[j] != '[' {
				j++
			}
			name := s[i:j]
			switch {
			case name == "*":
				segs = append(segs, pseg{kind: pAnyField})
			case plainField(name):
				segs = append(segs, pseg{kind: pField, field: name})
			default:
				return nil, fmt.Errorf("at %d: member %q must be quoted: [%q]", i, name, name)
			}
			i = j
		default:
			return nil, fmt.Errorf("at %d: want . or [", i)
		}
	}
	return segs, nil
}

// parseBracket parses one bracketed segment at the start of s and returns
// it with its length.
func parseBracket(s string) (pseg, int, error) {
	end := func(i int) (int, error) {
		if i >= len(s) || s[i] != ']' {
			return 0, errors.New("missing ]")
		}
		return i + 1, nil
	}
	switch {
	case strings.HasPrefix(s, "[*"):
		n, err := end(2)
		return pseg{kind: pAnyItem}, n, err
	case strings.HasPrefix(s, `["`):
		q, err := strconv.QuotedPrefix(s[1:])
		if err != nil {
			return pseg{}, 0, fmt.Errorf("bad quoted member: %v", err)
		}
		name, _ := strconv.Unquote(q)
		n, err := end(1 + len(q))
		return pseg{kind: pField, field: name}, n, err
	case len(s) > 1 && '0' <= s[1] && s[1] <= '9':
		j := 1
		for j < len(s) && '0' <= s[j] && s[j] <= '9' {
			j++
		}
		idx, err := strconv.Atoi(s[1:j])
		if err != nil {
			return pseg{}, 0, fmt.Errorf("bad index: %v", err)
		}
		n, err := end(j)
		return pseg{kind: pIndex, index: idx}, n, err
	}
	eq := strings.IndexByte(s, '=')
	if eq < 0 || !plainField(s[1:eq]) {
		return pseg{}, 0, errors.New("want [*], [index], [key=value] or [\"member\"]")
	}
	key := s[1:eq]
	rest := s[eq+1:]
	if strings.HasPrefix(rest, `"`) {
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return pseg{}, 0, fmt.Errorf("bad quoted value: %v", err)
		}
		v, _ := strconv.Unquote(q)
		n, err := end(eq + 1 + len(q))
		return pseg{kind: pKeyed, key: key, value: v}, n, err
	}
	j := strings.IndexByte(rest, ']')
	if j < 0 {
		return pseg{}, 0, errors.New("missing ]")
	}
	if !plainValue(rest[:j]) {
		return pseg{}, 0, fmt.Errorf("value %q must be quoted", rest[:j])
	}
	return pseg{kind: pKeyed, key: key, value: rest[:j]}, eq + 1 + j + 1, nil
}

// matches reports whether the pattern segment names the path segment.
func (ps pseg) matches(s Segment) bool {
	switch ps.kind {
	case pField:
		return !s.Item && s.Field == ps.field
	case pAnyField:
		return !s.Item
	case pIndex:
		return s.Item && s.Index == ps.index
	case pAnyItem:
		return s.Item
	default:
		return s.Item && s.MergeKey == ps.key && s.MergeValue == ps.value
	}
}

// Match reports whether the pattern matches the change (see Pattern).
func (p Pattern) Match(c Change) bool {
	n := min(len(p.segs), len(c.Path))
	for i := range n {
		if !p.segs[i].matches(c.Path[i]) {
			return false
		}
	}
	if len(p.segs) <= len(c.Path) {
		return true
	}
	if c.Op == OpMove {
		return false // a moved item's content is unchanged
	}
	a, _ := treeNode(c.Old)
	b, _ := treeNode(c.New)
	return differs(p.segs[len(c.Path):], a, c.Op != OpAdd, b, c.Op != OpRemove)
}

// covers reports whether c is at or below a field the pattern names.
func (p Pattern) covers(c Change) bool { return len(p.segs) <= len(c.Path) && p.Match(c) }

// names reports whether the pattern names path itself: as many segments,
// each matching (Match is also true below and above it).
func (p Pattern) names(path []Segment) bool {
	if len(p.segs) != len(path) {
		return false
	}
	for i, s := range path {
		if !p.segs[i].matches(s) {
			return false
		}
	}
	return true
}

// differs reports whether anything the pattern segments name inside a
// and b (ok tells whether each is present) differs. Values that cannot be
// read count as different.
func differs(segs []pseg, a node, aok bool, b node, bok bool) bool {
	if !aok && !bok {
		return false
	}
	if len(segs) == 0 {
		if aok != bok {
			return true
		}
		eq, err := equal(a, b)
		return !eq || err != nil
	}
	s, rest := segs[0], segs[1:]
	switch s.kind {
	case pField:
		ca, oka := child(a, aok, s.field)
		cb, okb := child(b, bok, s.field)
		return differs(rest, ca, oka, cb, okb)
	case pAnyField:
		found := false
		visit := func(x node, xok bool, y node, yok, seen bool) {
			if !xok || x.k != kindObject {
				return
			}
			_ = x.each(func(k string, cx node) bool {
				cy, oky := child(y, yok, k)
				if seen && oky {
					return true // visited from the other side
				}
				found = differs(rest, cx, true, cy, oky)
				return !found
			})
		}
		visit(a, aok, b, bok, false)
		if !found {
			visit(b, bok, a, aok, true)
		}
		return found
	case pIndex:
		ca, oka := itemAt(a, aok, s.index)
		cb, okb := itemAt(b, bok, s.index)
		return differs(rest, ca, oka, cb, okb)
	case pAnyItem:
		n := 0
		if aok && a.k == kindArray {
			n = a.size()
		}
		if bok && b.k == kindArray {
			n = max(n, b.size())
		}
		for i := range n {
			ca, oka := itemAt(a, aok, i)
			cb, okb := itemAt(b, bok, i)
			if differs(rest, ca, oka, cb, okb) {
				return true
			}
		}
		return false
	default:
		ca, oka := keyedItem(a, aok, s.key, s.value)
		cb, okb := keyedItem(b, bok, s.key, s.value)
		return differs(rest, ca, oka, cb, okb)
	}
}

func child(n node, ok bool, key string) (node, bool) {
	if !ok || n.k != kindObject {
		return null, false
	}
	c, ok, err := n.member(key)
	return c, ok && err == nil
}

func itemAt(n node, ok bool, i int) (node, bool) {
	if !ok || n.k != kindArray || i >= n.size() {
		return null, false
	}
	c, err := n.at(i)
	return c, err == nil
}

func keyedItem(n node, ok bool, key, value string) (node, bool) {
	if !ok || n.k != kindArray {
		return null, false
	}
	for i := range n.size() {
		c, err := n.at(i)
		if err != nil || c.k != kindObject {
			continue
		}
		if v, ok := child(c, true, key); ok && v.k == kindString && v.str() == value {
			return c, true
		}
	}
	return null, false
}

// specificity orders patterns from general to specific: longer first,
// then fewer wildcards.
func (p Pattern) specificity() int {
	n := len(p.segs) << 16
	for _, s := range p.segs {
		if s.kind != pAnyField && s.kind != pAnyItem {
			n++
		}
	}
	return n
}
