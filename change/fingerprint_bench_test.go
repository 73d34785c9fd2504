package change_test

import (
	"crypto/sha256"
	"encoding/json"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	kjson "sigs.k8s.io/json"

	"github.com/objwatch/objwatch/change"
)

// BenchmarkFingerprint is the cost per event of deduplication: one
// fingerprint (Sum), or a Dedup.Fresh check (fingerprint plus the LRU).
func BenchmarkFingerprint(b *testing.B) {
	f := mustFingerprinter(b, change.Volatile()...)
	b.Run("typed", func(b *testing.B) {
		obj, _ := benchPair(b)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.Sum(obj); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unstructured", func(b *testing.B) {
		o, _ := benchPair(b)
		obj := toUnstructured(b, o)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.Sum(obj); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		// The event as read from the watch stream, before decoding.
		o, _ := benchPair(b)
		raw := json.RawMessage(mustJSON(b, o))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.Sum(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("dedup-fresh", func(b *testing.B) {
		obj, _ := benchPair(b)
		d := newDedup(b, change.DedupOptions{})
		b.ReportAllocs()
		for b.Loop() {
			d.Fresh("default/web", obj)
		}
	})
	b.Run("reference-decode", func(b *testing.B) {
		// For scale: what an informer pays per event anyway, decoding the
		// object from the watch stream.
		obj, _ := benchPair(b)
		data := mustJSON(b, obj)
		b.ReportAllocs()
		for b.Loop() {
			var d appsv1.Deployment
			if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &d); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline-json-sha256", func(b *testing.B) {
		// The straightforward way: hash the encoded object (which neither
		// leaves out noise nor is canonical for maps decoded elsewhere).
		obj, _ := benchPair(b)
		b.ReportAllocs()
		for b.Loop() {
			data, err := json.Marshal(obj)
			if err != nil {
				b.Fatal(err)
			}
			_ = sha256.Sum256(data)
		}
	})
}
