package crd

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// Metadata canonicalMetadata accepts must come out of Kubernetes' objectmeta
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
			if got := canonicalMetadata(obj); got != tc.plain {
				t.Fatalf("canonicalMetadata = %v, want %v", got, tc.plain)
			}
			if !tc.plain {
				return
			}
			checkRoundTrip(t, obj)
		})
	}
}

// checkRoundTrip fails unless Kubernetes' objectmeta round trip leaves obj
// as it is.
func checkRoundTrip(t *testing.T, obj map[string]interface{}) {
	t.Helper()
	round := runtime.DeepCopyJSON(obj)
	meta, found, err := schemaobjectmeta.GetObjectMeta(round, false)
	if err != nil || !found {
		t.Fatalf("GetObjectMeta = %v, %v", found, err)
	}
	if err := schemaobjectmeta.SetObjectMeta(round, meta); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(obj, round); diff != "" {
		t.Fatalf("round trip changed canonical metadata (-before +round trip):\n%s", diff)
	}
}

// canonicalMetadata accepts the managedFields the field manager writes,
// and only entries the round trip leaves unchanged.
func TestCanonicalManagedFieldsMatchRoundTrip(t *testing.T) {
	entry := func(kv ...interface{}) map[string]interface{} {
		e := map[string]interface{}{"manager": "kubectl", "operation": "Update", "apiVersion": "example.com/v1",
			"time": "2026-12-03T15:00:00Z", "fieldsType": "FieldsV1",
			"fieldsV1": map[string]interface{}{"f:spec": map[string]interface{}{".": map[string]interface{}{}, "f:replicas": map[string]interface{}{}}}}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(e, kv[i].(string))
			} else {
				e[kv[i].(string)] = kv[i+1]
			}
		}
		return e
	}
	tests := []struct {
		name      string
		managed   interface{}
		canonical bool
	}{
		{"written by the manager", []interface{}{entry(), entry("manager", "other", "operation", "Apply", "subresource", "status")}, true},
		{"empty fieldsV1", []interface{}{entry("fieldsV1", map[string]interface{}{})}, true},
		{"no time", []interface{}{entry("time", nil)}, true},
		{"empty list", []interface{}{}, false},
		{"not a list", map[string]interface{}{}, false},
		{"empty entry", []interface{}{map[string]interface{}{}}, false},
		{"unknown entry field", []interface{}{entry("bogus", "x")}, false},
		{"empty subresource", []interface{}{entry("subresource", "")}, false},
		{"fractional time", []interface{}{entry("time", "2026-12-03T15:00:00.5Z")}, false},
		{"offset time", []interface{}{entry("time", "2026-12-03T17:00:00+02:00")}, false},
		{"leaf not an object", []interface{}{entry("fieldsV1", map[string]interface{}{"f:a": true})}, false},
		{"numeric manager", []interface{}{entry("manager", int64(1))}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := map[string]interface{}{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]interface{}{
				"name": "a", "namespace": "ns", "creationTimestamp": "2026-11-30T03:00:19Z", "managedFields": tc.managed}}
			if got := canonicalMetadata(obj); got != tc.canonical {
				t.Fatalf("canonicalMetadata = %v, want %v", got, tc.canonical)
			}
			if tc.canonical {
				checkRoundTrip(t, obj)
			}
		})
	}
}

// FuzzCanonicalMetadata: metadata canonicalMetadata accepts, decoded as
// the server decodes request bodies, comes out of the round trip as it
// went in.
func FuzzCanonicalMetadata(f *testing.F) {
	f.Add(`{"name":"a","creationTimestamp":"2026-11-30T03:00:19Z","managedFields":[{"manager":"m","operation":"Update","time":"2026-11-30T03:00:19Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{".":{}}}}]}`)
	f.Add(`{"name":"a","labels":{"x":"y"},"managedFields":[{"manager":"m","fieldsV1":{}}]}`)
	f.Add(`{"name":"a","generation":2,"finalizers":["x"],"annotations":{"a":"b"}}`)
	f.Fuzz(func(t *testing.T, md string) {
		var meta map[string]interface{}
		if err := utiljson.Unmarshal([]byte(md), &meta); err != nil {
			return
		}
		obj := map[string]interface{}{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta}
		if canonicalMetadata(obj) {
			checkRoundTrip(t, obj)
		}
	})
}
