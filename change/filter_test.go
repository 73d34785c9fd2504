package change_test

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/change"
)

func TestParsePattern(t *testing.T) {
	valid := []string{
		"spec", "spec.replicas", "metadata.labels.*", "spec.containers[*].image",
		"spec.containers[name=web].image", `spec.containers[name="my web"]`, "args[0]", "a[0][1].b",
		`metadata.labels["app.kubernetes.io/name"]`, `["*"]`, `[""]`, `["a.b"].c`, "status.conditions[type=Ready].status",
		"x.80", "a-b/c_d$e@f", "[*]", "[name=a.b:c]",
	}
	for _, s := range valid {
		p, err := change.ParsePattern(s)
		if err != nil {
			t.Errorf("ParsePattern(%q) = %v", s, err)
			continue
		}
		if p.String() != s {
			t.Errorf("ParsePattern(%q).String() = %q", s, p.String())
		}
	}
	invalid := []string{
		"", ".", "a.", ".a", "a..b", "a b", "a.b c", "app.kubernetes.io/name x", "a[", "a[*", "a[0", "a[x]", "a[=v]",
		`a["x`, `a["x"`, "a[name=]", "a[name=a b]", "a]", "a.[0]", "a[0]b", `a[name="x"`, "a[-1]",
	}
	for _, s := range invalid {
		if _, err := change.ParsePattern(s); !errors.Is(err, change.ErrPattern) {
			t.Errorf("ParsePattern(%q) = %v, want ErrPattern", s, err)
		}
	}
}

func TestPathString(t *testing.T) {
	tests := []struct {
		path change.Path
		want string
	}{
		{nil, ""},
		{change.Path{{Field: "spec"}, {Field: "replicas"}}, "spec.replicas"},
		{change.Path{{Field: "metadata"}, {Field: "labels"}, {Field: "app.kubernetes.io/name"}}, `metadata.labels["app.kubernetes.io/name"]`},
		{change.Path{{Field: "c"}, {Item: true, Index: 2, MergeKey: "name", MergeValue: "web"}, {Field: "image"}}, "c[name=web].image"},
		{change.Path{{Field: "c"}, {Item: true, Index: 2, MergeKey: "name", MergeValue: "a]b"}}, `c[name="a]b"]`},
		{change.Path{{Item: true, Index: 0}, {Item: true, Index: 1}, {Field: "x"}}, "[0][1].x"},
		{change.Path{{Field: ""}, {Field: "*"}, {Field: `"`}}, `[""]["*"]["\""]`},
	}
	for _, tt := range tests {
		if got := tt.path.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.path, got, tt.want)
		}
	}
}

