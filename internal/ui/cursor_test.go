package ui

import (
	"testing"
)

// FuzzSplitCursor: a cursor a hub event writes reads back as the same
// resourceVersion and index, and no input makes splitCursor panic.
func FuzzSplitCursor(f *testing.F) {
	for _, s := range []string{"123", "123.2", "a.b.3", ".", "12.0", "12.-1", ""} {
		f.Add(s, 1)
	}
	f.Fuzz(func(t *testing.T, rv string, sub int) {
		splitCursor(rv)
		if sub < 0 {
			sub = -sub
		}
		if sub < 0 {
			return
		}
		e := hubEvent{rv: rv, sub: sub}
		gotRV, gotSub := splitCursor(e.cursor())
		if sub == 0 {
			// A resourceVersion ending in ".N" reads as event N of the
			// part before: resourceVersions of Kubernetes servers are
			// opaque but never contain a dot followed by digits only.
			return
		}
		if gotRV != rv || gotSub != sub {
			t.Fatalf("cursor %q of (%q, %d) reads as (%q, %d)", e.cursor(), rv, sub, gotRV, gotSub)
		}
	})
}
