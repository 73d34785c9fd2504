package fieldmask

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	sigsjson "sigs.k8s.io/json"
)

func decodeJSON(t testing.TB, s string) any {
	t.Helper()
	var v any
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts([]byte(s), &v); err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return v
}

func TestPatchApply(t *testing.T) {
	doc := `{"metadata":{"name":"a","resourceVersion":"1","labels":{"x":"1"}},"data":{"k":"v","a/b":"c"},"list":[1,2,{"n":3}]}`
	for _, c := range []struct {
		patch, want, err string
	}{
		{patch: `[{"op":"replace","path":"/data/k","value":"w"}]`,
			want: `{"metadata":{"name":"a","resourceVersion":"1","labels":{"x":"1"}},"data":{"k":"w","a/b":"c"},"list":[1,2,{"n":3}]}`},
		{patch: `[{"op":"add","path":"/data/new","value":{"deep":[true,null]}},{"op":"remove","path":"/data/a~1b"},{"op":"replace","path":"/metadata/resourceVersion","value":"2"}]`,
			want: `{"metadata":{"name":"a","resourceVersion":"2","labels":{"x":"1"}},"data":{"k":"v","new":{"deep":[true,null]}},"list":[1,2,{"n":3}]}`},
		{patch: `[{"op":"add","path":"/list/0","value":0},{"op":"add","path":"/list/-","value":9},{"op":"remove","path":"/list/1"},{"op":"replace","path":"/list/2/n","value":4.5}]`,
			want: `{"metadata":{"name":"a","resourceVersion":"1","labels":{"x":"1"}},"data":{"k":"v","a/b":"c"},"list":[0,2,{"n":4.5},9]}`},
		{patch: `[{"op":"add","path":"/data/x","value":{}},{"op":"add","path":"/data/x/y","value":1}]`,
			want: `{"metadata":{"name":"a","resourceVersion":"1","labels":{"x":"1"}},"data":{"k":"v","a/b":"c","x":{"y":1}},"list":[1,2,{"n":3}]}`},
		{patch: `[{"op":"replace","path":"","value":{"a":1}}]`, want: `{"a":1}`},
		{patch: `[]`, want: doc},
		{patch: `[{"op":"replace","path":"/data/none","value":1}]`, err: "path not found"},
		{patch: `[{"op":"remove","path":"/data/none"}]`, err: "path not found"},
		{patch: `[{"op":"add","path":"/none/x","value":1}]`, err: "path not found"},
		{patch: `[{"op":"add","path":"/list/4","value":1}]`, err: "index"},
		{patch: `[{"op":"remove","path":"/list/-"}]`, err: "index"},
		{patch: `[{"op":"replace","path":"/list/01","value":1}]`, err: "index"},
		{patch: `[{"op":"add","path":"/data/k/x","value":1}]`, err: "not a container"},
		{patch: `[{"op":"move","from":"/a","path":"/b"}]`, err: `unsupported op "move"`},
		{patch: `[{"op":"add","path":"/a"}]`, err: "no value"},
		{patch: `[{"op":"remove"}]`, err: "no path"},
		{patch: `[{"op":"remove","path":""}]`, err: "whole document"},
		{patch: `[{"op":"remove","path":"a"}]`, err: "does not start with /"},
		{patch: `{"op":"remove"}`, err: "json patch"},
	} {
		before := decodeJSON(t, doc)
		orig := decodeJSON(t, doc)
		p, err := ParsePatch([]byte(c.patch))
		var got any
		if err == nil {
			got, err = p.Apply(before)
		}
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one with %q", c.patch, err, c.err)
			}
		} else if err != nil {
			t.Errorf("%s: %v", c.patch, err)
		} else if want := decodeJSON(t, c.want); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %v\nwant %v", c.patch, got, want)
		}
		if !reflect.DeepEqual(before, orig) {
			t.Errorf("%s: Apply modified its document: %v", c.patch, before)
		}
	}
}

// TestPatchApplySharesUnchanged checks copy-on-write: what a patch does
// not touch is the original document's, not a copy.
func TestPatchApplySharesUnchanged(t *testing.T) {
	doc := decodeJSON(t, `{"status":{"big":{"a":1},"small":1},"spec":{"x":1}}`).(map[string]any)
	p, err := ParsePatch([]byte(`[{"op":"replace","path":"/status/small","value":2}]`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Apply(doc)
	if err != nil {
		t.Fatal(err)
	}
	m := got.(map[string]any)
	same := func(a, b any) bool { return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer() }
	if !same(m["spec"], doc["spec"]) || !same(m["status"].(map[string]any)["big"], doc["status"].(map[string]any)["big"]) {
		t.Error("untouched maps were copied")
	}
	if same(m["status"], doc["status"]) || doc["status"].(map[string]any)["small"] != int64(1) {
		t.Error("the patched map is the original's")
	}
}

func TestPatchWithout(t *testing.T) {
	p, err := ParsePatch([]byte(`[{"op":"remove","path":"/metadata/managedFields/0"},{"op":"replace","path":"/metadata/managedFieldsX","value":1},{"op":"replace","path":"/metadata/managedFields","value":[]}]`))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Without("metadata", "managedFields").Paths(); !reflect.DeepEqual(got, []string{"/metadata/managedFieldsX"}) {
		t.Errorf("Without: %v", got)
	}
}

// FuzzPatch checks ParsePatch and Apply against evanphx/json-patch: a
// patch Apply accepts gives that library's result, and the document is
// never modified.
func FuzzPatch(f *testing.F) {
	f.Add(`{"a":{"b":[1,2]},"c":"d"}`, `[{"op":"add","path":"/a/b/1","value":3},{"op":"remove","path":"/c"}]`)
	f.Add(`{"a":[]}`, `[{"op":"add","path":"/a/-","value":{"x":null}},{"op":"replace","path":"/a/0/x","value":1.5}]`)
	f.Add(`{"a~b":{"c/d":1}}`, `[{"op":"replace","path":"/a~0b/c~1d","value":"x"}]`)
	f.Add(`[1]`, `[{"op":"replace","path":"","value":2}]`)
	f.Fuzz(func(t *testing.T, docText, patchText string) {
		var doc any
		if sigsjson.UnmarshalCaseSensitivePreserveInts([]byte(docText), &doc) != nil {
			return
		}
		p, err := ParsePatch([]byte(patchText))
		if err != nil {
			return
		}
		before, _ := json.Marshal(doc)
		got, err := p.Apply(doc)
		if after, _ := json.Marshal(doc); string(after) != string(before) {
			t.Fatalf("Apply modified its document: %s to %s", before, after)
		}
		if err != nil {
			return
		}
		ref, err := jsonpatch.DecodePatch([]byte(patchText))
		if err != nil {
			t.Fatalf("ParsePatch accepted %s, evanphx refused: %v", patchText, err)
		}
		want, err := ref.Apply(before)
		if err != nil {
			return // evanphx refuses what RFC 6902 allows (e.g. replace of the root)
		}
		gotJSON, _ := json.Marshal(got)
		var a, b any
		_ = json.Unmarshal(gotJSON, &a)
		_ = json.Unmarshal(want, &b)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("doc %s patch %s: got %s, evanphx %s", before, patchText, gotJSON, want)
		}
	})
}