func TestFilter(t *testing.T) {
	old := obj(`{"metadata":{"labels":{"app":"web"},"annotations":{"a":"1"}},
		"spec":{"replicas":1,"containers":[{"name":"web","image":"nginx:1","ports":[{"containerPort":80}]}]}}`)
	tests := []struct {
		name     string
		new      string
		patterns []string
		want     bool
	}{
		{"field", `{"metadata":{"labels":{"app":"web"},"annotations":{"a":"1"}},"spec":{"replicas":2,"containers":[{"name":"web","image":"nginx:1","ports":[{"containerPort":80}]}]}}`,
			[]string{"spec.replicas"}, true},
		{"parent", `{"metadata":{"labels":{"app":"web"},"annotations":{"a":"1"}},"spec":{"replicas":2,"containers":[{"name":"web","image":"nginx:1","ports":[{"containerPort":80}]}]}}`,
			[]string{"spec"}, true},
		{"other field", `{"metadata":{"labels":{"app":"web"},"annotations":{"a":"1"}},"spec":{"replicas":2,"containers":[{"name":"web","image":"nginx:1","ports":[{"containerPort":80}]}]}}`,
			[]string{"metadata", "spec.containers"}, false},
		{"label wildcard", `{"metadata":{"labels":{"app":"api"},"annotations":{"a":"1"}},"spec":{"replicas":1,"containers":[{"name":"web","image":"nginx:1","ports":[{"containerPort":80}]}]}}`,
			[]string{"metadata.labels.*"}, true},
		{"label added", `{"metadata":{"labels":{"app":"web","x":"y"},"annotations":{"a":"1"}},"spec":{"replicas":1,"containers":[{"name":"web","image":"nginx:1","ports":[{"containerPort":80}]}]}}`,
			[]string{"metadata.labels.*"}, true},
		{"annotation is no label", `{"metadata":{"labels":{"app":"web"},"annotations":{"a":"2"}},"spec":{"replicas":1,"containers":[{"name":"web","image":"nginx:1","ports":[{"containerPort":80}]}]}}`,
			[]string{"metadata.labels.*"}, false},
		{"image", `{"metadata":{"labels":{"app":"web"},"annotations":{"a":"1"}},"spec":{"replicas":1,"containers":[{"name":"web","image":"nginx:2","ports":[{"containerPort":80}]}]}}`,
			[]string{"spec.containers[*].image"}, true},
		{"image by name", `{"metadata":{"labels":{"app":"web"},"annotations":{"a":"1"}},"spec":{"replicas":1,"containers":[{"name":"web","image":"nginx:2","ports":[{"containerPort":80}]}]}}`,
			[]string{"spec.containers[name=web].image"}, true},
		{"image by index", `{"metadata":{"labels":{"app":"web"},"annotations":{"a":"1"}},"spec":{"replicas":1,"containers":[{"name":"web","image":"nginx:2","ports":[{"containerPort":80}]}]}}`,
			[]string{"spec.containers[0].image"}, true},
		{"image of another", `{"metadata":{"labels":{"app":"web"},"annotations":{"a":"1"}},"spec":{"replicas":1,"containers":[{"name":"web","image":"nginx:2","ports":[{"containerPort":80}]}]}}`,
			[]string{"spec.containers[name=log].image", "spec.containers[1].image"}, false},
		{"port is no image", `{"metadata":{"labels":{"app":"web"},"annotations":{"a":"1"}},"spec":{"replicas":1,"containers":[{"name":"web","image":"nginx:1","ports":[{"containerPort":81}]}]}}`,
			[]string{"spec.containers[*].image"}, false},
		{"container added with image", `{"metadata":{"labels":{"app":"web"},"annotations":{"a":"1"}},"spec":{"replicas":1,"containers":[{"name":"web","image":"nginx:1","ports":[{"containerPort":80}]},{"name":"log","image":"fluent"}]}}`,
			[]string{"spec.containers[*].image"}, true},
		{"container added without image", `{"metadata":{"labels":{"app":"web"},"annotations":{"a":"1"}},"spec":{"replicas":1,"containers":[{"name":"web","image":"nginx:1","ports":[{"containerPort":80}]},{"name":"log"}]}}`,
			[]string{"spec.containers[*].image"}, false},
		{"containers reordered", `{"metadata":{"labels":{"app":"web"},"annotations":{"a":"1"}},"spec":{"replicas":1,"containers":[{"name":"log","image":"x"},{"name":"web","image":"nginx:1","ports":[{"containerPort":80}]}]}}`,
			[]string{"spec.containers[name=web].image"}, false},
		{"spec gone", `{"metadata":{"labels":{"app":"web"},"annotations":{"a":"1"}}}`,
			[]string{"spec.containers[*].image"}, true},
		{"labels gone", `{"metadata":{"annotations":{"a":"1"}},"spec":{"replicas":1,"containers":[{"name":"web","image":"nginx:1","ports":[{"containerPort":80}]}]}}`,
			[]string{"metadata.labels.app"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := change.MustFilter(tt.patterns...)
			d := change.Between(old, obj(tt.new))
			if got := f.Match(d); got != tt.want {
				t.Errorf("Filter(%q).Match(%q) = %v, want %v", tt.patterns, d.Paths(), got, tt.want)
			}
			if got := f.Changed(old, obj(tt.new)); got != tt.want {
				t.Errorf("Filter(%q).Changed = %v, want %v", tt.patterns, got, tt.want)
			}
			if got := len(f.Changes(d)) > 0; got != tt.want {
				t.Errorf("Filter(%q).Changes = %v", tt.patterns, f.Changes(d))
			}
		})
	}
	var none *change.Filter
	if !none.Match(change.Between(old, obj(`{}`))) || none.Match(change.Between(old, old)) {
		t.Errorf("nil Filter must match every non-empty diff")
	}
	if _, err := change.NewFilter("a..b"); !errors.Is(err, change.ErrPattern) {
		t.Errorf("NewFilter(a..b) = %v, want ErrPattern", err)
	}
}

