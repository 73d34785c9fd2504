package fieldmanager_test

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/server/fieldmanager"
)

// TestFastCreateMatchesFieldManager creates ConfigMaps through a Manager
// in Verify mode, which panics where the remembered answer for a shape
// differs from apimachinery's field manager: objects of one shape with
// other values share an answer; another shape, a list, managedFields sent
// by the client or a last-applied annotation take the field manager.
func TestFastCreateMatchesFieldManager(t *testing.T) {
	m, res := verifyingConfigMaps(t)
	cm := func(name string, data map[string]any, md ...any) *unstructured.Unstructured {
		meta := map[string]any{"name": name, "namespace": "ns", "labels": map[string]any{"app": name}}
		for i := 0; i < len(md); i += 2 {
			meta[md[i].(string)] = md[i+1]
		}
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}}
	}
	steps := []struct {
		name   string
		obj    *unstructured.Unstructured
		shapes int // remembered after the create
	}{
		{"first of a shape", cm("a", map[string]any{"k": "1"}), 1},
		{"same shape, other values", cm("b", map[string]any{"k": "2"}), 1},
		{"same shape again", cm("c", map[string]any{"k": "3"}), 1},
		{"another key", cm("d", map[string]any{"other": "x"}), 2},
		{"finalizers (a list)", cm("e", map[string]any{"k": "1"}, "finalizers", []any{"x/y"}), 2},
		{"managedFields sent", cm("f", map[string]any{"k": "1"}, "managedFields", []any{map[string]any{"manager": "z", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:data": map[string]any{}}}}), 2},
		{"last-applied annotation", cm("g", map[string]any{"k": "1"}, "annotations", map[string]any{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"k":"1"}}`}), 2},
	}
	for _, st := range steps {
		got := m.Update(res, "", nil, st.obj, "kubectl")
		mf, _ := fieldmanager.ManagedFieldsOf(got)
		if len(mf) == 0 {
			t.Fatalf("%s: no managedFields", st.name)
		}
		if n := m.Shapes(); n != st.shapes {
			t.Fatalf("%s: %d shapes remembered, want %d", st.name, n, st.shapes)
		}
	}
	// The remembered answer is a copy: changing one object's entry leaves
	// the next create's alone.
	a := m.Update(res, "", nil, cm("h", map[string]any{"k": "1"}), "kubectl")
	mf, _ := fieldmanager.ManagedFieldsOf(a)
	mf[0].(map[string]any)["fieldsV1"].(map[string]any)["f:data"] = map[string]any{"f:bogus": map[string]any{}}
	b := m.Update(res, "", nil, cm("i", map[string]any{"k": "1"}), "kubectl")
	if got, _ := fieldmanager.ManagedFieldsOf(b); fmt.Sprint(got[0].(map[string]any)["fieldsV1"]) == fmt.Sprint(mf[0].(map[string]any)["fieldsV1"]) {
		t.Fatalf("a change of one object's managedFields showed in the next create: %v", got)
	}
}
