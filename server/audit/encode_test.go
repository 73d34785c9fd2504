package audit

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/objwatch/objwatch/change"
)

// TestEncodeMatchesEncodingJSON: the hand-written encoders write what
// encoding/json writes.
func TestEncodeMatchesEncodingJSON(t *testing.T) {
	ts := metav1.NewMicroTime(time.Date(2026, 1, 2, 3, 4, 5, 678901000, time.UTC))
	evs := []*auditv1.Event{
		{TypeMeta: metav1.TypeMeta{Kind: "Event", APIVersion: "audit.k8s.io/v1"}, Level: auditv1.LevelMetadata,
			AuditID: "id", Stage: auditv1.StageRequestReceived, RequestURI: "/api/v1/namespaces/a/configmaps?x=<&>", Verb: "create",
			User:                     authnv1.UserInfo{Username: "alice", Groups: []string{"g1", "system:authenticated"}},
			RequestReceivedTimestamp: ts, StageTimestamp: ts},
		{TypeMeta: metav1.TypeMeta{Kind: "Event", APIVersion: "audit.k8s.io/v1"}, Level: auditv1.LevelRequestResponse,
			AuditID: "id2", Stage: auditv1.StageResponseComplete, RequestURI: "/x", Verb: "patch",
			User:             authnv1.UserInfo{Username: "bob", UID: "u", Extra: map[string]authnv1.ExtraValue{"k": {"v"}}},
			ImpersonatedUser: &authnv1.UserInfo{Username: "carol\n\"q\"\u2028\x01é"},
			SourceIPs:        []string{"1.2.3.4"}, UserAgent: "kubectl/v1",
			ObjectRef:                &auditv1.ObjectReference{Resource: "configmaps", Namespace: "a", Name: "b", APIVersion: "v1", Subresource: "status"},
			ResponseStatus:           &metav1.Status{Code: 404, Status: "Failure", Message: "not found", Reason: metav1.StatusReasonNotFound},
			RequestObject:            &runtime.Unknown{Raw: []byte(`{"a":1}`), ContentType: "application/json"},
			ResponseObject:           &runtime.Unknown{Raw: []byte(`{"b":[1,2]}`), ContentType: "application/json"},
			RequestReceivedTimestamp: ts, StageTimestamp: ts,
			Annotations: map[string]string{"z": "1", "a": `[{"op":"add"}]`}},
		{ObjectRef: &auditv1.ObjectReference{Name: "only"}, ResponseStatus: &metav1.Status{Code: 200}},
		{ResponseStatus: &metav1.Status{Code: 409, Details: &metav1.StatusDetails{Name: "n"}}},
	}
	many := map[string]string{}
	for i := range 20 {
		many[fmt.Sprintf("k%02d", i)] = fmt.Sprint(i)
	}
	evs = append(evs, &auditv1.Event{Annotations: many, StageTimestamp: metav1.NewMicroTime(time.Date(999, 12, 31, 23, 59, 59, 999, time.UTC))},
		&auditv1.Event{RequestReceivedTimestamp: metav1.NewMicroTime(time.Date(2026, 12, 2, 0, 0, 0, 0, time.FixedZone("x", 3600)))})
	extras := [][]string{nil, {"z", "replaced", "y", `"quoted"`}, nil, {SeqAnnotation, "", PrevHashAnnotation, ""}, {"k07", "seven", "k99", "last"}, nil}
	for i, ev := range evs {
		merged := *ev
		if len(extras[i]) > 0 {
			merged.Annotations = withAnnotations(ev.Annotations, extras[i]...)
		}
		want, _ := json.Marshal(&merged)
		got, _ := appendEvent(nil, ev, extras[i])
		var w, g any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("event %d: %s: %v", i, got, err)
		}
		json.Unmarshal(want, &w)
		if !reflect.DeepEqual(w, g) || string(got) != string(want) {
			t.Errorf("event %d:\n got %s\nwant %s", i, got, want)
		}
	}
	vals := []any{nil, true, "s", int64(-3), 1.5, 1e21, 1e-7, 123456789.0, map[string]any{"b": []any{1.0, "x", nil}, "a": map[string]any{}}, []any{}}
	for _, v := range vals {
		want, _ := json.Marshal(v)
		if got := appendValue(nil, v); string(got) != string(want) {
			t.Errorf("appendValue(%v) = %s, want %s", v, got, want)
		}
	}
	for _, o := range []map[string]any{
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a", "resourceVersion": "7",
			"managedFields": []any{map[string]any{"manager": "m"}}, "labels": map[string]any{"<": "&"}}, "data": map[string]any{"k": "v"}},
		{"kind": "NoMetadata", "spec": map[string]any{"n": int64(3)}},
		{"metadata": "not an object"},
	} {
		u := &unstructured.Unstructured{Object: o}
		for _, c := range []struct{ old, new *unstructured.Unstructured }{{nil, u}, {u, nil}} {
			patch, paths, err := Diff(c.old, c.new)
			op := change.Operation{Op: change.OpRemove, Path: ""}
			if c.new != nil {
				op = change.Operation{Op: change.OpAdd, Path: "", Value: change.WithoutNoise(o)}
			}
			want, _ := json.Marshal([]change.Operation{op})
			wantPaths, _ := json.Marshal(slices.Sorted(maps.Keys(o)))
			if err != nil || string(patch) != string(want) || string(paths) != string(wantPaths) {
				t.Errorf("Diff of %v:\n got %s %s %v\nwant %s %s", o, patch, paths, err, want, wantPaths)
			}
		}
	}
	ops := []change.Operation{{Op: change.OpAdd, Path: "/a", Value: nil}, {Op: change.OpRemove, Path: "/b"}, {Op: change.OpMove, From: "/c/0", Path: "/c/1"}, {Op: change.OpReplace, Path: "", Value: map[string]any{"k": "v"}}}
	want, _ := json.Marshal(ops)
	if got := appendPatch(nil, ops); string(got) != string(want) {
		t.Errorf("appendPatch = %s, want %s", got, want)
	}
}

