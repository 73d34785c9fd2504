package fieldmanager_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/objwatch/objwatch/server/fieldmanager"
	"github.com/objwatch/objwatch/server/openapi"
	"github.com/objwatch/objwatch/server/registry"
)

// TestFastUpdateMatchesFieldManager drives random ordinary updates of a
// ConfigMap by three managers (values changed, keys added and removed,
// labels changed) through a Manager in Verify mode, which panics when
// fastUpdate's answer differs from apimachinery's field manager; and
// checks that the shortcut answered most of the value-only changes.
func TestFastUpdateMatchesFieldManager(t *testing.T) {
	m, res := verifyingConfigMaps(t)
	for seed := uint64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed))
		live := m.Update(res, "", nil, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "c", "namespace": "ns", "labels": map[string]any{"app": "x"}},
			"data":     map[string]any{"k0": "v"},
		}}, "a")
		fast, slow := 0, 0
		for i := range 300 {
			manager := []string{"a", "b", "c"}[rng.IntN(3)]
			obj := live.DeepCopy()
			data := obj.Object["data"].(map[string]any)
			key := fmt.Sprintf("k%d", rng.IntN(6))
			switch r := rng.IntN(20); {
			case r < 12:
				for k := range data {
					key = k // some existing key
					break
				}
				data[key] = fmt.Sprint(i)
			case r < 15:
				data[key] = "new"
			case r < 17 && len(data) > 1:
				delete(data, key)
			default:
				unstructured.SetNestedField(obj.Object, fmt.Sprint(i%3), "metadata", "labels", "app")
			}
			now := time.Now()
			want, ok := fieldmanager.FastUpdate("", "", live, obj, manager, now)
			got := m.Update(res, "", live, obj, manager)
			if ok {
				fast++
				mf, _ := fieldmanager.ManagedFieldsOf(got)
				if !fieldmanager.JSONEqual(mf, want) {
					t.Fatalf("seed %d step %d: Update stored %v, fastUpdate answered %v", seed, i, mf, want)
				}
			} else {
				slow++
			}
			got.SetResourceVersion(fmt.Sprint(i + 2))
			live = got
		}
		t.Logf("seed %d: %d updates answered by fastUpdate, %d by the field manager", seed, fast, slow)
		if fast < 60 || slow < 30 {
			t.Fatalf("seed %d: fast %d, slow %d: the test no longer exercises both paths", seed, fast, slow)
		}
	}
}

