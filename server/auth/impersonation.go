package auth

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Attributes are what a request asks to do, as an authorizer sees it.
type Attributes struct {
	// ResourceRequest: a request on a resource (else on Path).
	ResourceRequest bool
	// Verb is the resource verb (get, list, watch, create, ...) or, for
	// other paths, the lower-case HTTP method.
	Verb                                             string
	APIGroup, Resource, Subresource, Namespace, Name string
	Path                                             string
}

// forbidden is the 403 an authorizer's denial of verb on a gives user, in
// kube-apiserver's words.
func forbidden(u User, verb string, a Attributes) error {
	if !a.ResourceRequest {
		return apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf("User %q cannot %s path %q", u.Name, verb, a.Path))
	}
	resource := a.Resource
	if a.Subresource != "" {
		resource += "/" + a.Subresource
	}
	scope := "at the cluster scope"
	if a.Namespace != "" {
		scope = fmt.Sprintf("in the namespace %q", a.Namespace)
	}
	return apierrors.NewForbidden(schema.GroupResource{Group: a.APIGroup, Resource: a.Resource}, a.Name,
		fmt.Errorf("User %q cannot %s resource %q in API group %q %s", u.Name, verb, resource, a.APIGroup, scope))
}

// ImpersonationRefused returns the error for a request that asks to act as
// someone else (Impersonate-User, with or without Impersonate-Group,
// Impersonate-Uid and Impersonate-Extra-* headers), or nil when it does
// not. objwatch does not implement impersonation; ignoring the headers
// would run the request as u, so it is refused instead, with what
// kube-apiserver (v1.37, constrained impersonation) answers a user whom
// its authorizer allows no impersonation: 403, for the request's own
// attributes a, with the verb impersonate-on:<mode>:<verb>, e.g.
//
//	configmaps is forbidden: User "admin" cannot impersonate-on:user-info:list resource "configmaps" in API group "" in the namespace "default"
//
// The mode is serviceaccount or arbitrary-node for a service account's or
// node's user name alone, user-info otherwise; a service account or node
// with groups, uid or extras falls to the legacy check (impersonate on
// users or serviceaccounts). Groups, uid or extras without a user are a
// 400, as there.
func ImpersonationRefused(h http.Header, u User, a Attributes) error {
	wanted := &user.DefaultInfo{
		Name:   h.Get(authenticationv1.ImpersonateUserHeader),
		UID:    h.Get(authenticationv1.ImpersonateUIDHeader),
		Groups: h.Values(authenticationv1.ImpersonateGroupHeader),
	}
	hasExtra := false
	for k, vs := range h {
		if !strings.HasPrefix(k, authenticationv1.ImpersonateUserExtraHeaderPrefix) {
			continue
		}
		hasExtra = true
		if len(vs) == 0 {
			continue
		}
		key := strings.ToLower(k[len(authenticationv1.ImpersonateUserExtraHeaderPrefix):])
		if unescaped, err := url.PathUnescape(key); err == nil {
			key = unescaped
		}
		if wanted.Extra == nil {
			wanted.Extra = map[string][]string{}
		}
		wanted.Extra[key] = append(wanted.Extra[key], vs...)
	}
	if len(wanted.Groups) == 0 {
		wanted.Groups = nil
	}
	if wanted.Name == "" {
		if wanted.UID != "" || wanted.Groups != nil || hasExtra {
			return apierrors.NewBadRequest(fmt.Sprintf("requested %#v without impersonating a user name", wanted))
		}
		return nil
	}
	onlyName := wanted.UID == "" && wanted.Groups == nil && !hasExtra
	saNS, saName, isSA := serviceAccountName(wanted.Name)
	isNode := strings.HasPrefix(wanted.Name, "system:node:") && len(wanted.Name) > len("system:node:")
	switch {
	case isNode && onlyName:
		return forbidden(u, "impersonate-on:arbitrary-node:"+a.Verb, a)
	case isSA && onlyName:
		return forbidden(u, "impersonate-on:serviceaccount:"+a.Verb, a)
	case !isNode && !isSA:
		return forbidden(u, "impersonate-on:user-info:"+a.Verb, a)
	case isSA:
		return forbidden(u, "impersonate", Attributes{ResourceRequest: true, Resource: "serviceaccounts", Namespace: saNS, Name: saName})
	}
	return forbidden(u, "impersonate", Attributes{ResourceRequest: true, Resource: "users", Name: wanted.Name})
}

// serviceAccountName splits system:serviceaccount:<namespace>:<name>.
func serviceAccountName(s string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(s, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	return namespace, name, ok && namespace != "" && name != "" && !strings.Contains(name, ":")
}
