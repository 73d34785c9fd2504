package rbac

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/objwatch/objwatch/server/auth"
)

// IsSystemMasters reports whether groups hold system:masters, the group
// kube-apiserver allows everything before asking RBAC (its
// privileged-groups authorizer). Authorize does not treat it specially:
// the caller bypasses RBAC for it (as the bootstrap ClusterRoleBinding
// cluster-admin would allow it everything anyway).
func IsSystemMasters(groups []string) bool {
	return slices.Contains(groups, user.SystemPrivilegedGroup)
}

// ServerReason is the reason kube-apiserver (authorizers Node,RBAC) gives
// for a denial RBAC gave reason for: "rbac: " + reason, or "" (the union
// of authorizers prefixes each authorizer's non-empty reason with its
// name).
func ServerReason(reason string) string {
	if reason == "" {
		return ""
	}
	return "rbac: " + reason
}

var sanitizer = strings.NewReplacer(`&`, "&amp;", `<`, "&lt;", `>`, "&gt;")

// ForbiddenMessage is the message of kube-apiserver's 403 for the denied
// request a of userName, reason being Authorize's (RBAC's) reason:
//
//	User "alice" cannot list resource "configmaps" in API group "" in the namespace "b"
//	User "alice" cannot list resource "namespaces" in API group "" at the cluster scope
//	User "alice" cannot get path "/foo"
//
// followed by ": rbac: <reason>" when reason is not "". The Status'
// message is "<resource>[.group] [\"<name>\"] is forbidden: " + this, as
// apierrors.NewForbidden(schema.GroupResource{a.APIGroup, a.Resource},
// a.Name, errors.New(this)) builds it.
func ForbiddenMessage(userName string, a auth.Attributes, reason string) string {
	var msg string
	switch {
	case !a.ResourceRequest:
		msg = fmt.Sprintf("User %q cannot %s path %q", userName, a.Verb, a.Path)
	default:
		resource := a.Resource
		if a.Subresource != "" {
			resource += "/" + a.Subresource
		}
		if a.Namespace != "" {
			msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", userName, a.Verb, resource, a.APIGroup, a.Namespace)
		} else {
			msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", userName, a.Verb, resource, a.APIGroup)
		}
	}
	msg = sanitizer.Replace(msg)
	if reason != "" {
		msg += ": " + ServerReason(reason)
	}
	return msg
}
