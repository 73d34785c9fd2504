package webhook

import (
	"encoding/json"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// marshalled is what encoding/json writes for r: the reference
// appendReviewV1 must match byte for byte.
func marshalled(t testing.TB, r *admissionv1.AdmissionRequest) []byte {
	t.Helper()
	c := *r
	for _, e := range []*runtime.RawExtension{&c.Object, &c.OldObject, &c.Options} {
		if e.Object == nil {
			continue
		}
		var v any = e.Object
		if u, ok := e.Object.(*unstructured.Unstructured); ok {
			v = u.Object
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		*e = runtime.RawExtension{Raw: b}
	}
	b, err := json.Marshal(&admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: &c})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sampleRequest(s string, n int64, dry bool) *admissionv1.AdmissionRequest {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": s, "labels": map[string]any{s: "x<&>"}, "generation": n},
		"data":     map[string]any{"a": s, "f": 1.5e-9, "list": []any{nil, true, int64(-3), s}},
	}}
	r := &admissionv1.AdmissionRequest{
		UID: "u-1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		Name:     s, Namespace: "default", Operation: admissionv1.Create,
		UserInfo: authenticationv1.UserInfo{Username: s, Groups: []string{"a", s}, Extra: map[string]authenticationv1.ExtraValue{s: {"1"}}},
		Object:   runtime.RawExtension{Object: obj},
		Options:  runtime.RawExtension{Object: &metav1.CreateOptions{TypeMeta: metav1.TypeMeta{Kind: "CreateOptions", APIVersion: "meta.k8s.io/v1"}, FieldManager: s}},
		DryRun:   &dry,
	}
	if n%2 == 1 {
		r.SubResource, r.RequestSubResource = "scale", "scale"
		r.RequestKind = &metav1.GroupVersionKind{Group: "g", Version: "v2", Kind: s}
		r.RequestResource = &metav1.GroupVersionResource{Group: "g", Version: "v2", Resource: s}
		r.OldObject = runtime.RawExtension{Object: obj.DeepCopy()}
		r.DryRun = nil
	}
	return r
}

// TestAppendReviewV1: the hand-written encoding is encoding/json's.
func TestAppendReviewV1(t *testing.T) {
	for i, s := range []string{"plain", "quote\"back\\slash\n\u2028\xff", ""} {
		r := sampleRequest(s, int64(i), i == 0)
		if got, want := appendReviewV1(nil, r), marshalled(t, r); string(got) != string(want) {
			t.Errorf("case %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func FuzzAppendReviewV1(f *testing.F) {
	f.Add("plain", int64(0), false)
	f.Add("<&>\u2028", int64(1), true)
	f.Fuzz(func(t *testing.T, s string, n int64, dry bool) {
		r := sampleRequest(s, n, dry)
		if got, want := appendReviewV1(nil, r), marshalled(t, r); string(got) != string(want) {
			t.Fatalf("got %s\nwant %s", got, want)
		}
	})
}

// BenchmarkEncodeReview reports CPU time per op (cpu-ns/op) besides wall
// time: on a shared machine the wall time says more about the others.
func BenchmarkEncodeReview(b *testing.B) {
	r := sampleRequest("bench", 2, false)
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	run := func(b *testing.B, f func()) {
		start := cpu()
		for b.Loop() {
			f()
		}
		b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
	}
	b.Run("append", func(b *testing.B) { run(b, func() { appendReviewV1(make([]byte, 0, 4096), r) }) })
	b.Run("encoding/json", func(b *testing.B) { run(b, func() { marshalled(b, r) }) })
}
