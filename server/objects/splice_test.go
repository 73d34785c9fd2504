package objects

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestWithResourceVersion: splicing the resourceVersion into an encoded
// object gives exactly the bytes of encoding the object with it.
func TestWithResourceVersion(t *testing.T) {
	objects := []map[string]any{
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a", "namespace": "ns", "uid": "u"}, "data": map[string]any{"resourceVersion": "x"}},
		{"metadata": map[string]any{}},
		{"metadata": map[string]any{"name": "only"}},
		{"metadata": map[string]any{"uid": "after"}},
		{"metadata": map[string]any{"annotations": map[string]any{"a}\"{": "b\\\"}"}, "labels": map[string]any{"x": "y"}, "managedFields": []any{map[string]any{"f": []any{1, 2.5, true, nil}}}}, "spec": map[string]any{"k": "v"}},
		{"a": []any{"]", map[string]any{"metadata": 1}}, "metadata": map[string]any{"generation": 3, "selfLink": "s", "zz": "z"}},
	}
	for i, obj := range objects {
		stored, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		rev := rand.Int64N(1 << 40)
		obj["metadata"].(map[string]any)["resourceVersion"] = strconv.FormatInt(rev, 10)
		want, _ := json.Marshal(obj)
		if got := withResourceVersion(stored, rev); string(got) != string(want) {
			t.Errorf("object %d: got\n%s\nwant\n%s", i, got, want)
		}
	}
	for _, bad := range []string{``, `[]`, `{"kind":"x"}`, `{"metadata":"x"}`, `{"metadata":{"resourceVersion":"1"}}`, `{"metadata":{"a":`, `{"metadata":{"a\"b":1}}`} {
		if got := withResourceVersion([]byte(bad), 7); got != nil {
			t.Errorf("withResourceVersion(%q) = %q, want nil", bad, got)
		}
	}
}
