package client

import (
	"context"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	selfSubjectAccessReviews = Resource{
		GVR: authorizationv1.SchemeGroupVersion.WithResource("selfsubjectaccessreviews"), Kind: "SelfSubjectAccessReview",
	}
	selfSubjectRulesReviews = Resource{
		GVR: authorizationv1.SchemeGroupVersion.WithResource("selfsubjectrulesreviews"), Kind: "SelfSubjectRulesReview",
	}
	selfSubjectReviews = Resource{
		GVR: authenticationv1.SchemeGroupVersion.WithResource("selfsubjectreviews"), Kind: "SelfSubjectReview",
	}
)

// CanI asks the server whether the caller may do what attrs describe
// (verb, resource, group, namespace, name), as `kubectl auth can-i` does,
// with a SelfSubjectAccessReview. reason is the authorizer's explanation,
// often empty, followed by its evaluation error if it had one. A refusal is allowed false with a nil error; err is for a
// review that could not be made.
func (r *REST) CanI(ctx context.Context, attrs authorizationv1.ResourceAttributes) (allowed bool, reason string, err error) {
	review := &authorizationv1.SelfSubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: authorizationv1.SchemeGroupVersion.String(), Kind: "SelfSubjectAccessReview"},
		Spec:     authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs},
	}
	out, err := NewClient[*authorizationv1.SelfSubjectAccessReview](r, selfSubjectAccessReviews).Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("can-i %s %s: %w", attrs.Verb, attrs.Resource, err)
	}
	reason = out.Status.Reason
	if e := out.Status.EvaluationError; e != "" {
		reason = strings.TrimPrefix(reason+"; "+e, "; ")
	}
	return out.Status.Allowed, reason, nil
}

// Rules asks the server what the caller may do in namespace, as `kubectl
// auth can-i --list` does, with a SelfSubjectRulesReview. The answer is
// Incomplete when an authorizer could not list its rules (the caller may
// then be allowed more than it says); use it to show or explain access,
// and CanI to decide.
func (r *REST) Rules(ctx context.Context, namespace string) (authorizationv1.SubjectRulesReviewStatus, error) {
	review := &authorizationv1.SelfSubjectRulesReview{
		TypeMeta: metav1.TypeMeta{APIVersion: authorizationv1.SchemeGroupVersion.String(), Kind: "SelfSubjectRulesReview"},
		Spec:     authorizationv1.SelfSubjectRulesReviewSpec{Namespace: namespace},
	}
	out, err := NewClient[*authorizationv1.SelfSubjectRulesReview](r, selfSubjectRulesReviews).Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return authorizationv1.SubjectRulesReviewStatus{}, fmt.Errorf("rules in %q: %w", namespace, err)
	}
	return out.Status, nil
}

// WhoAmI returns the user the server takes the caller for (name, groups,
// extra), as `kubectl auth whoami` does, with a SelfSubjectReview.
func (r *REST) WhoAmI(ctx context.Context) (authenticationv1.UserInfo, error) {
	review := &authenticationv1.SelfSubjectReview{
		TypeMeta: metav1.TypeMeta{APIVersion: authenticationv1.SchemeGroupVersion.String(), Kind: "SelfSubjectReview"},
	}
	out, err := NewClient[*authenticationv1.SelfSubjectReview](r, selfSubjectReviews).Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, fmt.Errorf("whoami: %w", err)
	}
	return out.Status.UserInfo, nil
}
