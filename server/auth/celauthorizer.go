package auth

import (
	"context"

	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// Authorizer is Kubernetes' authorizer interface over the server's
// decisions, for the authorizer variable of CEL expressions (admission
// policies, webhook matchConditions): every check is decided for u as the
// server decides requests (authorized, e.g. RBAC), u nil (the server's own
// writes) is allowed everything. A refusal is NoOpinion with the
// authorizer's reason, as RBAC answers. Safe for concurrent use when
// authorized is.
func Authorizer(u *User, authorized func(*User, Attributes) (bool, string)) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(celAuthorizer{u: u, authorized: authorized}.Authorize)
}

type celAuthorizer struct {
	u          *User
	authorized func(*User, Attributes) (bool, string)
}

func (z celAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if z.u == nil || z.authorized == nil {
		return authorizer.DecisionAllow, "", nil
	}
	ok, reason := z.authorized(z.u, Attributes{
		ResourceRequest: a.IsResourceRequest(), Verb: a.GetVerb(), APIGroup: a.GetAPIGroup(), Resource: a.GetResource(),
		Subresource: a.GetSubresource(), Namespace: a.GetNamespace(), Name: a.GetName(), Path: a.GetPath(),
	})
	if ok {
		return authorizer.DecisionAllow, reason, nil
	}
	return authorizer.DecisionNoOpinion, reason, nil
}