// TestFastUpdateDeclines checks what fastUpdate leaves to the field
// manager.
func TestFastUpdateDeclines(t *testing.T) {
	entry := func(manager, op string, fields map[string]any) map[string]any {
		return map[string]any{"manager": manager, "operation": op, "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": fields, "time": "2026-01-01T00:00:00Z"}
	}
	base := func(entries ...any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "c", "managedFields": entries},
			"data":     map[string]any{"a": "1", "b": "2"},
			"spec":     map[string]any{"list": []any{"x"}},
			"status":   map[string]any{"phase": "p"},
		}}
	}
	owns := map[string]any{"f:data": map[string]any{"f:a": map[string]any{}, "f:b": map[string]any{}}, "f:spec": map[string]any{"f:list": map[string]any{}}, "f:status": map[string]any{"f:phase": map[string]any{}}}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		entries []any
		reset   string
		change  func(o *unstructured.Unstructured)
		fast    bool
	}{
		{"owned value", []any{entry("m", "Update", owns)}, "", func(o *unstructured.Unstructured) { unstructured.SetNestedField(o.Object, "9", "data", "a") }, true},
		{"no change", []any{entry("m", "Update", owns)}, "", func(o *unstructured.Unstructured) {}, true},
		{"resourceVersion only", []any{entry("m", "Update", owns)}, "", func(o *unstructured.Unstructured) { o.SetResourceVersion("7") }, true},
		{"key added", []any{entry("m", "Update", owns)}, "", func(o *unstructured.Unstructured) { unstructured.SetNestedField(o.Object, "9", "data", "c") }, false},
		{"key removed", []any{entry("m", "Update", owns)}, "", func(o *unstructured.Unstructured) { unstructured.RemoveNestedField(o.Object, "data", "b") }, false},
		{"list changed", []any{entry("m", "Update", owns)}, "", func(o *unstructured.Unstructured) { unstructured.SetNestedSlice(o.Object, []any{"y"}, "spec", "list") }, false},
		{"type changed", []any{entry("m", "Update", owns)}, "", func(o *unstructured.Unstructured) { unstructured.SetNestedField(o.Object, int64(1), "data", "a") }, false},
		{"shared with another manager", []any{entry("m", "Update", owns), entry("o", "Update", owns)}, "", func(o *unstructured.Unstructured) { unstructured.SetNestedField(o.Object, "9", "data", "a") }, false},
		{"owned by another manager", []any{entry("o", "Update", owns)}, "", func(o *unstructured.Unstructured) { unstructured.SetNestedField(o.Object, "9", "data", "a") }, false},
		{"applied, not updated", []any{entry("m", "Apply", owns)}, "", func(o *unstructured.Unstructured) { unstructured.SetNestedField(o.Object, "9", "data", "a") }, false},
		{"reset field", []any{entry("m", "Update", owns)}, "status", func(o *unstructured.Unstructured) { unstructured.SetNestedField(o.Object, "q", "status", "phase") }, false},
		{"managedFields changed", []any{entry("m", "Update", owns)}, "", func(o *unstructured.Unstructured) {
			o.Object["metadata"].(map[string]any)["managedFields"] = []any{entry("m", "Update", map[string]any{})}
		}, false},
		{"another apiVersion", []any{entry("m", "Update", owns)}, "", func(o *unstructured.Unstructured) { o.SetAPIVersion("v2") }, false},
	} {
		live := base(tc.entries...)
		obj := live.DeepCopy()
		tc.change(obj)
		mf, ok := fieldmanager.FastUpdate(tc.reset, "", live, obj, "m", now)
		if ok != tc.fast {
			t.Errorf("%s: fastUpdate answered %t, want %t", tc.name, ok, tc.fast)
			continue
		}
		if tc.name == "owned value" {
			if got := mf[0].(map[string]any)["time"]; got != "2026-12-01T10:00:00Z" {
				t.Errorf("owned value: entry time %v, want the update's", got)
			}
			if live.Object["metadata"].(map[string]any)["managedFields"].([]any)[0].(map[string]any)["time"] != "2026-01-01T00:00:00Z" {
				t.Errorf("fastUpdate changed the live object's entry")
			}
		}
	}
}

// BenchmarkUpdateTracking is the cost of recording one ordinary update
// (one ~1 KiB ConfigMap, one key changed by its only manager) in
// managedFields: fast is fastUpdate's answer, full apimachinery's field
// manager's.
func BenchmarkUpdateTracking(b *testing.B) {
	reg := registry.New()
	m, err := fieldmanager.New(fieldmanager.Config{Registry: reg, BuiltinModels: func() (map[string]*spec.Schema, error) { return openapi.BuiltinModels(reg) }})
	if err != nil {
		b.Fatal(err)
	}
	res, _ := reg.Get(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	data := map[string]any{"k": "0"}
	for i := range 16 {
		data[fmt.Sprintf("key%d", i)] = fmt.Sprintf("%056d", i)
	}
	live := m.Update(res, "", nil, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "bench", "namespace": "ns", "resourceVersion": "5"},
		"data":     data,
	}}, "bench")
	fm, _ := m.FieldManagerFor(res, "")
	for _, mode := range []string{"fast", "full"} {
		b.Run(mode, func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				obj := live.DeepCopy()
				obj.Object["data"].(map[string]any)["k"] = fmt.Sprint(i)
				if mode == "fast" {
					m.Update(res, "", live, obj, "bench")
				} else {
					fm.UpdateNoErrors(live, obj, "bench")
				}
			}
		})
	}
}
