package fieldmask

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	long := "/" + strings.Repeat("a", MaxPointerLength)
	many := strings.TrimSuffix(strings.Repeat("/a,", MaxPointers+1), ",")
	for _, c := range []struct {
		in   []string
		want [][]string // segments; nil: an error
		err  string
	}{
		{in: []string{"/spec/replicas"}, want: [][]string{{"spec", "replicas"}}},
		{in: []string{"/metadata/annotations/example.com~1weight,/a~0b"}, want: [][]string{{"metadata", "annotations", "example.com/weight"}, {"a~b"}}},
		{in: []string{"/a", "/b,/c"}, want: [][]string{{"a"}, {"b"}, {"c"}}},
		{in: []string{"/"}, want: [][]string{{""}}},
		{in: []string{"/a//b"}, want: [][]string{{"a", "", "b"}}},
		{in: []string{"/~01"}, want: [][]string{{"~1"}}},
		{in: nil, err: "no pointers"},
		{in: []string{""}, err: "empty pointer"},
		{in: []string{"/a,"}, err: "empty pointer"},
		{in: []string{"spec"}, err: "does not start with /"},
		{in: []string{"/a~2"}, err: "~ not followed"},
		{in: []string{"/a~"}, err: "~ not followed"},
		{in: []string{long}, err: "longer than"},
		{in: []string{many}, err: "more than 100"},
	} {
		m, err := Parse(c.in...)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Parse(%q) = %v, want an error with %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		var got [][]string
		for _, p := range m.pointers {
			got = append(got, p.segments)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Parse(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if _, err := Parse(); !errors.Is(err, ErrEmpty) {
		t.Errorf("Parse() = %v, want ErrEmpty", err)
	}
	if m, err := Parse(strings.TrimSuffix(strings.Repeat("/a,", MaxPointers), ",")); err != nil || m.Len() != MaxPointers {
		t.Errorf("Parse of %d pointers = %d, %v; want them all", MaxPointers, m.Len(), err)
	}
}

func obj(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestChanged(t *testing.T) {
	base := `{"metadata":{"name":"a","annotations":{"example.com/weight":"1"}},"spec":{"replicas":1,"template":{"containers":[{"name":"c","image":"x"}]}},"status":{"ready":1}}`
	for _, c := range []struct {
		mask, new string
		want      bool
	}{
		{"/spec/replicas", `{"metadata":{"name":"a"},"spec":{"replicas":1},"status":{"ready":2}}`, false},
		{"/spec/replicas", `{"spec":{"replicas":2}}`, true},
		{"/spec", `{"spec":{"replicas":1,"template":{"containers":[{"name":"c","image":"y"}]}}}`, true},
		{"/spec/template/containers/0/image", `{"spec":{"template":{"containers":[{"name":"c","image":"y"}]}}}`, true},
		{"/spec/template/containers/1/image", `{"spec":{"template":{"containers":[{"name":"c","image":"y"}]}}}`, false},
		{"/metadata/annotations/example.com~1weight", `{"metadata":{"annotations":{"example.com/weight":"1"}}}`, false},
		{"/metadata/annotations/example.com~1weight", `{"metadata":{"annotations":{}}}`, true},
		{"/missing", `{}`, false},
		{"/status/ready,/spec/replicas", `{"spec":{"replicas":1},"status":{"ready":3}}`, true},
	} {
		m, err := Parse(c.mask)
		if err != nil {
			t.Fatal(err)
		}
		old, new := obj(t, base), obj(t, c.new)
		// Masks look only at their pointers: copy the rest from old.
		for k, v := range old {
			if _, ok := new[k]; !ok && k != "spec" && k != "status" && k != "metadata" {
				new[k] = v
			}
		}
		if got := m.Changed(old, new); got != c.want {
			t.Errorf("mask %s, %s -> %s: Changed = %v, want %v", c.mask, base, c.new, got, c.want)
		}
	}
	// Numbers compare by value across their Go types.
	m, _ := Parse("/n")
	if m.Changed(map[string]any{"n": int64(2)}, map[string]any{"n": float64(2)}) {
		t.Error("int64 2 and float64 2 compared as different")
	}
	if !m.Changed(map[string]any{"n": int64(2)}, map[string]any{"n": "2"}) {
		t.Error("2 and \"2\" compared as equal")
	}
}

func TestProject(t *testing.T) {
	o := obj(t, `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a","namespace":"n","uid":"u","resourceVersion":"5","generation":2,"labels":{"x":"y"},"annotations":{"k/w":"1","o":"2"}},"spec":{"replicas":3,"paused":false,"template":{"spec":{"containers":[{"name":"c","image":"i"}]}}},"status":{"ready":1}}`)
	m, err := Parse("/spec/replicas,/metadata/annotations/k~1w,/spec/template/spec/containers/0/image,/nothing/here")
	if err != nil {
		t.Fatal(err)
	}
	got := m.Project(o)
	want := obj(t, `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a","namespace":"n","uid":"u","resourceVersion":"5","generation":2,"annotations":{"k/w":"1"}},"spec":{"replicas":3,"template":{"spec":{"containers":[{"image":"i"}]}}}}`)
	if !reflect.DeepEqual(got, want) {
		gb, _ := json.Marshal(got)
		t.Errorf("Project = %s", gb)
	}
	// A whole subtree and a pointer below it: the subtree, and obj is not
	// written to.
	before, _ := json.Marshal(o)
	m, _ = Parse("/spec,/spec/replicas")
	got = m.Project(o)
	if !reflect.DeepEqual(got["spec"], o["spec"]) {
		t.Errorf("Project(/spec,/spec/replicas).spec = %v, want all of spec", got["spec"])
	}
	if after, _ := json.Marshal(o); string(after) != string(before) {
		t.Errorf("Project changed its object:\n%s\n%s", before, after)
	}
}

// TestProjectDependsOnMaskedValuesOnly: versions of an object whose masked
// values are equal project alike, whatever else differs (what a watch that
// sends patches of projections needs); lists on the way hold the masked
// elements at their indices.
func TestProjectDependsOnMaskedValuesOnly(t *testing.T) {
	m, err := Parse("/metadata/annotations/a,/spec/list/1/x,/spec/list/1/y")
	if err != nil {
		t.Fatal(err)
	}
	a := obj(t, `{"metadata":{"name":"o","annotations":{"b":"1"}},"spec":{"list":[{"x":1},{"x":2,"z":3}],"other":1}}`)
	b := obj(t, `{"metadata":{"name":"o"},"spec":{"list":[{"x":9},{"x":2},{"x":4}]}}`)
	pa, pb := m.Project(a), m.Project(b)
	if !reflect.DeepEqual(pa, pb) {
		ja, _ := json.Marshal(pa)
		jb, _ := json.Marshal(pb)
		t.Errorf("projections of equal masked values differ:\n%s\n%s", ja, jb)
	}
	want := obj(t, `{"metadata":{"name":"o"},"spec":{"list":[null,{"x":2}]}}`)
	if !reflect.DeepEqual(pa, want) {
		ja, _ := json.Marshal(pa)
		t.Errorf("Project = %s", ja)
	}
	// A masked value that changes changes the projection.
	c := obj(t, `{"metadata":{"name":"o"},"spec":{"list":[{},{"x":2,"y":true}]}}`)
	if reflect.DeepEqual(m.Project(c), pa) || !m.Changed(a, c) {
		t.Error("a changed masked value left the projection or Changed as it was")
	}
}

// FuzzParse: Parse never panics, and a mask it accepts prints as a string
// that parses to the same pointers.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"/spec/replicas", "/a~0b,/c~1d", "", "/", "a", "/~", "/a,,/b", "/0/-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(m.String())
		if err != nil {
			t.Fatalf("Parse(%q) accepted, its String %q refused: %v", s, m.String(), err)
		}
		if !reflect.DeepEqual(m, again) {
			t.Fatalf("Parse(%q) = %v, Parse(String()) = %v", s, m, again)
		}
		m.Changed(map[string]any{"a": []any{1.0}}, nil)
		m.Project(map[string]any{"a": map[string]any{"b": []any{"c"}}})
	})
}