// TestFilterProperties checks filters against an independent definition on
// random objects: a pattern matches a diff iff a value it names differs
// between old and new.
func TestFilterProperties(t *testing.T) {
	g := newGen(t, 7)
	checked, matched := 0, 0
	for i := range 4000 {
		old := g.object(3)
		new, ok := g.mutate(old).(map[string]any)
		if !ok {
			continue
		}
		d := change.Between(old, new)
		for range 4 {
			segs := g.pattern(old, new)
			if len(segs) == 0 {
				continue
			}
			want, decided := oracle(segs, old, true, new, true)
			if !decided {
				continue
			}
			checked++
			if want {
				matched++
			}
			text := renderPattern(segs)
			f, err := change.NewFilter(text)
			if err != nil {
				t.Fatalf("NewFilter(%q) = %v", text, err)
			}
			if got := f.Match(d); got != want {
				t.Fatalf("run %d: Filter(%s).Match = %v, want %v\nold: %s\nnew: %s\npaths: %q",
					i, text, got, want, mustJSON(t, old), mustJSON(t, new), d.Paths())
			}
		}
	}
	if checked < 5000 || matched < checked/10 || matched > checked*9/10 {
		t.Errorf("%d patterns decided, %d matched: the test tests too little", checked, matched)
	}
	t.Logf("%d patterns decided, %d matched", checked, matched)
}

type tseg struct {
	kind       byte // 'f' field, '*' any field, 'i' any item, 'k' keyed
	field      string
	key, value string
}

func renderPattern(segs []tseg) string {
	var b strings.Builder
	for _, s := range segs {
		switch s.kind {
		case 'f':
			b.WriteString("[" + strconv.Quote(s.field) + "]")
		case '*':
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString("*")
		case 'i':
			b.WriteString("[*]")
		case 'k':
			b.WriteString("[" + s.key + "=" + strconv.Quote(s.value) + "]")
		}
	}
	return b.String()
}

// pattern returns a pattern along a random path of old or new.
func (g gen) pattern(old, new any) []tseg {
	v := old
	if g.r.IntN(2) == 0 {
		v = new
	}
	var segs []tseg
	for g.r.IntN(5) > 0 {
		switch x := v.(type) {
		case map[string]any:
			keys := sortedKeys(x)
			if len(keys) == 0 {
				return segs
			}
			k := keys[g.r.IntN(len(keys))]
			if g.r.IntN(4) == 0 {
				segs = append(segs, tseg{kind: '*'})
			} else {
				segs = append(segs, tseg{kind: 'f', field: k})
			}
			v = x[k]
		case []any:
			if len(x) == 0 {
				return segs
			}
			it := x[g.r.IntN(len(x))]
			if m, ok := it.(map[string]any); ok && g.r.IntN(2) == 0 {
				if name, ok := m["name"].(string); ok {
					segs = append(segs, tseg{kind: 'k', key: "name", value: name})
					v = it
					continue
				}
			}
			segs = append(segs, tseg{kind: 'i'})
			v = it
		default:
			return segs
		}
	}
	return segs
}

