package registry

import (
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The API groups of the review resources.
const (
	AuthenticationGroup = authenticationv1.GroupName
	AuthorizationGroup  = authorizationv1.GroupName
)

// reviewStrategy decodes a review's body with its Go type and checks
// nothing else: what a review asks is checked by whoever answers it.
type reviewStrategy[T any] struct{ typed[T] }

func (reviewStrategy[T]) Validate(obj, old map[string]any) field.ErrorList { return nil }

// tokenRequest is the kind a service account's token subresource takes.
var tokenRequest = &Resource{
	Group: AuthenticationGroup, Version: "v1", Plural: "tokenrequests", Kind: "TokenRequest",
	Namespaced: true, Review: true, Strategy: reviewStrategy[authenticationv1.TokenRequest]{},
}

// reviewResources are the create-only resources of authentication and
// authorization, as kube-apiserver serves them.
func reviewResources() []*Resource {
	review := func(group, plural, kind string, namespaced bool, s Strategy) *Resource {
		return &Resource{Group: group, Version: "v1", Plural: plural, Singular: strings.ToLower(kind), Kind: kind,
			Namespaced: namespaced, Review: true, Strategy: s}
	}
	return []*Resource{
		review(AuthenticationGroup, "tokenreviews", "TokenReview", false, reviewStrategy[authenticationv1.TokenReview]{}),
		review(AuthenticationGroup, "selfsubjectreviews", "SelfSubjectReview", false, reviewStrategy[authenticationv1.SelfSubjectReview]{}),
		review(AuthorizationGroup, "subjectaccessreviews", "SubjectAccessReview", false, reviewStrategy[authorizationv1.SubjectAccessReview]{}),
		review(AuthorizationGroup, "selfsubjectaccessreviews", "SelfSubjectAccessReview", false, reviewStrategy[authorizationv1.SelfSubjectAccessReview]{}),
		review(AuthorizationGroup, "localsubjectaccessreviews", "LocalSubjectAccessReview", true, reviewStrategy[authorizationv1.LocalSubjectAccessReview]{}),
		review(AuthorizationGroup, "selfsubjectrulesreviews", "SelfSubjectRulesReview", false, reviewStrategy[authorizationv1.SelfSubjectRulesReview]{}),
	}
}

// TokenRequestKind is the kind a service account's token subresource
// takes.
func TokenRequestKind() *Resource { return tokenRequest }
