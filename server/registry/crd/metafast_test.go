package crd

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apimachinery/pkg/runtime"
)

// Metadata plainMetadata accepts must come out of Kubernetes' objectmeta
// round trip unchanged; what it rejects takes that round trip.
func TestPlainMetadataMatchesRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		md    map[string]interface{}
		plain bool
	}{
		{"typical", map[string]interface{}{"name": "a", "namespace": "ns", "uid": "u-1", "generation": int64(3), "creationTimestamp": "2026-11-30T03:00:19Z", "labels": map[string]interface{}{"app": "x"}, "annotations": map[string]interface{}{"k": "v"}, "finalizers": []interface{}{"f/x"}}, true},
		{"deleting", map[string]interface{}{"name": "a", "deletionTimestamp": "2026-11-30T03:00:19Z", "deletionGracePeriodSeconds": int64(30)}, true},
		{"empty", map[string]interface{}{}, false},
		{"unknown field", map[string]interface{}{"name": "a", "bogus": "x"}, false},
		{"empty labels", map[string]interface{}{"name": "a", "labels": map[string]interface{}{}}, false},
		{"numeric label", map[string]interface{}{"name": "a", "labels": map[string]interface{}{"n": int64(1)}}, false},
		{"null timestamp", map[string]interface{}{"name": "a", "creationTimestamp": nil}, false},
		{"offset timestamp", map[string]interface{}{"name": "a", "creationTimestamp": "2026-11-30T05:00:19+02:00"}, false},
		{"fractional timestamp", map[string]interface{}{"name": "a", "creationTimestamp": "2026-11-30T03:00:19.5Z"}, false},
		{"float generation", map[string]interface{}{"name": "a", "generation": 1.5}, false},
		{"zero generation", map[string]interface{}{"name": "a", "generation": int64(0)}, false},
		{"empty name", map[string]interface{}{"name": ""}, false},
		{"owner references", map[string]interface{}{"name": "a", "ownerReferences": []interface{}{map[string]interface{}{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u"}}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := map[string]interface{}{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": tc.md}
			if got := plainMetadata(obj); got != tc.plain {
				t.Fatalf("plainMetadata = %v, want %v", got, tc.plain)
			}
			if !tc.plain {
				return
			}
			round := runtime.DeepCopyJSON(obj)
			meta, found, err := schemaobjectmeta.GetObjectMeta(round, false)
			if err != nil || !found {
				t.Fatalf("GetObjectMeta = %v, %v", found, err)
			}
			if err := schemaobjectmeta.SetObjectMeta(round, meta); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(obj, round); diff != "" {
				t.Fatalf("round trip changed plain metadata (-plain +round trip):\n%s", diff)
			}
		})
	}
}
