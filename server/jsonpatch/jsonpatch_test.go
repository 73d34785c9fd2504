package jsonpatch

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/objwatch/objwatch/change/fieldmask"
	"github.com/objwatch/objwatch/server/jsonenc"
)

// check applies Diff(from, to) to from with an independent RFC 6902
// implementation and compares the result with to.
func check(t *testing.T, from, to map[string]any) []Op {
	t.Helper()
	ops := Diff(from, to)
	patch, ok := Append(nil, ops)
	if !ok {
		t.Fatalf("Append(%v) failed", ops)
	}
	fb, _ := json.Marshal(from)
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("patch %s does not decode: %v", patch, err)
	}
	got, err := p.Apply(fb)
	if err != nil {
		t.Fatalf("patch %s does not apply to %s: %v", patch, fb, err)
	}
	var g, w any
	json.Unmarshal(got, &g)
	tb, _ := json.Marshal(to)
	json.Unmarshal(tb, &w)
	if !fieldmask.Equal(g, w) {
		t.Fatalf("patch %s applied to %s gives %s, want %s", patch, fb, got, tb)
	}
	return ops
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	m, ok := jsonenc.Decode([]byte(s))
	if !ok {
		t.Fatalf("bad JSON %s", s)
	}
	return m
}

func TestDiff(t *testing.T) {
	for _, c := range []struct {
		from, to string
		ops      int
	}{
		{`{}`, `{}`, 0},
		{`{"a":1}`, `{"a":1.0}`, 0},
		{`{"a":1}`, `{"a":2}`, 1},
		{`{"a":{"b":[1,2,3]}}`, `{"a":{"b":[1,5,3]}}`, 1},
		{`{"a":{"b":[1,2,3]}}`, `{"a":{"b":[1,2]}}`, 1},
		{`{"a":{"b":[{"x":1},{"y":2}]}}`, `{"a":{"b":[{"x":1,"z":0},{}]}}`, 2},
		{`{"a/b":{"c~d":1}}`, `{"a/b":{"c~d":2,"e":null}}`, 2},
		{`{"a":null}`, `{}`, 1},
		{`{"a":"1"}`, `{"a":1}`, 1},
		{`{"n":9007199254740993}`, `{"n":9007199254740992}`, 1},
		{`{"metadata":{"name":"x"},"status":{"conditions":[{"type":"Ready","lastHeartbeatTime":"t1"}]}}`,
			`{"metadata":{"name":"x"},"status":{"conditions":[{"type":"Ready","lastHeartbeatTime":"t2"}]}}`, 1},
	} {
		ops := check(t, decode(t, c.from), decode(t, c.to))
		if len(ops) != c.ops {
			t.Errorf("Diff(%s, %s) = %d operations %v, want %d", c.from, c.to, len(ops), ops, c.ops)
		}
	}
}

// TestDiffRandom: random objects and random edits of them.
func TestDiffRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		from := randomObject(r, 3)
		to := edit(r, from, 3).(map[string]any)
		check(t, from, to)
	}
}

func randomValue(r *rand.Rand, depth int) any {
	switch n := r.IntN(7); {
	case depth > 0 && n == 0:
		return randomObject(r, depth-1)
	case depth > 0 && n == 1:
		l := make([]any, r.IntN(4))
		for i := range l {
			l[i] = randomValue(r, depth-1)
		}
		return l
	case n == 2:
		return int64(r.IntN(5))
	case n == 3:
		return r.IntN(2) == 0
	case n == 4:
		return nil
	}
	return "s" + strconv.Itoa(r.IntN(3))
}

func randomObject(r *rand.Rand, depth int) map[string]any {
	m := map[string]any{}
	for range r.IntN(5) {
		m[[]string{"a", "b", "c/d", "e~f", ""}[r.IntN(5)]] = randomValue(r, depth)
	}
	return m
}

// edit returns a copy of v with random changes.
func edit(r *rand.Rand, v any, depth int) any {
	switch x := v.(type) {
	case map[string]any:
		m := map[string]any{}
		for k, e := range x {
			switch r.IntN(5) {
			case 0: // removed
			case 1:
				m[k] = randomValue(r, depth)
			default:
				m[k] = edit(r, e, depth-1)
			}
		}
		if r.IntN(3) == 0 {
			m["n"+strconv.Itoa(r.IntN(3))] = randomValue(r, depth)
		}
		return m
	case []any:
		if r.IntN(4) == 0 {
			return append(append([]any{}, x...), randomValue(r, depth))
		}
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = edit(r, e, depth-1)
		}
		return l
	}
	if r.IntN(3) == 0 {
		return randomValue(r, depth)
	}
	return v
}

// FuzzDiff: for any two JSON objects, the patch applied to the first
// gives the second.
func FuzzDiff(f *testing.F) {
	f.Add(`{"a":[1,{"b":2}]}`, `{"a":[1,{"b":3}],"c":"/~"}`)
	f.Add(`{}`, `{"a":{}}`)
	f.Fuzz(func(t *testing.T, a, b string) {
		from, ok1 := jsonenc.Decode([]byte(a))
		to, ok2 := jsonenc.Decode([]byte(b))
		if !ok1 || !ok2 {
			return
		}
		if _, ok := Append(nil, []Op{{Op: "add", Path: "", Value: to}}); !ok {
			return // a number JSON cannot hold
		}
		check(t, from, to)
	})
}
