package policy

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/objects"
)

// paramKindOf is a policy's spec.paramKind, ok false when it has none.
func paramKindOf(obj *unstructured.Unstructured) (pk admissionv1.ParamKind, ok bool) {
	m, ok, _ := unstructured.NestedMap(obj.Object, "spec", "paramKind")
	if !ok {
		return pk, false
	}
	pk.APIVersion, _ = m["apiVersion"].(string)
	pk.Kind, _ = m["kind"].(string)
	return pk, true
}

// Admit is the objects.Hooks.Admit hook that does what Kubernetes'
// ValidatingAdmissionPolicy and MutatingAdmissionPolicy strategies do
// after validation (their authz.go): a user who creates a policy with a
// paramKind, or changes its paramKind, must be allowed to get every
// object of that kind (all namespaces, all names), else the write is
// refused as Invalid with spec.paramKind Forbidden, in kube-apiserver's
// words. The server's own writes and system:masters pass. Safe for
// concurrent use; it takes nothing, so it has no undo.
func (p *Policies) Admit(_ context.Context, req *objects.Request, obj, old *unstructured.Unstructured) (func(), error) {
	res := req.Resource
	if res.Group != admissionv1.GroupName || req.Subresource != "" || obj == nil || req.User == nil || p.cfg.Authorized == nil ||
		(res.Plural != "validatingadmissionpolicies" && res.Plural != "mutatingadmissionpolicies") {
		return nil, nil
	}
	pk, ok := paramKindOf(obj)
	if !ok {
		return nil, nil
	}
	if old != nil {
		if was, ok := paramKindOf(old); ok && was == pk {
			return nil, nil // an unchanged paramKind
		}
	}
	// As Kubernetes: all groups, versions and resources unless the
	// apiVersion parses and the kind resolves.
	attrs := auth.Attributes{ResourceRequest: true, Verb: "get", APIGroup: "*", Resource: "*", Namespace: "*", Name: "*"}
	if gv, err := schema.ParseGroupVersion(pk.APIVersion); err == nil {
		attrs.APIGroup = gv.Group
		if r, ok := p.cfg.Registry.ForKind(gv.Group, gv.Version, pk.Kind); ok {
			attrs.Resource = r.Plural
		}
	}
	if allowed, _ := p.cfg.Authorized(req.User, attrs); allowed {
		return nil, nil
	}
	u := req.User
	info := &user.DefaultInfo{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra} // printed as kube-apiserver prints its user
	return nil, apistatus.Invalid(res.GVK().GroupKind(), obj.GetName(), field.ErrorList{field.Forbidden(field.NewPath("spec", "paramKind"),
		fmt.Sprintf(`user %v must have "get" permission on all objects of the referenced paramKind (kind=%s, apiVersion=%s)`, info, pk.Kind, pk.APIVersion))})
}
