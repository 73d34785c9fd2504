package objects

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// FuzzAppendJSON checks appendJSON against its oracle: for any JSON value
// decoded as the service decodes objects (int64 and float64 numbers), it
// encodes exactly what encoding/json.Marshal does.
func FuzzAppendJSON(f *testing.F) {
	for _, s := range []string{
		`[{"apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:k":{}}},"manager":"m","operation":"Update","time":"2026-12-01T20:00:00Z"}]`,
		`{"a<b>&c":"\u2028\u2029\ufffd\u0001\b\f\n\r\t\"\\","n":[1,-2,1.5,1e-7,1e21,123456789012345678,0.000001,-0]}`,
		`[null,true,false,{},[],""]`, "\"\xff\xfe\"", `{"z":{},"a":{},"\u00e9":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v any
		if utiljson.Unmarshal(b, &v) != nil {
			return
		}
		want, err := json.Marshal(v)
		got, ok := appendJSON(nil, v)
		if err != nil || !ok {
			if ok {
				t.Fatalf("%q: appendJSON encoded what encoding/json refuses (%v)", b, err)
			}
			return
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%q:\nappendJSON %s\nencoding/json %s", b, got, want)
		}
	})
}

// TestAppendJSONRefuses checks that what appendJSON does not encode as
// encoding/json does is left to encoding/json: other types, NaN.
func TestAppendJSONRefuses(t *testing.T) {
	for _, v := range []any{[]any{math.NaN()}, map[string]any{"a": 1}, []any{int32(1)}, []string{"a"}} {
		if _, ok := appendJSON(nil, v); ok {
			t.Errorf("appendJSON(%#v) encoded it", v)
		}
	}
}

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