// oracle decides whether anything the pattern names differs between a and
// b, pairing list items as the diff does (by merge key where both lists
// are keyed); it gives up (false second result) where item identity
// depends on how the diff aligns positional lists or on item order.
func oracle(segs []tseg, a any, aok bool, b any, bok bool) (bool, bool) {
	if !aok && !bok {
		return false, true
	}
	if len(segs) == 0 {
		return aok != bok || !reflect.DeepEqual(a, b), true
	}
	s, rest := segs[0], segs[1:]
	ma, _ := a.(map[string]any)
	mb, _ := b.(map[string]any)
	la, isla := a.([]any)
	lb, islb := b.([]any)
	if !aok {
		ma, la, isla = nil, nil, false
	}
	if !bok {
		mb, lb, islb = nil, nil, false
	}
	anyOf := func(pairs [][4]any) (bool, bool) {
		decided := true
		for _, p := range pairs {
			r, ok := oracle(rest, p[0], p[1].(bool), p[2], p[3].(bool))
			if ok && r {
				return true, true
			}
			decided = decided && ok
		}
		return false, decided
	}
	switch s.kind {
	case 'f':
		va, oka := ma[s.field]
		vb, okb := mb[s.field]
		return oracle(rest, va, oka, vb, okb)
	case '*':
		var pairs [][4]any
		for k, va := range ma {
			vb, okb := mb[k]
			pairs = append(pairs, [4]any{va, true, vb, okb})
		}
		for k, vb := range mb {
			if _, oka := ma[k]; !oka {
				pairs = append(pairs, [4]any{nil, false, vb, true})
			}
		}
		return anyOf(pairs)
	}
	if isla && islb {
		key := mergeKeyOf(la, lb)
		if key == "" {
			if s.kind == 'i' && len(rest) == 0 {
				return !reflect.DeepEqual(la, lb), true
			}
			return false, false
		}
		if s.kind == 'k' && s.key != key || !sameOrder(la, lb, key) {
			return false, false
		}
		var pairs [][4]any
		for _, ia := range la {
			name := ia.(map[string]any)[key]
			if s.kind == 'k' && name != s.value {
				continue
			}
			ib, okb := findItem(lb, key, name)
			pairs = append(pairs, [4]any{ia, true, ib, okb})
		}
		for _, ib := range lb {
			name := ib.(map[string]any)[key]
			if s.kind == 'k' && name != s.value {
				continue
			}
			if _, oka := findItem(la, key, name); !oka {
				pairs = append(pairs, [4]any{nil, false, ib, true})
			}
		}
		return anyOf(pairs)
	}
	// At most one side is a list: its items against nothing.
	var pairs [][4]any
	for _, side := range []struct {
		l     []any
		isNew bool
	}{{la, false}, {lb, true}} {
		for _, it := range side.l {
			if s.kind == 'k' {
				m, ok := it.(map[string]any)
				if !ok || m[s.key] != s.value {
					continue
				}
			}
			if side.isNew {
				pairs = append(pairs, [4]any{nil, false, it, true})
			} else {
				pairs = append(pairs, [4]any{it, true, nil, false})
			}
			if s.kind == 'k' {
				break // the first item with that key
			}
		}
	}
	return anyOf(pairs)
}

// mergeKeyOf applies the diff's merge key rule to two lists.
func mergeKeyOf(la, lb []any) string {
	for _, key := range change.DefaultMergeKeys {
		ok := true
		for _, l := range [][]any{la, lb} {
			seen := map[string]bool{}
			for _, it := range l {
				m, isMap := it.(map[string]any)
				v, isStr := m[key].(string)
				if !isMap || !isStr || seen[v] {
					ok = false
				}
				seen[v] = true
			}
		}
		if ok {
			return key
		}
	}
	return ""
}

// sameOrder reports whether the items both keyed lists have are in the
// same order in both (so the diff moves nothing).
func sameOrder(la, lb []any, key string) bool {
	var oa, ob []any
	for _, it := range la {
		if _, ok := findItem(lb, key, it.(map[string]any)[key]); ok {
			oa = append(oa, it.(map[string]any)[key])
		}
	}
	for _, it := range lb {
		if _, ok := findItem(la, key, it.(map[string]any)[key]); ok {
			ob = append(ob, it.(map[string]any)[key])
		}
	}
	return slices.Equal(oa, ob)
}

func findItem(l []any, key string, name any) (any, bool) {
	for _, it := range l {
		if it.(map[string]any)[key] == name {
			return it, true
		}
	}
	return nil, false
}

