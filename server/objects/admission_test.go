package objects_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/objects"
)

// TestAdmissionOrder checks where mutating and validating admission run:
// Mutate before the object is prepared and validated (so what it sets is
// stored, and validated), Validate after Admit on creates, updates and
// deletes, each with its operation, old object and warnings.
func TestAdmissionOrder(t *testing.T) {
	var seen []string
	refuse := map[string]bool{}
	h := objects.Hooks{
		Mutate: []func(context.Context, *objects.Attempt) error{func(_ context.Context, a *objects.Attempt) error {
			seen = append(seen, fmt.Sprintf("mutate %s uid=%q old=%t", a.Operation, a.Object.GetUID(), a.Old != nil))
			if a.Object.GetAnnotations()["bad"] == "mutate" {
				// Mutation output is validated afterwards.
				a.Object.SetLabels(map[string]string{"x": "not a valid label value!"})
				return nil
			}
			unstructured.SetNestedField(a.Object.Object, "yes", "data", "mutated")
			a.Warn("mutated " + a.Operation)
			return nil
		}},
		Admit: []func(context.Context, *objects.Request, *unstructured.Unstructured, *unstructured.Unstructured) (func(), error){
			func(_ context.Context, req *objects.Request, obj, old *unstructured.Unstructured) (func(), error) {
				seen = append(seen, "admit "+req.Verb)
				return nil, nil
			},
		},
		Validate: []func(context.Context, *objects.Attempt) error{func(_ context.Context, a *objects.Attempt) error {
			var name string
			if a.Old != nil {
				name = a.Old.GetName()
			}
			if a.Object != nil {
				name = a.Object.GetName()
				if a.Object.GetUID() == "" {
					return errors.New("validating admission saw an unprepared object")
				}
			}
			seen = append(seen, fmt.Sprintf("validate %s %s old=%t", a.Operation, name, a.Old != nil))
			a.Warn("validated " + a.Operation)
			if refuse[a.Operation] {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, name, errors.New("refused by policy"))
			}
			return nil
		}},
	}
	s, res := newService(t, h)
	ctx := context.Background()
	req := func(verb, name string) *objects.Request {
		return &objects.Request{Verb: verb, Resource: res, Namespace: "ns", Name: name}
	}
	check := func(step string, want ...string) {
		t.Helper()
		if !slices.Equal(seen, want) {
			t.Fatalf("%s: hooks ran as %q, want %q", step, seen, want)
		}
		seen = nil
	}

	out, err := s.Create(ctx, req("create", ""), configMap("a", map[string]any{"k": "1"}), objects.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("create", `mutate CREATE uid="" old=false`, "admit create", "validate CREATE a old=false")
	if d, _, _ := unstructured.NestedString(out.Object.Object, "data", "mutated"); d != "yes" || !slices.Equal(out.Warnings, []string{"mutated CREATE", "validated CREATE"}) {
		t.Fatalf("create: data.mutated %q warnings %q, want the mutation stored and both warnings", d, out.Warnings)
	}
	got, err := s.Get(ctx, req("get", "a"), nil)
	if err != nil || got.Object["data"].(map[string]any)["mutated"] != "yes" {
		t.Fatalf("stored object %v (%v) lacks the mutation", got, err)
	}

	out, err = s.Update(ctx, req("update", "a"), objects.WriteOptions{}, setData("k", "2"))
	if err != nil {
		t.Fatal(err)
	}
	check("update", `mutate UPDATE uid="`+string(got.GetUID())+`" old=true`, "admit update", "validate UPDATE a old=true")
	if !slices.Equal(out.Warnings, []string{"mutated UPDATE", "validated UPDATE"}) {
		t.Fatalf("update warnings %q", out.Warnings)
	}

	// What a mutation sets is validated: an invalid label is a 422 and
	// nothing is stored.
	bad := configMap("b", nil)
	bad.SetAnnotations(map[string]string{"bad": "mutate"})
	if _, err := s.Create(ctx, req("create", ""), bad, objects.WriteOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "metadata.labels") {
		t.Fatalf("create with an invalid mutation = %v, want 422 on metadata.labels", err)
	}
	seen = nil
	if _, err := s.Get(ctx, req("get", "b"), nil); !apierrors.IsNotFound(err) {
		t.Fatalf("an object whose mutation was invalid was stored: %v", err)
	}

	// A refused update and delete change nothing.
	refuse[objects.OpUpdate], refuse[objects.OpDelete] = true, true
	if _, err := s.Update(ctx, req("update", "a"), objects.WriteOptions{}, setData("k", "3")); !apierrors.IsForbidden(err) {
		t.Fatalf("refused update = %v", err)
	}
	seen = nil
	if _, err := s.Delete(ctx, req("delete", "a"), &metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("refused delete = %v", err)
	}
	check("refused delete", "validate DELETE a old=true")
	if got, err := s.Get(ctx, req("get", "a"), nil); err != nil || got.Object["data"].(map[string]any)["k"] != "2" {
		t.Fatalf("after refused writes: %v %v, want k=2 kept", got, err)
	}
	refuse[objects.OpDelete] = false
	del, err := s.Delete(ctx, req("delete", "a"), &metav1.DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(del.Warnings, []string{"validated DELETE"}) {
		t.Fatalf("delete warnings %q, want validating admission's", del.Warnings)
	}
	check("delete", "validate DELETE a old=true")
}
