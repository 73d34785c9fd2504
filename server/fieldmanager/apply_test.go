package fieldmanager_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/fieldmanager"
)

// BenchmarkApply is one manager applying a ~1 KiB ConfigMap again and
// again with one data value changed: the field manager's share of an
// apply (the object service's decoding, validation and write aside).
func BenchmarkApply(b *testing.B) {
	m, reg := newManager(b)
	res, _ := reg.Get(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	patch := func(i int) *unstructured.Unstructured {
		data := map[string]any{"k": fmt.Sprint(i)}
		for j := range 16 {
			data[fmt.Sprintf("key%d", j)] = fmt.Sprintf("%056d", j)
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "bench", "namespace": "ns"},
			"data":     data,
		}}
	}
	live, err := m.Apply(res, "", nil, patch(0), "bench", false)
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		out, err := m.Apply(res, "", live, patch(i), "bench", false)
		if err != nil {
			b.Fatal(err)
		}
		live = out
	}
}

// TestFastApplyMatchesFieldManager drives random applies of a ConfigMap by
// two managers (their own keys and labels, values changed, keys added and
// dropped, sometimes one of the other's keys, forced or not) and updates
// by a third through a Manager in Verify mode, which panics when
// fastApply's answer differs from apimachinery's field manager; and checks
// that the shortcut answered most of the value-only applies.
func TestFastApplyMatchesFieldManager(t *testing.T) {
	m, res := verifyingConfigMaps(t)
	for seed := uint64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed))
		live := m.Update(res, "", nil, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "c", "namespace": "ns", "creationTimestamp": "2026-12-01T00:00:00Z", "uid": "u"},
			"data":     map[string]any{"u0": "v"},
		}}, "c")
		keys := map[string][]string{"a": {"a0"}, "b": {"b0"}}
		labeled := map[string]bool{}
		applies, fast := 0, 0
		for i := range 300 {
			if rng.IntN(5) == 0 {
				// An update by c of a random key.
				obj := live.DeepCopy()
				data, _, _ := unstructured.NestedStringMap(obj.Object, "data")
				all := make([]string, 0, len(data))
				for k := range data {
					all = append(all, k)
				}
				slices.Sort(all)
				data[all[rng.IntN(len(all))]] = fmt.Sprint(i)
				unstructured.SetNestedStringMap(obj.Object, data, "data")
				live = m.Update(res, "", live, obj, "c")
				continue
			}
			manager := []string{"a", "b"}[rng.IntN(2)]
			ks := keys[manager]
			switch rng.IntN(6) {
			case 0:
				ks = append(slices.Clone(ks), fmt.Sprintf("%s%d", manager, i))
			case 1:
				if len(ks) > 1 {
					ks = ks[1:]
				}
			case 3:
				labeled[manager] = !labeled[manager]
			case 2:
				other := keys[map[string]string{"a": "b", "b": "a"}[manager]]
				ks = append(slices.Clone(ks), other[rng.IntN(len(other))])
			}
			data := map[string]any{}
			for _, k := range ks {
				data[k] = fmt.Sprint(rng.IntN(3))
			}
			md := map[string]any{"name": "c", "namespace": "ns"}
			if labeled[manager] {
				md["labels"] = map[string]any{"by-" + manager: fmt.Sprint(rng.IntN(2))}
			}
			patch := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data}}
			// Entries stamped long ago: an apply that changes nothing
			// must keep their times, as the field manager does.
			mf, _, _ := unstructured.NestedSlice(live.Object, "metadata", "managedFields")
			for _, e := range mf {
				e.(map[string]any)["time"] = "2020-01-01T00:00:00Z"
			}
			unstructured.SetNestedSlice(live.Object, mf, "metadata", "managedFields")
			before := live.DeepCopy()
			_, short := fieldmanager.FastApply("", "", live, patch, manager, time.Now())
			out, err := m.Apply(res, "", live, patch, manager, rng.IntN(2) == 0)
			if !fieldmanager.JSONEqual(before.Object, live.Object) {
				t.Fatal("Apply changed the live object")
			}
			if err != nil {
				if short {
					t.Fatalf("the shortcut answered an apply the field manager refused: %v", err)
				}
				continue // a conflict
			}
			applies++
			if short {
				fast++
			}
			keys[manager] = ks
			live = out
		}
		t.Logf("seed %d: %d applies, %d by the shortcut", seed, applies, fast)
		if fast < applies/8 {
			t.Errorf("seed %d: the shortcut answered %d of %d applies", seed, fast, applies)
		}
	}
}
