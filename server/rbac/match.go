package rbac

import (
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/objwatch/objwatch/server/auth"
)

// RuleAllows reports whether rule allows the request a, exactly as
// Kubernetes' RBAC authorizer (plugin/pkg/auth/authorizer/rbac RuleAllows)
// decides it: for a resource request the verb, API group, resource
// (resource/subresource, or */subresource) and name must all match; for a
// non-resource request the verb and the path.
func RuleAllows(a *auth.Attributes, rule *rbacv1.PolicyRule) bool {
	if a.ResourceRequest {
		return verbMatches(rule, a.Verb) &&
			apiGroupMatches(rule, a.APIGroup) &&
			resourceMatches(rule, a.Resource, a.Subresource) &&
			resourceNameMatches(rule, a.Name)
	}
	return verbMatches(rule, a.Verb) && nonResourceURLMatches(rule, a.Path)
}

func verbMatches(rule *rbacv1.PolicyRule, verb string) bool {
	for _, v := range rule.Verbs {
		if v == rbacv1.VerbAll || v == verb {
			return true
		}
	}
	return false
}

func apiGroupMatches(rule *rbacv1.PolicyRule, group string) bool {
	for _, g := range rule.APIGroups {
		if g == rbacv1.APIGroupAll || g == group {
			return true
		}
	}
	return false
}

// resourceMatches is Kubernetes' ResourceMatches without building the
// combined "resource/subresource" string: a rule resource matches when it
// is "*", equals the combined resource, or is "*/<subresource>".
func resourceMatches(rule *rbacv1.PolicyRule, resource, subresource string) bool {
	for _, r := range rule.Resources {
		if r == rbacv1.ResourceAll {
			return true
		}
		if subresource == "" {
			if r == resource {
				return true
			}
			continue
		}
		// r == resource + "/" + subresource
		if len(r) == len(resource)+1+len(subresource) &&
			strings.HasPrefix(r, resource) && r[len(resource)] == '/' && strings.HasSuffix(r, subresource) {
			return true
		}
		if len(r) == len(subresource)+2 && strings.HasPrefix(r, "*/") && strings.HasSuffix(r, subresource) {
			return true
		}
	}
	return false
}

func resourceNameMatches(rule *rbacv1.PolicyRule, name string) bool {
	if len(rule.ResourceNames) == 0 {
		return true
	}
	for _, n := range rule.ResourceNames {
		if n == name {
			return true
		}
	}
	return false
}

func nonResourceURLMatches(rule *rbacv1.PolicyRule, path string) bool {
	for _, u := range rule.NonResourceURLs {
		if u == rbacv1.NonResourceAll || u == path {
			return true
		}
		if strings.HasSuffix(u, "*") && strings.HasPrefix(path, strings.TrimRight(u, "*")) {
			return true
		}
	}
	return false
}