func TestCategories(t *testing.T) {
	cats, err := change.NewCategories("other", map[string]string{
		"spec.replicas":                          "scaling",
		"spec.template.spec.containers[*].image": "rollout",
		"spec.template":                          "template",
		"metadata.labels.*":                      "labels",
		"metadata.labels.team":                   "ownership",
	})
	if err != nil {
		t.Fatal(err)
	}
	base := `{"metadata":{"labels":{"app":"web","team":"a"}},"spec":{"replicas":1,"template":{"spec":{"containers":[{"name":"web","image":"v1"}]}}}}`
	tests := []struct {
		name string
		new  string
		want []string
	}{
		{"nothing", base, nil},
		{"replicas", `{"metadata":{"labels":{"app":"web","team":"a"}},"spec":{"replicas":2,"template":{"spec":{"containers":[{"name":"web","image":"v1"}]}}}}`,
			[]string{"scaling"}},
		{"image is more specific than template", `{"metadata":{"labels":{"app":"web","team":"a"}},"spec":{"replicas":1,"template":{"spec":{"containers":[{"name":"web","image":"v2"}]}}}}`,
			[]string{"rollout"}},
		{"other template field", `{"metadata":{"labels":{"app":"web","team":"a"}},"spec":{"replicas":1,"template":{"spec":{"containers":[{"name":"web","image":"v1","args":["x"]}]}}}}`,
			[]string{"template"}},
		{"label", `{"metadata":{"labels":{"app":"api","team":"b"}},"spec":{"replicas":1,"template":{"spec":{"containers":[{"name":"web","image":"v1"}]}}}}`,
			[]string{"labels", "ownership"}},
		{"unlabelled field", `{"metadata":{"labels":{"app":"web","team":"a"}},"spec":{"replicas":1,"paused":true,"template":{"spec":{"containers":[{"name":"web","image":"v1"}]}}}}`,
			[]string{"other"}},
		{"spec replaced", `{"metadata":{"labels":{"app":"web","team":"a"}},"spec":null}`,
			[]string{"other", "rollout", "scaling", "template"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cats.Of(change.Between(obj(base), obj(tt.new))); !slices.Equal(got, tt.want) {
				t.Errorf("Of() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPatternMatch(t *testing.T) {
	c := func(op change.Op, path string, old, new any) change.Change {
		t.Helper()
		var p change.Path
		for _, part := range strings.Split(path, ".") {
			if part == "" {
				continue
			}
			if i, err := strconv.Atoi(part); err == nil {
				p = append(p, change.Segment{Item: true, Index: i})
			} else if k, v, ok := strings.Cut(part, "="); ok {
				p = append(p, change.Segment{Item: true, MergeKey: k, MergeValue: v})
			} else {
				p = append(p, change.Segment{Field: part})
			}
		}
		return change.Change{Path: p, Op: op, Old: old, New: new}
	}
	tests := []struct {
		pattern string
		change  change.Change
		want    bool
	}{
		{"a.b", c(change.OpReplace, "a.b", 1, 2), true},
		{"a", c(change.OpReplace, "a.b", 1, 2), true},
		{"a.b.c", c(change.OpReplace, "a.b", 1, 2), false},
		{"a.b.c", c(change.OpReplace, "a.b", obj(`{"c":1}`), obj(`{"c":2}`)), true},
		{"a.b.c", c(change.OpReplace, "a.b", obj(`{"c":1}`), obj(`{"c":1,"d":1}`)), false},
		{"a.*", c(change.OpAdd, "a.x", nil, 1), true},
		{"*.x", c(change.OpAdd, "a.x", nil, 1), true},
		{"a[*]", c(change.OpAdd, "a.x", nil, 1), false},
		{"l[*].x", c(change.OpRemove, "l.3", obj(`{"x":1}`), nil), true},
		{"l[3]", c(change.OpRemove, "l.3", 1, nil), true},
		{"l[2]", c(change.OpRemove, "l.3", 1, nil), false},
		{"l[name=a]", c(change.OpMove, "l.name=a", 0, 1), true},
		{"l[name=a].x", c(change.OpMove, "l.name=a", 0, 1), false},
		{"l[name=b]", c(change.OpMove, "l.name=a", 0, 1), false},
		{"l[name=a].x", c(change.OpAdd, "l", nil, []any{obj(`{"name":"a","x":1}`)}), true},
		{"l[name=b].x", c(change.OpAdd, "l", nil, []any{obj(`{"name":"a","x":1}`)}), false},
	}
	for _, tt := range tests {
		if got := change.MustPattern(tt.pattern).Match(tt.change); got != tt.want {
			t.Errorf("Pattern(%q).Match(%s %s) = %v, want %v", tt.pattern, tt.change.Op, tt.change.Path, got, tt.want)
		}
	}
}
