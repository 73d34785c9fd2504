package access

import (
	"context"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// review answers the review resources (objects.Hooks.Review).
func (a *Access) review(ctx context.Context, req *objects.Request, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	res := req.Resource
	switch {
	case registry.IsServiceAccountResource(res) && req.Subresource == "token":
		if a.cfg.TokenIssuer == nil {
			break
		}
		return a.tokenRequest(ctx, req, obj)
	case res.Group == registry.AuthenticationGroup && res.Plural == "tokenreviews":
		return a.tokenReview(ctx, res, obj)
	case res.Group == registry.AuthenticationGroup && res.Plural == "selfsubjectreviews":
		return a.selfSubjectReview(req)
	case res.Group == registry.AuthorizationGroup && res.Plural == "selfsubjectaccessreviews":
		return answer(obj, func(r *authorizationv1.SelfSubjectAccessReview) error {
			attrs, err := reviewAttributes(r.Spec.ResourceAttributes, r.Spec.NonResourceAttributes)
			if err != nil {
				return invalidReview(res, err)
			}
			r.Status = a.decide(userOf(req), attrs)
			return nil
		})
	case res.Group == registry.AuthorizationGroup && res.Plural == "subjectaccessreviews":
		return answer(obj, func(r *authorizationv1.SubjectAccessReview) error {
			return a.subjectAccessReview(res, &r.Spec, &r.Status, "")
		})
	case res.Group == registry.AuthorizationGroup && res.Plural == "localsubjectaccessreviews":
		return answer(obj, func(r *authorizationv1.LocalSubjectAccessReview) error {
			return a.subjectAccessReview(res, &r.Spec, &r.Status, req.Namespace)
		})
	case res.Group == registry.AuthorizationGroup && res.Plural == "selfsubjectrulesreviews":
		return answer(obj, func(r *authorizationv1.SelfSubjectRulesReview) error {
			r.Status = a.rules(userOf(req), r.Spec.Namespace)
			return nil
		})
	}
	return nil, apierrors.NewMethodNotSupported(schema.GroupResource{Group: res.Group, Resource: res.Plural}, "create")
}

// answer decodes obj as a T, lets f fill in its status, and encodes it.
func answer[T any](obj *unstructured.Unstructured, f func(*T) error) (*unstructured.Unstructured, error) {
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &v); err != nil {
		return nil, apistatus.BadRequest("%v", err)
	}
	if err := f(&v); err != nil {
		return nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&v)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	out := &unstructured.Unstructured{Object: m}
	out.SetAPIVersion(obj.GetAPIVersion())
	out.SetKind(obj.GetKind())
	if md, ok := m["metadata"].(map[string]any); ok && md["creationTimestamp"] == nil {
		delete(md, "creationTimestamp")
	}
	return out, nil
}

// userOf is the user a request runs as (the server's own requests run as
// an unnamed member of system:masters).
func userOf(req *objects.Request) *auth.User {
	if req.User != nil {
		return req.User
	}
	return &auth.User{Groups: []string{"system:masters"}}
}

func (a *Access) selfSubjectReview(req *objects.Request) (*unstructured.Unstructured, error) {
	u := userOf(req)
	r := authenticationv1.SelfSubjectReview{
		TypeMeta:   metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "SelfSubjectReview"},
		ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(time.Now().UTC().Truncate(time.Second))},
		Status:     authenticationv1.SelfSubjectReviewStatus{UserInfo: userInfo(u)},
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&r)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func userInfo(u *auth.User) authenticationv1.UserInfo {
	info := authenticationv1.UserInfo{Username: u.Name, UID: u.UID, Groups: u.Groups}
	for k, v := range u.Extra {
		if info.Extra == nil {
			info.Extra = map[string]authenticationv1.ExtraValue{}
		}
		info.Extra[k] = v
	}
	return info
}

// decide is an access review's status for u doing attrs.
func (a *Access) decide(u *auth.User, attrs auth.Attributes) authorizationv1.SubjectAccessReviewStatus {
	ok, reason := a.Authorized(u, attrs)
	st := authorizationv1.SubjectAccessReviewStatus{Allowed: ok}
	if ok && a.unrestricted(u) {
		return st
	}
	st.Reason = reason
	return st
}

func (a *Access) subjectAccessReview(res *registry.Resource, spec *authorizationv1.SubjectAccessReviewSpec, status *authorizationv1.SubjectAccessReviewStatus, namespace string) error {
	if spec.User == "" && len(spec.Groups) == 0 {
		return invalidReview(res, field.ErrorList{field.Invalid(field.NewPath("spec", "user"), spec.User, `at least one of user or group must be specified`)})
	}
	if res.Namespaced {
		switch {
		case spec.ResourceAttributes == nil:
			return invalidReview(res, field.ErrorList{field.Required(field.NewPath("spec", "resourceAttributes"), "disallowed on this kind of request")})
		case spec.ResourceAttributes.Namespace == "":
			spec.ResourceAttributes.Namespace = namespace
		case spec.ResourceAttributes.Namespace != namespace:
			return apistatus.BadRequest("spec.resourceAttributes.namespace must match namespace: %s", namespace)
		}
	}
	attrs, errs := reviewAttributes(spec.ResourceAttributes, spec.NonResourceAttributes)
	if errs != nil {
		return invalidReview(res, errs)
	}
	*status = a.decide(&auth.User{Name: spec.User, Groups: spec.Groups}, attrs)
	return nil
}

// reviewAttributes are the attributes an access review asks about: one
// of resourceAttributes and nonResourceAttributes.
func reviewAttributes(r *authorizationv1.ResourceAttributes, n *authorizationv1.NonResourceAttributes) (auth.Attributes, field.ErrorList) {
	spec := field.NewPath("spec")
	switch {
	case r != nil && n != nil:
		return auth.Attributes{}, field.ErrorList{field.Invalid(spec.Child("nonResourceAttributes"), n, `cannot be specified in combination with resourceAttributes`)}
	case r != nil:
		return auth.Attributes{ResourceRequest: true, Verb: r.Verb, APIGroup: r.Group, Resource: r.Resource,
			Subresource: r.Subresource, Namespace: r.Namespace, Name: r.Name}, nil
	case n != nil:
		return auth.Attributes{Verb: n.Verb, Path: n.Path}, nil
	}
	return auth.Attributes{}, field.ErrorList{field.Required(spec.Child("resourceAttributes"), "exactly one of nonResourceAttributes or resourceAttributes must be specified")}
}

func invalidReview(res *registry.Resource, errs field.ErrorList) error {
	return apistatus.Invalid(schema.GroupKind{Group: res.Group, Kind: res.Kind}, "", errs)
}

// rules is a SelfSubjectRulesReview's status: what u may do in namespace.
func (a *Access) rules(u *auth.User, namespace string) authorizationv1.SubjectRulesReviewStatus {
	var st authorizationv1.SubjectRulesReviewStatus
	if a.unrestricted(u) {
		// As kube-apiserver's privileged-group authorizer lists them.
		st.ResourceRules = append(st.ResourceRules, authorizationv1.ResourceRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}})
		st.NonResourceRules = append(st.NonResourceRules, authorizationv1.NonResourceRule{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}})
	}
	if u.Name == "" && len(u.Groups) == 0 {
		return st
	}
	rr, nr, incomplete, evalErr := a.index.RulesFor(u.Name, u.Groups, namespace)
	st.ResourceRules = append(st.ResourceRules, rr...)
	st.NonResourceRules = append(st.NonResourceRules, nr...)
	st.Incomplete, st.EvaluationError = incomplete, evalErr
	return st
}
