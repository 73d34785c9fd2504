package endpoints

import (
	"context"
	"net/http"

	"k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// act serves a create of an action subresource (registry.Resource.Action,
// a pod's binding or eviction): the body, of rr's kind, is handed to the
// action with the object the request names; success is a 201 Status, as
// kube-apiserver answers.
func (a *API) act(w http.ResponseWriter, r *http.Request, req *objects.Request, rr *registry.Resource) error {
	opts, body, err := a.bodies.readWrite(r, rr)
	if err != nil {
		return err
	}
	t := &actionTarget{a: a, req: req, opts: opts}
	err = rr.Action(r.Context(), t, body.Object)
	addWarnings(w, t.warnings)
	if err != nil {
		return err
	}
	WriteJSON(w, http.StatusCreated, &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusSuccess, Code: http.StatusCreated,
	})
	return nil
}

// actionTarget is registry.ActionTarget for one request; not safe for
// concurrent use (an action runs in its request).
type actionTarget struct {
	a        *API
	req      *objects.Request
	opts     objects.WriteOptions
	warnings []string
}

func (t *actionTarget) Name() string { return t.req.Name }

func (t *actionTarget) Get(ctx context.Context) (map[string]any, error) {
	obj, err := t.a.objects.Get(ctx, t.req, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return obj.Object, nil
}

func (t *actionTarget) Update(ctx context.Context, mutate func(map[string]any) error) error {
	out, err := t.a.objects.Update(ctx, t.req, t.opts, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		if err := mutate(cur.Object); err != nil {
			return nil, err
		}
		return cur, nil
	})
	t.warnings = append(t.warnings, out.Warnings...)
	return err
}

func (t *actionTarget) Delete(ctx context.Context, opts *metav1.DeleteOptions) error {
	if opts == nil {
		opts = &metav1.DeleteOptions{}
	}
	if t.opts.DryRun && len(opts.DryRun) == 0 {
		// The action's dryRun is its delete's, as kube-apiserver's eviction
		// propagates it.
		opts = opts.DeepCopy()
		opts.DryRun = []string{metav1.DryRunAll}
	}
	out, err := t.a.objects.Delete(ctx, t.req, opts)
	t.warnings = append(t.warnings, out.Warnings...)
	return err
}

func (t *actionTarget) List(ctx context.Context, gvr schema.GroupVersionResource) ([]map[string]any, error) {
	res, ok := t.a.registry.Get(gvr)
	if !ok {
		return nil, nil
	}
	items, _, err := t.a.objects.ListAll(ctx, &objects.Request{Verb: "list", Resource: res, Namespace: t.req.Namespace}, &internalversion.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(items))
	for i, it := range items {
		out[i] = it.Object
	}
	return out, nil
}
