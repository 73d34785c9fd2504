package change_test

import (
	"encoding/json"
	"reflect"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/objwatch/objwatch/change"
)

// benchPair is a Deployment of about 1 KiB of JSON and a copy with one
// field changed (a container image), as an informer's update delivers.
func benchPair(b *testing.B) (old, new *appsv1.Deployment) {
	old, new = deployment(), deployment()
	new.Spec.Template.Spec.Containers[0].Image = "nginx:1.28"
	b.Cleanup(func() { b.ReportMetric(float64(len(mustJSON(b, old))), "objectbytes") })
	return old, new
}

// BenchmarkDiff compares change.Between (asking for the patch and the
// paths) with the straightforward approach: encode both objects, decode
// them into maps, compare with reflect.DeepEqual and compute a merge patch
// with evanphx/json-patch.
func BenchmarkDiff(b *testing.B) {
	b.Run("typed", func(b *testing.B) {
		old, new := benchPair(b)
		b.ReportAllocs()
		for b.Loop() {
			d := change.Between(old, new)
			if len(d.Patch()) != 1 || len(d.Paths()) != 1 {
				b.Fatal(d.Paths())
			}
		}
	})
	b.Run("unstructured", func(b *testing.B) {
		o, n := benchPair(b)
		old, new := toUnstructured(b, o), toUnstructured(b, n)
		b.ReportAllocs()
		for b.Loop() {
			d := change.Between(old, new)
			if len(d.Patch()) != 1 || len(d.Paths()) != 1 {
				b.Fatal(d.Paths())
			}
		}
	})
	b.Run("typed-equal", func(b *testing.B) {
		// A resync: old and new are equal.
		old := deployment()
		new := deployment()
		b.ReportAllocs()
		for b.Loop() {
			if !change.Between(old, new).Empty() {
				b.Fatal("not empty")
			}
		}
	})
	b.Run("unused", func(b *testing.B) {
		// What a handler that never looks at the diff pays.
		old, new := benchPair(b)
		b.ReportAllocs()
		for b.Loop() {
			_ = change.Between(old, new)
		}
	})
	b.Run("baseline-typed", func(b *testing.B) {
		old, new := benchPair(b)
		b.ReportAllocs()
		for b.Loop() {
			if p := decodeAndCompare(b, old, new); len(p) == 0 {
				b.Fatal("no patch")
			}
		}
	})
	b.Run("baseline-unstructured", func(b *testing.B) {
		o, n := benchPair(b)
		old, new := toUnstructured(b, o), toUnstructured(b, n)
		b.ReportAllocs()
		for b.Loop() {
			if p := decodeAndCompare(b, old, new); len(p) == 0 {
				b.Fatal("no patch")
			}
		}
	})
}

func decodeAndCompare(b *testing.B, old, new any) []byte {
	oj, err := json.Marshal(old)
	if err != nil {
		b.Fatal(err)
	}
	nj, err := json.Marshal(new)
	if err != nil {
		b.Fatal(err)
	}
	var om, nm map[string]any
	if err := json.Unmarshal(oj, &om); err != nil {
		b.Fatal(err)
	}
	if err := json.Unmarshal(nj, &nm); err != nil {
		b.Fatal(err)
	}
	if reflect.DeepEqual(om, nm) {
		return nil
	}
	p, err := jsonpatch.CreateMergePatch(oj, nj)
	if err != nil {
		b.Fatal(err)
	}
	return p
}
