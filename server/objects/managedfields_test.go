package objects

import (
	"bytes"
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// TestToStorageManagedFields checks that the stored form with encoded
// managedFields is encoding/json's, and that the object is left as it was.
func TestToStorageManagedFields(t *testing.T) {
	var m map[string]any
	src := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"7","managedFields":[{"manager":"<m>","fieldsV1":{"f:data":{"f:k":{}}}}]},"data":{"k":"v"}}`
	if err := utiljson.Unmarshal([]byte(src), &m); err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{Object: m}
	before := obj.DeepCopy()
	got, err := ToStorage(obj)
	if err != nil {
		t.Fatal(err)
	}
	c := before.DeepCopy()
	unstructured.RemoveNestedField(c.Object, "metadata", "resourceVersion")
	want, _ := json.Marshal(c.Object)
	if !bytes.Equal(got, want) {
		t.Errorf("stored\n%s\nwant\n%s", got, want)
	}
	if _, ok := obj.Object["metadata"].(map[string]any)["managedFields"].([]any); !ok || !jsonEqualForTest(obj.Object, before.Object) {
		t.Errorf("ToStorage changed the object: %#v", obj.Object)
	}
}

func jsonEqualForTest(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
