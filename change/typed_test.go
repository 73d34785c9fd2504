package change_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/randfill"

	"github.com/objwatch/objwatch/change"
)

// filler fills Kubernetes objects with random values (small lists, some
// nils, real quantities and times).
func filler(seed int64) *randfill.Filler {
	return randfill.NewWithSeed(seed).NilChance(0.3).NumElements(0, 3).MaxDepth(6).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewMilliQuantity(c.Int63n(100000), resource.DecimalSI)
		},
		func(t *metav1.Time, c randfill.Continue) {
			*t = metav1.Unix(c.Int63n(2e9), 0)
		},
		func(t *metav1.MicroTime, c randfill.Continue) {
			*t = metav1.NewMicroTime(metav1.Unix(c.Int63n(2e9), c.Int63n(1e9)).Time)
		},
		func(v *intstr.IntOrString, c randfill.Continue) {
			if c.Bool() {
				*v = intstr.FromInt32(c.Int31n(100))
			} else {
				*v = intstr.FromString(c.String(4))
			}
		},
		func(r *runtime.RawExtension, c randfill.Continue) {
			r.Raw = []byte(`{"k":"v"}`)
		},
		func(f *metav1.FieldsV1, c randfill.Continue) {
			f.SetRawString(`{"f:spec":{}}`)
		},
		func(s *string, c randfill.Continue) {
			*s = []string{"", "a", "b", "web", "x.y/z"}[c.Intn(5)]
		},
	)
}

// TestDiffTypedProperties: for random Kubernetes objects, the typed diff
// equals the diff of their unstructured forms and its patch turns old
// into new.
func TestDiffTypedProperties(t *testing.T) {
	n := 60
	if testing.Short() {
		n = 10
	}
	kinds := []struct {
		name string
		new  func() any
	}{
		{"Pod", func() any { return &corev1.Pod{} }},
		{"Deployment", func() any { return &appsv1.Deployment{} }},
		{"Service", func() any { return &corev1.Service{} }},
		{"Secret", func() any { return &corev1.Secret{} }},
	}
	fp := mustFingerprinter(t, change.Volatile()...)
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			for i := range n {
				f := filler(int64(i))
				old, new := k.new(), k.new()
				f.Fill(old)
				if i%3 == 0 {
					f.Fill(new)
				} else {
					// A related object: a copy with a few fields refilled.
					if err := json.Unmarshal(mustJSON(t, old), new); err != nil {
						t.Fatal(err)
					}
					refill(f, new)
				}
				d := exact.Between(old, new)
				if err := d.Err(); err != nil {
					t.Fatalf("Err() = %v", err)
				}
				uo, err := runtime.DefaultUnstructuredConverter.ToUnstructured(old)
				if err != nil {
					t.Fatal(err)
				}
				un, err := runtime.DefaultUnstructuredConverter.ToUnstructured(new)
				if err != nil {
					t.Fatal(err)
				}
				ud := exact.Between(uo, un)
				if diff := cmp.Diff(ud.Changes(), d.Changes()); diff != "" {
					t.Fatalf("typed and unstructured changes differ (-unstructured +typed):\n%s", diff)
				}
				checkPatch(t, uo, un, d)
				for _, o := range []struct{ typed, unstructured any }{{old, uo}, {new, un}} {
					if st, su := sum(t, fp, o.typed), sum(t, fp, o.unstructured); st != su {
						t.Fatalf("Sum(typed) = %v, Sum(unstructured) = %v for %s", st, su, mustJSON(t, o.typed))
					}
				}
			}
		})
	}
}

// refill changes some parts of a Kubernetes object at random.
func refill(f *randfill.Filler, obj any) {
	var which int
	f.Fill(&which)
	switch o := obj.(type) {
	case *corev1.Pod:
		switch which % 4 {
		case 0:
			f.Fill(&o.Labels)
		case 1:
			if len(o.Spec.Containers) > 0 {
				f.Fill(&o.Spec.Containers[0])
			}
		case 2:
			f.Fill(&o.Status)
		default:
			f.Fill(&o.Spec.Containers)
		}
	case *appsv1.Deployment:
		if which%2 == 0 {
			f.Fill(&o.Spec.Replicas)
		} else {
			f.Fill(&o.Spec.Template.Spec.Containers)
		}
	case *corev1.Service:
		f.Fill(&o.Spec.Ports)
	case *corev1.Secret:
		f.Fill(&o.Data)
	}
}
