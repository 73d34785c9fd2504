package rbac

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/objwatch/objwatch/server/auth"
)

func res(verb, group, resource, sub, ns, name string) auth.Attributes {
	return auth.Attributes{ResourceRequest: true, Verb: verb, APIGroup: group, Resource: resource, Subresource: sub, Namespace: ns, Name: name}
}

func path(verb, p string) auth.Attributes { return auth.Attributes{Verb: verb, Path: p} }

func TestRuleAllows(t *testing.T) {
	rule := func(verbs, groups, resources, names []string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources, ResourceNames: names}
	}
	url := func(verbs []string, urls ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{Verbs: verbs, NonResourceURLs: urls}
	}
	s := func(v ...string) []string { return v }
	for _, c := range []struct {
		name string
		rule rbacv1.PolicyRule
		a    auth.Attributes
		want bool
	}{
		{"exact", rule(s("get"), s(""), s("pods"), nil), res("get", "", "pods", "", "a", ""), true},
		{"other verb", rule(s("get"), s(""), s("pods"), nil), res("list", "", "pods", "", "a", ""), false},
		{"verb star", rule(s("*"), s(""), s("pods"), nil), res("deletecollection", "", "pods", "", "a", ""), true},
		{"verbs list", rule(s("list", "watch"), s(""), s("pods"), nil), res("watch", "", "pods", "", "a", ""), true},
		{"no verbs", rule(nil, s(""), s("pods"), nil), res("get", "", "pods", "", "a", ""), false},
		{"core group only", rule(s("get"), s(""), s("deployments"), nil), res("get", "apps", "deployments", "", "a", ""), false},
		{"group star", rule(s("get"), s("*"), s("deployments"), nil), res("get", "apps", "deployments", "", "a", ""), true},
		{"group star core", rule(s("get"), s("*"), s("pods"), nil), res("get", "", "pods", "", "a", ""), true},
		{"no groups", rule(s("get"), nil, s("pods"), nil), res("get", "", "pods", "", "a", ""), false},
		{"resource star", rule(s("get"), s(""), s("*"), nil), res("get", "", "secrets", "", "a", ""), true},
		{"resource star covers subresource", rule(s("get"), s(""), s("*"), nil), res("get", "", "pods", "log", "a", ""), true},
		{"resource does not cover subresource", rule(s("get"), s(""), s("pods"), nil), res("get", "", "pods", "status", "a", ""), false},
		{"subresource exact", rule(s("get"), s(""), s("pods/status"), nil), res("get", "", "pods", "status", "a", ""), true},
		{"subresource rule not the resource", rule(s("get"), s(""), s("pods/status"), nil), res("get", "", "pods", "", "a", ""), false},
		{"other subresource", rule(s("get"), s(""), s("pods/status"), nil), res("get", "", "pods", "log", "a", ""), false},
		{"star scale", rule(s("get"), s("*"), s("*/scale"), nil), res("get", "apps", "deployments", "scale", "a", ""), true},
		{"star scale not resource", rule(s("get"), s("*"), s("*/scale"), nil), res("get", "apps", "deployments", "", "a", ""), false},
		{"star scale other sub", rule(s("get"), s("*"), s("*/scale"), nil), res("get", "apps", "deployments", "status", "a", ""), false},
		{"star scale suffix only", rule(s("get"), s("*"), s("*/scale"), nil), res("get", "apps", "deployments", "upscale", "a", ""), false},
		{"resource prefix not match", rule(s("get"), s(""), s("pod/status"), nil), res("get", "", "pods", "status", "a", ""), false},
		{"combined tricky", rule(s("get"), s(""), s("a/b/c"), nil), res("get", "", "a", "b/c", "a", ""), true},
		{"name match", rule(s("get"), s(""), s("configmaps"), s("my-configmap")), res("get", "", "configmaps", "", "a", "my-configmap"), true},
		{"name other", rule(s("get"), s(""), s("configmaps"), s("my-configmap")), res("get", "", "configmaps", "", "a", "other"), false},
		{"name none (list)", rule(s("list"), s(""), s("configmaps"), s("my-configmap")), res("list", "", "configmaps", "", "a", ""), false},
		{"name from field selector (list)", rule(s("list"), s(""), s("configmaps"), s("my-configmap")), res("list", "", "configmaps", "", "a", "my-configmap"), true},
		{"create has no name", rule(s("create"), s(""), s("configmaps"), s("my-configmap")), res("create", "", "configmaps", "", "a", ""), false},
		{"cluster scope same rule", rule(s("get"), s(""), s("nodes"), nil), res("get", "", "nodes", "", "", ""), true},
		{"resource rule not a path", rule(s("get"), s("*"), s("*"), nil), path("get", "/healthz"), false},
		{"url exact", url(s("get"), "/healthz"), path("get", "/healthz"), true},
		{"url exact no sub", url(s("get"), "/healthz"), path("get", "/healthz/etcd"), false},
		{"url verb", url(s("get"), "/healthz"), path("post", "/healthz"), false},
		{"url star verb", url(s("*"), "/healthz"), path("post", "/healthz"), true},
		{"url prefix", url(s("get"), "/api/*"), path("get", "/api/v1"), true},
		{"url prefix deep", url(s("get"), "/api/*"), path("get", "/api/v1/namespaces"), true},
		{"url prefix not parent", url(s("get"), "/api/*"), path("get", "/api"), false},
		{"url prefix slash", url(s("get"), "/api/*"), path("get", "/api/"), true},
		{"url prefix no slash", url(s("get"), "/api*"), path("get", "/apis"), true},
		{"url all", url(s("get"), "*"), path("get", "/anything"), true},
		{"url rule not a resource", url(s("*"), "*"), res("get", "", "pods", "", "a", ""), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := RuleAllows(&c.a, &c.rule); got != c.want {
				t.Errorf("RuleAllows(%+v, %+v) = %v, want %v", c.a, c.rule, got, c.want)
			}
		})
	}
}
