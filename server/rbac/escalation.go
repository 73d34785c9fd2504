package rbac

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/component-helpers/auth/rbac/validation"
)

// ConfirmNoEscalation returns nil when the user's own rules in namespace
// (ClusterRoleBindings' and, namespace not "", the namespace's
// RoleBindings') cover every rule of rules (component-helpers' Covers),
// else Kubernetes' error (pkg/registry/rbac/validation ConfirmNoEscalation),
// message for message:
//
//	user "alice" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
//	{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}
//
// the missing rules compacted, one a line, sorted and deduplicated, then
// "; resolution errors: [...]" when some of the user's bindings name
// missing roles. Those errors are kube-apiserver's registry's, which names
// the resource being written whatever the missing role's kind:
// <resource>.rbac.authorization.k8s.io "x" not found, so resource is the
// plural of the object the user writes (roles, clusterroles, rolebindings
// or clusterrolebindings). Kubernetes returns it inside a 403 (Forbidden for the
// role or binding being written); the "escalate" and "bind" verb checks
// that let a user through without holding the rules are the caller's.
func (x *Index) ConfirmNoEscalation(userName string, groups []string, namespace, resource string, rules []rbacv1.PolicyRule) error {
	owner, err := x.policyRules(userName, groups, namespace, func(_, name string) error {
		return apierrors.NewNotFound(rbacv1.Resource(resource), name)
	})
	covered, missing := validation.Covers(owner, rules)
	if covered {
		return nil
	}
	var lines []string
	for _, r := range compactRules(missing) {
		lines = append(lines, compactString(r))
	}
	slices.Sort(lines)
	lines = slices.Compact(lines)
	msg := fmt.Sprintf("user %q (groups=%q) is attempting to grant RBAC permissions not currently held:\n%s", userName, groups, strings.Join(lines, "\n"))
	if err != nil {
		msg += fmt.Sprintf("; resolution errors: %v", []error{err})
	}
	return errors.New(msg)
}

type simpleResource struct {
	group, resource, resourceName string
	hasName                       bool
}

// compactRules is Kubernetes' CompactRules: rules naming one API group and
// one resource (and at most one resource name) and nothing else are
// merged into one rule per (group, resource, name) with all their verbs.
// Its output order does not matter: the lines are sorted afterwards.
func compactRules(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, 0, len(rules))
	simple := map[simpleResource]*rbacv1.PolicyRule{}
	var order []simpleResource
	for _, r := range rules {
		sr, ok := isSimpleResourceRule(&r)
		if !ok {
			out = append(out, r)
			continue
		}
		if e, ok := simple[sr]; ok {
			if e.Verbs == nil {
				e.Verbs = []string{}
			}
			e.Verbs = append(e.Verbs, r.Verbs...)
			continue
		}
		simple[sr] = r.DeepCopy()
		order = append(order, sr)
	}
	for _, sr := range order {
		out = append(out, *simple[sr])
	}
	return out
}

func isSimpleResourceRule(r *rbacv1.PolicyRule) (simpleResource, bool) {
	if len(r.ResourceNames) > 1 || len(r.NonResourceURLs) > 0 || len(r.APIGroups) != 1 || len(r.Resources) != 1 {
		return simpleResource{}, false
	}
	simpleRule := &rbacv1.PolicyRule{APIGroups: r.APIGroups, Resources: r.Resources, Verbs: r.Verbs, ResourceNames: r.ResourceNames}
	if !reflect.DeepEqual(simpleRule, r) {
		return simpleResource{}, false
	}
	sr := simpleResource{group: r.APIGroups[0], resource: r.Resources[0]}
	if len(r.ResourceNames) == 1 {
		sr.hasName, sr.resourceName = true, r.ResourceNames[0]
	}
	return sr, true
}

// compactString is Kubernetes' CompactString of a rule, e.g.
// {APIGroups:[""], Resources:["secrets"], Verbs:["get"]}.
func compactString(r rbacv1.PolicyRule) string {
	var parts []string
	var args []any
	add := func(name string, v []string) {
		if len(v) > 0 {
			parts = append(parts, name+":%q")
			args = append(args, v)
		}
	}
	add("APIGroups", r.APIGroups)
	add("Resources", r.Resources)
	add("NonResourceURLs", r.NonResourceURLs)
	add("ResourceNames", r.ResourceNames)
	add("Verbs", r.Verbs)
	return fmt.Sprintf("{"+strings.Join(parts, ", ")+"}", args...)
}
