package objects

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/server/apistatus"
)

// Apply is server-side apply: patch, the applied configuration of
// opts.FieldManager (required), is merged into the object req names by
// Config.FieldManager, as an update whose mutation is the merge (retried on
// conflict from the current object unless patch pins a resourceVersion).
// When the object does not exist, the apply creates it (Result.Created),
// as kube-apiserver does: authorized as "patch", then also as "create",
// and admitted as a create. An apply through a subresource never creates.
// Conflicts with other managers' fields are 409 unless opts.Force.
func (s *Service) Apply(ctx context.Context, req *Request, patch *unstructured.Unstructured, opts WriteOptions) (Result, error) {
	req.DryRun = opts.DryRun
	ctx = s.noted(ctx, req, opts.FieldManager)
	if err := s.hooks.authorize(ctx, req); err != nil {
		return Result{}, err
	}
	fm := s.cfg.FieldManager
	if fm == nil {
		return Result{}, apistatus.New(415, metav1.StatusReasonUnsupportedMediaType, "server-side apply is not enabled on this server")
	}
	res := req.Resource
	mutate := func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		obj, err := fm.Apply(res, req.Subresource, cur, patch, opts.FieldManager, opts.Force)
		if err != nil {
			return nil, err
		}
		if err := checkApplied(obj, req); err != nil {
			return nil, err
		}
		if patch.GetResourceVersion() == "" {
			obj.SetResourceVersion("")
		}
		return obj, nil
	}
	applied := func(_, obj *unstructured.Unstructured) *unstructured.Unstructured { return obj }
	for retried := false; ; retried = true {
		obj, warnings, err := s.guaranteedUpdate(ctx, req, opts, mutate, applied)
		if !apierrors.IsNotFound(err) || req.Subresource != "" || retried {
			return Result{Object: obj, Warnings: warnings}, err
		}
		creq := *req
		creq.Verb = "create"
		if err := s.hooks.authorize(ctx, &creq); err != nil {
			return Result{}, err
		}
		obj, err = fm.Apply(res, "", nil, patch, opts.FieldManager, opts.Force)
		if err != nil {
			return Result{}, err
		}
		if err := checkApplied(obj, req); err != nil {
			return Result{}, err
		}
		// As kube-apiserver, whose apply creates through its update
		// path: a resourceVersion in the configuration is not refused.
		obj.SetResourceVersion("")
		out, err := s.create(ctx, &creq, obj, opts, false)
		if apierrors.IsAlreadyExists(err) {
			continue // created meanwhile: apply to it
		}
		out.Created = err == nil
		return out, err
	}
}

// checkApplied checks an applied object's name against the request's and
// reconciles its namespace, as kube-apiserver does after the merge.
func checkApplied(obj *unstructured.Unstructured, req *Request) error {
	switch name := obj.GetName(); {
	case name == "":
		return apistatus.BadRequest("the name of the object (%s based on URL) was undeterminable: name must be provided", req.Name)
	case name != req.Name:
		return apistatus.BadRequest("the name of the object (%s) does not match the name on the URL (%s)", name, req.Name)
	}
	switch ns := obj.GetNamespace(); {
	case !req.Resource.Namespaced:
		obj.SetNamespace("")
	case ns == "":
		obj.SetNamespace(req.Namespace)
	case ns != req.Namespace:
		return apistatus.BadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	return nil
}

// ApplySubresource is server-side apply through a subresource whose merge
// the caller does in mutate (the scale subresource: the applied Scale is
// mapped back to the object, managedFields included): authorized as a
// patch of the subresource, written as Apply writes (the managedFields
// are mutate's), and never a create.
func (s *Service) ApplySubresource(ctx context.Context, req *Request, opts WriteOptions, mutate Mutation) (Result, error) {
	req.DryRun = opts.DryRun
	ctx = s.noted(ctx, req, opts.FieldManager)
	if err := s.hooks.authorize(ctx, req); err != nil {
		return Result{}, err
	}
	applied := func(_, obj *unstructured.Unstructured) *unstructured.Unstructured { return obj }
	obj, warnings, err := s.guaranteedUpdate(ctx, req, opts, mutate, applied)
	return Result{Object: obj, Warnings: warnings}, err
}