// TestRecordedObjectOneLine: a request or response body is recorded as
// encoding/json embeds a raw message (kube-apiserver's records): compact,
// so that a pretty-printed body keeps the record on one line, and HTML
// characters escaped; a body that is not a JSON object is left out.
func TestRecordedObjectOneLine(t *testing.T) {
	r := &Record{}
	for _, body := range []string{
		"{\n  \"a\": 1,\n  \"b\": \"x y\"\n}\n",
		`{"html":"<a href='x'>&amp;</a>","sep":"` + "\u2028\u2029" + `","n":[1, 2 ,3]}`,
		`{"plain":"value"}`,
	} {
		o := r.object([]byte(body))
		if o == nil {
			t.Fatalf("%q: not recorded", body)
		}
		want, err := json.Marshal(json.RawMessage(body))
		if err != nil {
			t.Fatal(err)
		}
		if string(o.Raw) != string(want) {
			t.Errorf("%q recorded as %s, encoding/json embeds %s", body, o.Raw, want)
		}
	}
	for _, body := range []string{`{"a":`, `[1,2]`, `not json`, ``} {
		if o := r.object([]byte(body)); o != nil {
			t.Errorf("%q recorded as %s", body, o.Raw)
		}
	}
}

// TestRecordedObjectWithoutManagedFields: with omitManagedFields, a body
// is recorded without the managedFields of it and of a list's items, on
// one line as encoding/json writes it, its integers exact.
func TestRecordedObjectWithoutManagedFields(t *testing.T) {
	r := &Record{decision: Decision{OmitManagedFields: true}}
	body := "{\n \"metadata\": {\"name\": \"a<b\", \"managedFields\": [{\"manager\": \"m\"}]},\n" +
		" \"spec\": {\"big\": 123456789012345678, \"f\": 1.5},\n" +
		" \"items\": [{\"metadata\": {\"managedFields\": [], \"name\": \"i\"}}]\n}"
	o := r.object([]byte(body))
	want := `{"items":[{"metadata":{"name":"i"}}],"metadata":{"name":"a\u003cb"},"spec":{"big":123456789012345678,"f":1.5}}`
	if o == nil || string(o.Raw) != want {
		t.Fatalf("recorded %v, want %s", o, want)
	}
	if o := r.object([]byte(`{"managedFields": `)); o != nil {
		t.Errorf("invalid JSON recorded as %s", o.Raw)
	}
}
