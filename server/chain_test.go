package server

import (
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/server/objects"
)

// TestAdmissionChainOrder: each hook list runs its steps' entries in the
// chain's order, whichever lists a step adds to.
func TestAdmissionChainOrder(t *testing.T) {
	var ran []string
	admit := func(name string) func(context.Context, *objects.Request, *unstructured.Unstructured, *unstructured.Unstructured) (func(), error) {
		return func(context.Context, *objects.Request, *unstructured.Unstructured, *unstructured.Unstructured) (func(), error) {
			ran = append(ran, "admit "+name)
			return nil, nil
		}
	}
	attempt := func(list, name string) func(context.Context, *objects.Attempt) error {
		return func(context.Context, *objects.Attempt) error { ran = append(ran, list+" "+name); return nil }
	}
	written := func(name string) func(context.Context, objects.Write) {
		return func(context.Context, objects.Write) { ran = append(ran, "written "+name) }
	}
	authorized := false
	chain := []admissionStep{
		{name: "a", hooks: objects.Hooks{
			Authorize: func(context.Context, *objects.Request) error { authorized = true; return nil },
			Admit:     []func(context.Context, *objects.Request, *unstructured.Unstructured, *unstructured.Unstructured) (func(), error){admit("a")},
		}},
		{name: "b", hooks: objects.Hooks{
			Admit:   []func(context.Context, *objects.Request, *unstructured.Unstructured, *unstructured.Unstructured) (func(), error){admit("b")},
			Written: []func(context.Context, objects.Write){written("b")},
		}},
		{name: "c", hooks: objects.Hooks{
			Admit:    []func(context.Context, *objects.Request, *unstructured.Unstructured, *unstructured.Unstructured) (func(), error){admit("c")},
			Mutate:   []func(context.Context, *objects.Attempt) error{attempt("mutate", "c")},
			Validate: []func(context.Context, *objects.Attempt) error{attempt("validate", "c")},
		}},
		{name: "d", hooks: objects.Hooks{
			Mutate:   []func(context.Context, *objects.Attempt) error{attempt("mutate", "d")},
			Validate: []func(context.Context, *objects.Attempt) error{attempt("validate", "d")},
			Written:  []func(context.Context, objects.Write){written("d")},
		}},
	}
	h := chainHooks(chain)
	ctx := t.Context()
	for _, f := range h.Admit {
		f(ctx, nil, nil, nil)
	}
	for _, f := range slices.Concat(h.Mutate, h.Validate) {
		f(ctx, nil)
	}
	for _, f := range h.Written {
		f(ctx, objects.Write{})
	}
	want := []string{"admit a", "admit b", "admit c", "mutate c", "mutate d", "validate c", "validate d", "written b", "written d"}
	if !slices.Equal(ran, want) {
		t.Errorf("ran %v, want %v", ran, want)
	}
	if h.Authorize == nil || h.Authorize(ctx, nil) != nil || !authorized {
		t.Error("the chain lost its step's Authorize")
	}
}

// TestAdmissionChainSynced: ready once every step is synced, then
// settled; not when the context ends first.
func TestAdmissionChainSynced(t *testing.T) {
	a, b := make(chan struct{}), make(chan struct{})
	settled := false
	chain := []admissionStep{
		{name: "a", synced: a, settle: func(context.Context) { settled = true }},
		{name: "none"},
		{name: "b", synced: b},
	}
	close(a)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if chainSynced(ctx, chain) || settled {
		t.Fatal("synced with a step not synced, or settled before every step was")
	}
	close(b)
	if !chainSynced(t.Context(), chain) || !settled {
		t.Error("not synced, or not settled, once every step was synced")
	}
}
