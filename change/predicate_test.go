package change_test

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/objwatch/objwatch/change"
)

func TestPredicates(t *testing.T) {
	edit := func(f func(d *appsv1.Deployment)) *appsv1.Deployment {
		d := deployment()
		f(d)
		return d
	}
	rv := func(d *appsv1.Deployment) { d.ResourceVersion = "4243" }
	tests := []struct {
		name string
		new  *appsv1.Deployment
		// want per predicate: generation, resourceVersion, labels, annotations, replicas field, needs reconcile
		want [6]bool
	}{
		{"resync", deployment(), [6]bool{}},
		{"status only", edit(func(d *appsv1.Deployment) { rv(d); d.Status.ReadyReplicas = 2 }),
			[6]bool{false, true, false, false, false, false}},
		{"spec", edit(func(d *appsv1.Deployment) { rv(d); d.Generation = 4; *d.Spec.Replicas = 4 }),
			[6]bool{true, true, false, false, true, true}},
		{"observed", edit(func(d *appsv1.Deployment) { rv(d); d.Generation = 4; d.Status.ObservedGeneration = 4 }),
			[6]bool{true, true, false, false, false, false}},
		{"labels", edit(func(d *appsv1.Deployment) { rv(d); d.Labels["x"] = "y" }),
			[6]bool{false, true, true, false, false, false}},
		{"annotations", edit(func(d *appsv1.Deployment) { rv(d); d.Annotations = nil }),
			[6]bool{false, true, false, true, false, false}},
		{"empty labels are none", edit(func(d *appsv1.Deployment) { d.Labels = nil }),
			[6]bool{false, false, true, false, false, false}},
	}
	preds := []change.Predicate{
		change.GenerationChanged, change.ResourceVersionChanged, change.LabelsChanged,
		change.AnnotationsChanged, change.FieldsChanged("spec.replicas"), change.NeedsReconcile,
	}
	names := []string{"GenerationChanged", "ResourceVersionChanged", "LabelsChanged", "AnnotationsChanged", "FieldsChanged", "NeedsReconcile"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := deployment()
			forms := map[string][2]any{
				"typed":        {old, tt.new},
				"unstructured": {toUnstructured(t, old), toUnstructured(t, tt.new)},
				"map":          {toUnstructured(t, old).Object, toUnstructured(t, tt.new).Object},
			}
			for form, pair := range forms {
				for i, p := range preds {
					if got := p(pair[0], pair[1]); got != tt.want[i] {
						t.Errorf("%s(%s) = %v, want %v", names[i], form, got, tt.want[i])
					}
				}
			}
		})
	}
}

func TestPredicatesEmptyLabels(t *testing.T) {
	a := obj(`{"metadata":{"labels":{}}}`)
	b := obj(`{"metadata":{}}`)
	c := obj(`{"metadata":{"labels":null}}`)
	d := obj(`{"metadata":{"labels":{"a":"b"}}}`)
	for _, x := range []map[string]any{a, b, c} {
		for _, y := range []map[string]any{a, b, c} {
			if change.LabelsChanged(x, y) {
				t.Errorf("LabelsChanged(%v, %v) = true", x, y)
			}
		}
		if !change.LabelsChanged(x, d) || !change.LabelsChanged(d, x) {
			t.Errorf("LabelsChanged(%v, %v) = false", x, d)
		}
	}
}

func TestPredicatesAdd(t *testing.T) {
	var none *appsv1.Deployment
	d := deployment()
	for i, p := range []change.Predicate{change.GenerationChanged, change.ResourceVersionChanged, change.LabelsChanged, change.AnnotationsChanged} {
		if !p(nil, d) || !p(none, d) {
			t.Errorf("predicate %d(nil, obj) = false, want true", i)
		}
	}
	if change.NeedsReconcile(nil, d) {
		t.Errorf("NeedsReconcile(nil, observed object) = true")
	}
	d.Generation = 9
	if !change.NeedsReconcile(nil, d) {
		t.Errorf("NeedsReconcile(nil, unobserved object) = false")
	}
}

