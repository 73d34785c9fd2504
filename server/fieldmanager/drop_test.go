package fieldmanager_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/objwatch/objwatch/server/fieldmanager"
)

func TestDropsManagedFields(t *testing.T) {
	for v, want := range map[string]bool{
		"metadata.managedFields":                 true,
		"spec.x+metadata.managedFields":          true,
		" metadata.managedFields ":               true,
		"":                                       false,
		"metadata":                               false,
		"metadata.managedfields":                 false,
		"metadata.managedFields.x+spec.whatever": false,
	} {
		if got := fieldmanager.DropsManagedFields(v); got != want {
			t.Errorf("DropsManagedFields(%q) = %v", v, got)
		}
	}
}

// FuzzDropManagedFieldsJSON: the JSON way of dropping managedFields agrees
// with decoding the object and deleting them, and keeps large integers.
func FuzzDropManagedFieldsJSON(f *testing.F) {
	f.Add([]byte(`{"kind":"ConfigMap","metadata":{"name":"a","managedFields":[{"manager":"m"}]},"data":{"n":"1"}}`))
	f.Add([]byte(`{"metadata":{"managedFields":null},"spec":{"big":123456789012345678901234567890}}`))
	f.Add([]byte(`{"metadata":"managedFields"}`))
	f.Add([]byte(`{"metadata":{},"x":"\"managedFields\""}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := fieldmanager.DropManagedFieldsJSON(b)
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if !json.Valid(b) || dec.Decode(&m) != nil {
			return // not one JSON object: either answer is fine
		}
		if err != nil {
			if _, ok := m["metadata"].(map[string]any); ok {
				t.Fatalf("DropManagedFieldsJSON(%s): %v", b, err)
			}
			return
		}
		want := fieldmanager.WithoutManagedFields(m)
		var got map[string]any
		dec = json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("output %s of %s does not decode: %v", out, b, err)
		}
		w, _ := json.Marshal(want)
		g, _ := json.Marshal(got)
		if !bytes.Equal(w, g) {
			t.Fatalf("DropManagedFieldsJSON(%s) = %s, want %s", b, g, w)
		}
	})
}
