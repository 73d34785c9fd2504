package change_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// gen makes random JSON-like objects (nested maps, lists, scalars) and
// related pairs of them, for property tests. Member names include the
// characters JSON pointers and paths must escape.
type gen struct{ r *rand.Rand }

func newGen(t testing.TB, seed uint64) gen {
	t.Helper()
	return gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

var genNames = []string{"a", "b", "c", "spec", "name", "type", "x.y", "a/b", "t~n", "~1", "/", "", "[0]", "*", "with space", "ü", "80", `q"`}

func (g gen) name() string { return genNames[g.r.IntN(len(genNames))] }

func (g gen) scalar() any {
	switch g.r.IntN(6) {
	case 0:
		return nil
	case 1:
		return g.r.IntN(2) == 0
	case 2:
		return int64(g.r.IntN(2000) - 1000)
	case 3:
		return float64(g.r.IntN(1000)) + 0.5
	default:
		return g.name() + fmt.Sprint(g.r.IntN(3))
	}
}

func (g gen) value(depth int) any {
	if depth <= 0 {
		return g.scalar()
	}
	switch g.r.IntN(8) {
	case 0, 1:
		return g.object(depth - 1)
	case 2:
		return g.keyedList(depth - 1)
	case 3:
		l := make([]any, g.r.IntN(5))
		for i := range l {
			l[i] = g.value(depth - 1)
		}
		return l
	case 4:
		l := make([]any, g.r.IntN(5))
		for i := range l {
			l[i] = g.scalar()
		}
		return l
	default:
		return g.scalar()
	}
}

func (g gen) object(depth int) map[string]any {
	m := map[string]any{}
	for range g.r.IntN(5) {
		m[g.name()] = g.value(depth)
	}
	return m
}

// keyedList returns a list of objects with unique "name"s.
func (g gen) keyedList(depth int) []any {
	n := g.r.IntN(5)
	names := g.r.Perm(8)[:n]
	l := make([]any, n)
	for i := range l {
		m := g.object(depth)
		m["name"] = fmt.Sprintf("item%d", names[i])
		l[i] = m
	}
	return l
}

// mutate returns a changed deep copy of v: a few random edits anywhere.
func (g gen) mutate(v any) any {
	v = deepCopy(v)
	for range 1 + g.r.IntN(4) {
		v = g.edit(v, 0)
	}
	return v
}

func (g gen) edit(v any, depth int) any {
	switch v := v.(type) {
	case map[string]any:
		keys := sortedKeys(v)
		if len(keys) > 0 && g.r.IntN(3) > 0 {
			k := keys[g.r.IntN(len(keys))]
			v[k] = g.edit(v[k], depth+1)
			return v
		}
		switch g.r.IntN(3) {
		case 0:
			v[g.name()] = g.value(2)
		case 1:
			if len(keys) > 0 {
				delete(v, keys[g.r.IntN(len(keys))])
			}
		default:
			return g.value(2)
		}
		return v
	case []any:
		if len(v) > 0 && g.r.IntN(3) > 0 {
			i := g.r.IntN(len(v))
			v[i] = g.edit(v[i], depth+1)
			return v
		}
		switch g.r.IntN(4) {
		case 0: // insert, keeping names unique in keyed lists
			item := g.value(1)
			if isKeyed(v) {
				m := g.object(1)
				m["name"] = fmt.Sprintf("new%d", g.r.IntN(1000))
				item = m
			}
			i := g.r.IntN(len(v) + 1)
			return slices.Insert(v, i, item)
		case 1:
			if len(v) > 0 {
				i := g.r.IntN(len(v))
				return slices.Delete(v, i, i+1)
			}
		case 2: // reorder
			g.r.Shuffle(len(v), func(i, j int) { v[i], v[j] = v[j], v[i] })
		default:
			return g.value(2)
		}
		return v
	default:
		if g.r.IntN(4) == 0 {
			return g.value(2)
		}
		return g.scalar()
	}
}

func isKeyed(l []any) bool {
	for _, v := range l {
		if m, ok := v.(map[string]any); !ok || m["name"] == nil {
			return false
		}
	}
	return len(l) > 0
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		l := make([]any, len(v))
		for i, x := range v {
			l[i] = deepCopy(x)
		}
		return l
	}
	return v
}

// jsonValue returns v as encoding/json decodes it (float64 numbers), to
// compare documents.
func jsonValue(t testing.TB, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("json.Marshal: %v", err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("json.Unmarshal: %v", err)
	}
	return out
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("json.Marshal: %v", err)
	}
	return data
}
