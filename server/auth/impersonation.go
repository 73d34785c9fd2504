package auth

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ImpersonationRefused returns the 403 Forbidden for a request that asks to
// act as someone else (an Impersonate-User, Impersonate-Group,
// Impersonate-Uid or Impersonate-Extra-* header), or nil when it carries
// none. objwatch does not implement impersonation; ignoring the headers
// would run the request as u, so it is refused instead, with the Status
// kube-apiserver sends to a user its authorizer does not allow to
// impersonate: the first of the requested identities, in the order
// kube-apiserver checks them (the user, then groups, extras, uid), names
// the resource, e.g.
//
//	users "alice" is forbidden: User "admin" cannot impersonate resource "users" in API group "" at the cluster scope
func ImpersonationRefused(h http.Header, u User) error {
	var (
		gr            schema.GroupResource
		sub, ns, name string
		found         bool
	)
	set := func(g, resource, subresource, namespace, n string) {
		if !found {
			gr, sub, ns, name, found = schema.GroupResource{Group: g, Resource: resource}, subresource, namespace, n, true
		}
	}
	if user := h.Get(authenticationv1.ImpersonateUserHeader); user != "" {
		if sa, ok := strings.CutPrefix(user, "system:serviceaccount:"); ok && strings.Count(sa, ":") == 1 {
			saNS, saName, _ := strings.Cut(sa, ":")
			set("", "serviceaccounts", "", saNS, saName)
		} else {
			set("", "users", "", "", user)
		}
	}
	for _, g := range h.Values(authenticationv1.ImpersonateGroupHeader) {
		set("", "groups", "", "", g)
	}
	var extras []string
	for k := range h {
		if strings.HasPrefix(k, authenticationv1.ImpersonateUserExtraHeaderPrefix) {
			extras = append(extras, k)
		}
	}
	sort.Strings(extras)
	for _, k := range extras {
		key := strings.ToLower(strings.TrimPrefix(k, authenticationv1.ImpersonateUserExtraHeaderPrefix))
		if unescaped, err := url.PathUnescape(key); err == nil {
			key = unescaped
		}
		for _, v := range h[k] {
			set(authenticationv1.GroupName, "userextras", key, "", v)
		}
	}
	if uid := h.Get(authenticationv1.ImpersonateUIDHeader); uid != "" {
		set(authenticationv1.GroupName, "uids", "", "", uid)
	}
	if !found {
		// A header present but empty still asks for impersonation.
		for k := range h {
			if strings.HasPrefix(k, "Impersonate-") {
				set("", "users", "", "", "")
				break
			}
		}
	}
	if !found {
		return nil
	}
	resource := gr.Resource
	if sub != "" {
		resource += "/" + sub
	}
	scope := "at the cluster scope"
	if ns != "" {
		scope = fmt.Sprintf("in the namespace %q", ns)
	}
	return apierrors.NewForbidden(gr, name, fmt.Errorf("User %q cannot impersonate resource %q in API group %q %s", u.Name, resource, gr.Group, scope))
}
