package change_test

import (
	"reflect"
	"testing"

	"github.com/objwatch/objwatch/change"
)

func TestWithoutNoise(t *testing.T) {
	obj := map[string]any{"kind": "ConfigMap", "data": map[string]any{"k": "v"},
		"metadata": map[string]any{"name": "a", "resourceVersion": "7", "managedFields": []any{map[string]any{"manager": "m"}}}}
	got := change.WithoutNoise(obj)
	want := map[string]any{"kind": "ConfigMap", "data": map[string]any{"k": "v"}, "metadata": map[string]any{"name": "a"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("WithoutNoise = %v, want %v", got, want)
	}
	if md := obj["metadata"].(map[string]any); md["resourceVersion"] != "7" || md["managedFields"] == nil {
		t.Fatalf("WithoutNoise changed its argument: %v", obj)
	}
	if noMeta := map[string]any{"a": 1}; !reflect.DeepEqual(change.WithoutNoise(noMeta), noMeta) {
		t.Fatal("WithoutNoise of an object without metadata changed it")
	}
}
