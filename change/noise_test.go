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

// TestManagedFieldsChurnIsNoise: two states differing only in their
// managedFields (a new time stamp, a new manager) and resourceVersion are
// the same content for diffs (WithoutNoise) and for Dedup's fingerprints;
// metadata.generation is content.
func TestManagedFieldsChurnIsNoise(t *testing.T) {
	state := func(rv, time string, managers ...string) map[string]any {
		var mf []any
		for _, m := range managers {
			mf = append(mf, map[string]any{"manager": m, "operation": "Update", "time": time,
				"fieldsV1": map[string]any{"f:data": map[string]any{"f:k": map[string]any{}}}})
		}
		return map[string]any{"kind": "ConfigMap", "data": map[string]any{"k": "v"},
			"metadata": map[string]any{"name": "a", "generation": int64(1), "resourceVersion": rv, "managedFields": mf}}
	}
	a := state("7", "2026-01-02T15:04:05Z", "m")
	for name, b := range map[string]map[string]any{
		"time":    state("8", "2026-01-02T15:09:00Z", "m"),
		"manager": state("9", "2026-01-02T15:04:05Z", "m", "n"),
	} {
		if d := change.Between(change.WithoutNoise(a), change.WithoutNoise(b)); !d.Empty() {
			t.Errorf("%s: diff without noise = %v, want none", name, d.Changes())
		}
		fp, err := change.NewFingerprinter(change.Volatile()...)
		if err != nil {
			t.Fatal(err)
		}
		sa, _ := fp.Sum(a)
		sb, _ := fp.Sum(b)
		if sa != sb {
			t.Errorf("%s: fingerprints differ", name)
		}
	}
	g := state("8", "2026-01-02T15:04:05Z", "m")
	g["metadata"].(map[string]any)["generation"] = int64(2)
	if change.Between(change.WithoutNoise(a), change.WithoutNoise(g)).Empty() {
		t.Error("a new generation is noise")
	}
}