func TestCompose(t *testing.T) {
	yes := func(old, new any) bool { return true }
	no := func(old, new any) bool { return false }
	tests := []struct {
		p    change.Predicate
		want bool
	}{
		{change.And(), true},
		{change.And(yes, yes), true},
		{change.And(yes, no), false},
		{change.Or(), false},
		{change.Or(no, yes), true},
		{change.Or(no, no), false},
		{change.Not(no), true},
		{change.Not(change.And(yes, change.Or(no, yes))), false},
	}
	for i, tt := range tests {
		if got := tt.p(nil, nil); got != tt.want {
			t.Errorf("case %d = %v, want %v", i, got, tt.want)
		}
	}
}

func toUnstructured(t testing.TB, obj any) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func ExamplePredicate() {
	old, new := deployment(), deployment()
	new.ResourceVersion, new.Generation = "4243", 4
	*new.Spec.Replicas = 5

	interesting := change.And(change.ResourceVersionChanged, change.Or(change.GenerationChanged, change.LabelsChanged))
	fmt.Println(interesting(old, new), change.NeedsReconcile(old, new))
	// Output: true true
}

// The lifecycle predicates, on typed, unstructured and map forms.
func TestLifecyclePredicates(t *testing.T) {
	now := metav1.Now()
	edit := func(f func(d *appsv1.Deployment)) *appsv1.Deployment {
		d := deployment()
		f(d)
		return d
	}
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "o", UID: "u"}
	tests := []struct {
		name     string
		old, new *appsv1.Deployment
		want     [3]bool // DeletionStarted, FinalizersChanged, OwnerReferencesChanged
	}{
		{"nothing", deployment(), deployment(), [3]bool{}},
		{"deletion starts", deployment(), edit(func(d *appsv1.Deployment) { d.DeletionTimestamp = &now }), [3]bool{true, false, false}},
		{"still deleting", edit(func(d *appsv1.Deployment) { d.DeletionTimestamp = &now }), edit(func(d *appsv1.Deployment) { d.DeletionTimestamp = &now; d.Finalizers = []string{"a"} }), [3]bool{false, true, false}},
		{"finalizer removed", edit(func(d *appsv1.Deployment) { d.Finalizers = []string{"a", "b"} }), edit(func(d *appsv1.Deployment) { d.Finalizers = []string{"a"} }), [3]bool{false, true, false}},
		{"finalizers reordered", edit(func(d *appsv1.Deployment) { d.Finalizers = []string{"a", "b"} }), edit(func(d *appsv1.Deployment) { d.Finalizers = []string{"b", "a"} }), [3]bool{false, true, false}},
		{"empty finalizers are none", edit(func(d *appsv1.Deployment) { d.Finalizers = []string{} }), deployment(), [3]bool{}},
		{"orphaned", edit(func(d *appsv1.Deployment) { d.OwnerReferences = []metav1.OwnerReference{ref} }), deployment(), [3]bool{false, false, true}},
		{"empty owners are none", edit(func(d *appsv1.Deployment) { d.OwnerReferences = []metav1.OwnerReference{} }), deployment(), [3]bool{}},
	}
	preds := []change.Predicate{change.DeletionStarted, change.FinalizersChanged, change.OwnerReferencesChanged}
	names := []string{"DeletionStarted", "FinalizersChanged", "OwnerReferencesChanged"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forms := map[string][2]any{
				"typed":        {tt.old, tt.new},
				"unstructured": {toUnstructured(t, tt.old), toUnstructured(t, tt.new)},
				"map":          {toUnstructured(t, tt.old).Object, toUnstructured(t, tt.new).Object},
			}
			for form, pair := range forms {
				for i, p := range preds {
					if got := p(pair[0], pair[1]); got != tt.want[i] {
						t.Errorf("%s(%s) = %v, want %v", names[i], form, got, tt.want[i])
					}
				}
			}
		})
	}
	// An add (no old) of an object already being deleted counts as its start.
	if !change.DeletionStarted(nil, edit(func(d *appsv1.Deployment) { d.DeletionTimestamp = &now })) || change.DeletionStarted(nil, deployment()) {
		t.Error("DeletionStarted on adds")
	}
}
