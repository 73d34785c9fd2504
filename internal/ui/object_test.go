package ui_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/internal/ui"
)

// TestObjectPageWhyAndOwners: an object held by a finalizer shows why
// it is still there; its ownerReferences are links the page can open;
// a deleted object still has its history.
func TestObjectPageWhyAndOwners(t *testing.T) {
	e := startUI(t)
	ctx := context.Background()
	e.createCM(t, "default", "owner", map[string]any{"k": "v"})
	owner, err := e.cms.Get(ctx, "default", "owner", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "held", "namespace": "default", "finalizers": []any{"example.com/hold"},
			"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": string(owner.GetUID())}}}}}
	if _, err := e.cms.Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.cms.Delete(ctx, "default", "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var page ui.ObjectPage
	e.getJSON(t, "/api/object", url.Values{"resource": {"configmaps"}, "namespace": {"default"}, "name": {"held"}}, &page)
	if page.Deleting == nil || !strings.Contains(page.Why, "example.com/hold: held until the controller that owns this finalizer removes it") {
		t.Fatalf("why = %q (deleting %v)", page.Why, page.Deleting)
	}
	if len(page.Owners) != 1 || page.Owners[0] != (ui.Link{Resource: "configmap", Namespace: "default", Name: "owner", Kind: "ConfigMap"}) {
		t.Fatalf("owners = %+v", page.Owners)
	}
	// The owner link opens the owner's page; its dependents include held.
	var op ui.ObjectPage
	e.getJSON(t, "/api/object", url.Values{"resource": {page.Owners[0].Resource}, "namespace": {"default"}, "name": {"owner"}}, &op)
	if !op.Exists || op.Name != "owner" || op.Deleting != nil {
		t.Fatalf("owner page = %+v", op)
	}
	var deps []ui.Link
	e.getJSON(t, "/api/dependents", url.Values{"resource": {"configmaps"}, "namespace": {"default"}, "name": {"owner"}}, &deps)
	if len(deps) != 1 || deps[0].Name != "held" || deps[0].Resource != "configmaps" {
		t.Fatalf("dependents = %+v", deps)
	}

	// Gone: the page has its history, ending in the deletion.
	if err := e.cms.Delete(ctx, "default", "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var gone ui.ObjectPage
	e.getJSON(t, "/api/object", url.Values{"resource": {"configmaps"}, "namespace": {"default"}, "name": {"owner"}}, &gone)
	if gone.Exists || len(gone.Revisions) != 2 || !gone.Revisions[1].Deleted || gone.Blame != nil {
		t.Fatalf("deleted object's page = %+v", gone)
	}
}
