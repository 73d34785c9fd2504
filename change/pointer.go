package change

import (
	"strconv"
	"strings"
)

// MaskPointer returns the RFC 6901 JSON Pointer of the pattern's longest
// prefix without wildcards or keyed items, for a server's field mask
// (issue 26's fieldMask): every change the pattern matches is at or below
// that pointer, or above it (changing what it names), so a watch masked by
// it misses none of them, though it may carry changes the pattern does
// not match. ok is false when the prefix is empty (the pattern starts
// with a wildcard) or holds a comma, which a mask cannot carry.
func (p Pattern) MaskPointer() (ptr string, ok bool) {
	var b strings.Builder
	for _, s := range p.segs {
		var tok string
		switch s.kind {
		case pField:
			tok = s.field
		case pIndex:
			tok = strconv.Itoa(s.index)
		default:
			return b.String(), b.Len() > 0
		}
		if strings.Contains(tok, ",") {
			return b.String(), b.Len() > 0
		}
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(tok))
	}
	return b.String(), b.Len() > 0
}

// MaskPointers returns MaskPointer of each pattern; ok is false if one
// has none (then no mask covers the filter).
func (f *Filter) MaskPointers() (ptrs []string, ok bool) {
	for _, p := range f.patterns {
		ptr, ok := p.MaskPointer()
		if !ok {
			return nil, false
		}
		ptrs = append(ptrs, ptr)
	}
	return ptrs, len(ptrs) > 0
}
