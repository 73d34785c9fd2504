package rbac

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/server/auth"
)

func pr(verbs, groups, resources []string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources}
}

func role(ns, name string, rules ...rbacv1.PolicyRule) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules}
}

func clusterRole(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
}

func userS(n string) rbacv1.Subject {
	return rbacv1.Subject{Kind: "User", APIGroup: rbacv1.GroupName, Name: n}
}
func groupS(n string) rbacv1.Subject {
	return rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: n}
}
func saS(ns, n string) rbacv1.Subject {
	return rbacv1.Subject{Kind: "ServiceAccount", Namespace: ns, Name: n}
}

func rb(ns, name, kind, roleName string, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: roleName}, Subjects: subjects}
}

func crb(name, roleName string, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName}, Subjects: subjects}
}

func ss(v ...string) []string { return v }

// docsIndex holds the examples of Kubernetes' RBAC documentation
// (https://kubernetes.io/docs/reference/access-authn-authz/rbac/) and the
// cases checked against kube-apiserver v1.37.2 (reference kit, Node,RBAC)
// with SubjectAccessReviews.
func docsIndex() *Index {
	x := NewIndex()
	cr, crbs := Bootstrap()
	x.Replace(
		[]*rbacv1.Role{
			role("default", "pod-reader", pr(ss("get", "watch", "list"), ss(""), ss("pods"))),
			{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "configmap-updater"}, Rules: []rbacv1.PolicyRule{
				{APIGroups: ss(""), Resources: ss("configmaps"), ResourceNames: ss("my-configmap"), Verbs: ss("update", "get")}}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "dev", Name: "cm-named"}, Rules: []rbacv1.PolicyRule{
				{APIGroups: ss(""), Resources: ss("configmaps"), ResourceNames: ss("my-configmap"), Verbs: ss("update", "get", "list")}}},
		},
		append(cr,
			clusterRole("secret-reader", pr(ss("get", "watch", "list"), ss(""), ss("secrets"))),
			clusterRole("scaler", pr(ss("get"), ss("*"), ss("*/scale")), rbacv1.PolicyRule{Verbs: ss("get"), NonResourceURLs: ss("/api/*", "/healthz")}),
		),
		[]*rbacv1.RoleBinding{
			rb("default", "read-pods", "Role", "pod-reader", userS("jane")),
			rb("development", "read-secrets", "ClusterRole", "secret-reader", userS("dave")),
			rb("default", "update-cm", "Role", "configmap-updater", userS("erin")),
			rb("dev", "cm-named", "Role", "cm-named", userS("bob"), saS("", "bot")),
			rb("dev", "scaler", "ClusterRole", "scaler", groupS("scalers")),
			rb("dev", "missing", "Role", "nosuch", userS("alice")),
			rb("dev", "missing2", "ClusterRole", "nosuchcr", userS("alice")),
			rb("dev", "admins", "ClusterRole", "cluster-admin", userS("nsadmin")),
			rb("dev", "sa-other-ns", "ClusterRole", "secret-reader", saS("ci", "builder")),
		},
		append(crbs,
			crb("read-secrets-global", "secret-reader", groupS("manager")),
			crb("scaler-global", "scaler", userS("carol")),
			crb("crb-sa-no-ns", "cluster-admin", saS("", "ghost")),
			crb("crb-sa", "secret-reader", saS("kube-system", "ctl")),
			crb("weird-kind", "cluster-admin", rbacv1.Subject{Kind: "Robot", Name: "r2"}),
		),
	)
	return x
}

func TestAuthorize(t *testing.T) {
	x := docsIndex()
	auth0 := []string{"system:authenticated"}
	for _, c := range []struct {
		name   string
		user   string
		groups []string
		a      auth.Attributes
		want   bool
		reason string
	}{
		// Kubernetes' documentation.
		{"pod-reader", "jane", nil, res("list", "", "pods", "", "default", ""), true, `RBAC: allowed by RoleBinding "read-pods/default" of Role "pod-reader" to User "jane"`},
		{"pod-reader other ns", "jane", nil, res("list", "", "pods", "", "kube-system", ""), false, ""},
		{"pod-reader cluster scope", "jane", nil, res("list", "", "pods", "", "", ""), false, ""},
		{"pod-reader no delete", "jane", nil, res("delete", "", "pods", "", "default", "p"), false, ""},
		{"RoleBinding to ClusterRole in its namespace", "dave", nil, res("get", "", "secrets", "", "development", "s"), true, `RBAC: allowed by RoleBinding "read-secrets/development" of ClusterRole "secret-reader" to User "dave"`},
		{"RoleBinding to ClusterRole only its namespace", "dave", nil, res("get", "", "secrets", "", "default", "s"), false, ""},
		{"RoleBinding to ClusterRole not cluster-wide", "dave", nil, res("list", "", "secrets", "", "", ""), false, ""},
		{"ClusterRoleBinding any namespace", "x", ss("manager"), res("get", "", "secrets", "", "anywhere", "s"), true, `RBAC: allowed by ClusterRoleBinding "read-secrets-global" of ClusterRole "secret-reader" to Group "manager"`},
		{"ClusterRoleBinding cluster-wide list", "x", ss("manager"), res("list", "", "secrets", "", "", ""), true, `RBAC: allowed by ClusterRoleBinding "read-secrets-global" of ClusterRole "secret-reader" to Group "manager"`},
		{"resourceNames get", "erin", nil, res("get", "", "configmaps", "", "default", "my-configmap"), true, `RBAC: allowed by RoleBinding "update-cm/default" of Role "configmap-updater" to User "erin"`},
		{"resourceNames update", "erin", nil, res("update", "", "configmaps", "", "default", "my-configmap"), true, `RBAC: allowed by RoleBinding "update-cm/default" of Role "configmap-updater" to User "erin"`},
		{"resourceNames other name", "erin", nil, res("get", "", "configmaps", "", "default", "other"), false, ""},
		{"resourceNames create", "erin", nil, res("create", "", "configmaps", "", "default", ""), false, ""},
		// kube-apiserver v1.37.2 answered these (SubjectAccessReview):
		// 1 true, 2 false "", 3 true, 4 true (ServiceAccount "bot/dev"), 5 false.
		{"kube 1 named get", "bob", nil, res("get", "", "configmaps", "", "dev", "my-configmap"), true, `RBAC: allowed by RoleBinding "cm-named/dev" of Role "cm-named" to User "bob"`},
		{"kube 2 list without name", "bob", nil, res("list", "", "configmaps", "", "dev", ""), false, ""},
		{"kube 3 list with name", "bob", nil, res("list", "", "configmaps", "", "dev", "my-configmap"), true, `RBAC: allowed by RoleBinding "cm-named/dev" of Role "cm-named" to User "bob"`},
		{"kube 4 ServiceAccount defaults to binding namespace", "system:serviceaccount:dev:bot", nil, res("get", "", "configmaps", "", "dev", "my-configmap"), true, `RBAC: allowed by RoleBinding "cm-named/dev" of Role "cm-named" to ServiceAccount "bot/dev"`},
		{"kube 5 ServiceAccount of another namespace", "system:serviceaccount:other:bot", nil, res("get", "", "configmaps", "", "dev", "my-configmap"), false, ""},
		// 6 true, 7 false, 8 false (nonResourceURLs from a RoleBinding never apply), 9 true, 10 false, 11 false, 12 false, 13 true, 14 true, 15 true (first matching subject: User).
		{"kube 6 */scale via RoleBinding", "x", ss("scalers"), res("get", "apps", "deployments", "scale", "dev", ""), true, `RBAC: allowed by RoleBinding "scaler/dev" of ClusterRole "scaler" to Group "scalers"`},
		{"kube 7 */scale not the resource", "x", ss("scalers"), res("get", "apps", "deployments", "", "dev", ""), false, ""},
		{"kube 8 url via RoleBinding", "x", ss("scalers"), path("get", "/api/v1"), false, ""},
		{"kube 9 url prefix", "carol", nil, path("get", "/api/v1"), true, `RBAC: allowed by ClusterRoleBinding "scaler-global" of ClusterRole "scaler" to User "carol"`},
		{"kube 10 url prefix not parent", "carol", nil, path("get", "/api"), false, ""},
		{"kube 11 url exact only", "carol", nil, path("get", "/healthz/etcd"), false, ""},
		{"kube 12 RoleBinding not cluster scope", "x", ss("scalers"), res("get", "", "nodes", "scale", "", ""), false, ""},
		{"kube 13 ClusterRoleBinding cluster scope", "carol", nil, res("get", "", "foo", "scale", "", ""), true, `RBAC: allowed by ClusterRoleBinding "scaler-global" of ClusterRole "scaler" to User "carol"`},
		{"kube 14 ClusterRoleBinding in a namespace", "carol", nil, res("get", "apps", "deployments", "scale", "dev", ""), true, `RBAC: allowed by ClusterRoleBinding "scaler-global" of ClusterRole "scaler" to User "carol"`},
		{"kube 15 first subject described", "bob", ss("scalers"), res("get", "", "configmaps", "", "dev", "my-configmap"), true, `RBAC: allowed by RoleBinding "cm-named/dev" of Role "cm-named" to User "bob"`},
		// kube: 403 "...: rbac: RBAC: [role... "nosuch" not found, clusterrole... "nosuchcr" not found]".
		{"missing roles give errors", "alice", auth0, res("list", "", "configmaps", "", "dev", ""), false,
			`RBAC: [role.rbac.authorization.k8s.io "nosuch" not found, clusterrole.rbac.authorization.k8s.io "nosuchcr" not found]`},
		{"missing roles elsewhere are not visited", "alice", auth0, res("list", "", "configmaps", "", "prod", ""), false, ""},
		{"bootstrap basic-user", "alice", auth0, res("create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "", ""), true,
			`RBAC: allowed by ClusterRoleBinding "system:basic-user" of ClusterRole "system:basic-user" to Group "system:authenticated"`},
		{"bootstrap discovery", "alice", auth0, path("get", "/apis/apps"), true,
			`RBAC: allowed by ClusterRoleBinding "system:discovery" of ClusterRole "system:discovery" to Group "system:authenticated"`},
		{"bootstrap public-info unauthenticated", "system:anonymous", ss("system:unauthenticated"), path("get", "/version"), true,
			`RBAC: allowed by ClusterRoleBinding "system:public-info-viewer" of ClusterRole "system:public-info-viewer" to Group "system:unauthenticated"`},
		{"anonymous no discovery", "system:anonymous", ss("system:unauthenticated"), path("get", "/api"), false, ""},
		{"system:masters via cluster-admin binding", "root", ss("system:masters"), res("delete", "", "nodes", "", "", "n"), true,
			`RBAC: allowed by ClusterRoleBinding "cluster-admin" of ClusterRole "cluster-admin" to Group "system:masters"`},
		{"cluster-admin RoleBinding: namespace only", "nsadmin", nil, res("delete", "", "secrets", "", "dev", "s"), true,
			`RBAC: allowed by RoleBinding "admins/dev" of ClusterRole "cluster-admin" to User "nsadmin"`},
		{"cluster-admin RoleBinding: not namespaces list", "nsadmin", nil, res("list", "", "namespaces", "", "", ""), false, ""},
		{"cluster-admin RoleBinding: not urls", "nsadmin", nil, path("get", "/metrics"), false, ""},
		{"ServiceAccount subject with namespace in a RoleBinding", "system:serviceaccount:ci:builder", nil, res("get", "", "secrets", "", "dev", "s"), true,
			`RBAC: allowed by RoleBinding "sa-other-ns/dev" of ClusterRole "secret-reader" to ServiceAccount "builder/ci"`},
		{"ServiceAccount in ClusterRoleBinding", "system:serviceaccount:kube-system:ctl", nil, res("get", "", "secrets", "", "x", "s"), true,
			`RBAC: allowed by ClusterRoleBinding "crb-sa" of ClusterRole "secret-reader" to ServiceAccount "ctl/kube-system"`},
		{"ServiceAccount in ClusterRoleBinding without namespace matches nobody", "system:serviceaccount::ghost", nil, res("get", "", "secrets", "", "x", "s"), false, ""},
		{"ServiceAccount user name is also a user", "system:serviceaccount:kube-system:other", nil, res("get", "", "secrets", "", "x", "s"), false, ""},
		{"unknown subject kind", "r2", nil, res("get", "", "pods", "", "x", ""), false, ""},
		{"groups are not users", "manager", nil, res("get", "", "secrets", "", "x", "s"), false, ""},
		{"users are not groups", "x", ss("jane"), res("list", "", "pods", "", "default", ""), false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, reason := x.Authorize(c.user, c.groups, c.a)
			if got != c.want || reason != c.reason {
				t.Errorf("Authorize(%q, %q, %+v) = %v, %q\nwant %v, %q", c.user, c.groups, c.a, got, reason, c.want, c.reason)
			}
		})
	}
}

func TestUpdates(t *testing.T) {
	x := NewIndex()
	get := res("get", "", "pods", "", "a", "p")
	check := func(step string, want bool) {
		t.Helper()
		if got, _ := x.Authorize("u", ss("g"), get); got != want {
			t.Fatalf("%s: allowed %v, want %v", step, got, want)
		}
	}
	check("empty", false)
	x.SetRoleBinding(rb("a", "b", "Role", "r", userS("u")))
	check("binding without role", false)
	if _, reason := x.Authorize("u", nil, get); reason != `RBAC: role.rbac.authorization.k8s.io "r" not found` {
		t.Fatalf("reason %q", reason)
	}
	x.SetRole(role("a", "r", pr(ss("get"), ss(""), ss("pods"))))
	check("role added", true)
	x.SetRole(role("a", "r", pr(ss("list"), ss(""), ss("pods"))))
	check("role changed", false)
	x.SetRole(role("a", "r", pr(ss("get"), ss(""), ss("pods"))))
	check("role back", true)
	x.SetRoleBinding(rb("a", "b", "Role", "r", userS("someone-else")))
	check("subject changed", false)
	x.SetRoleBinding(rb("a", "b", "Role", "r", groupS("g"), userS("u")))
	check("group and user", true)
	x.DeleteRoleBinding("a", "b")
	check("binding deleted", false)
	x.SetRoleBinding(rb("a", "b", "Role", "r", userS("u")))
	x.DeleteRole("a", "r")
	check("role deleted", false)
	x.SetClusterRole(clusterRole("cr", pr(ss("get"), ss(""), ss("pods"))))
	x.SetClusterRoleBinding(crb("c", "cr", groupS("g")))
	check("cluster binding", true)
	x.DeleteClusterRole("cr")
	check("cluster role deleted", false)
	x.SetClusterRole(clusterRole("cr", pr(ss("get"), ss(""), ss("pods"))))
	check("cluster role back", true)
	x.DeleteClusterRoleBinding("c")
	check("cluster binding deleted", false)
	x.DeleteClusterRoleBinding("c") // deleting what is not there
	x.DeleteRoleBinding("zz", "zz") // deleting what is not there
	x.SetClusterRoleBinding(crb("c", "cr", groupS("g")))
	x.Replace(nil, nil, nil, nil)
	check("replaced by nothing", false)
	// Replace with a duplicate binding: the last one wins.
	x.Replace(nil, []*rbacv1.ClusterRole{clusterRole("cr", pr(ss("get"), ss(""), ss("pods")))}, nil,
		[]*rbacv1.ClusterRoleBinding{crb("c", "cr", groupS("g")), crb("c", "cr", userS("nobody"))})
	check("replace duplicate", false)
	x.SetClusterRoleBinding(crb("c", "cr", userS("nobody"), groupS("g")))
	check("after replace", true)
	if got := len(x.ClusterRoles()); got != 1 {
		t.Fatalf("ClusterRoles: %d", got)
	}
}

// TestBindingOrder: many bindings on one subject stay sorted and each is
// found, through updates.
func TestBindingOrder(t *testing.T) {
	x := NewIndex()
	for i := range 100 {
		n := fmt.Sprintf("r%02d", (i*37)%100)
		x.SetRole(role("a", n, pr(ss("get"), ss(""), ss(n))))
		x.SetRoleBinding(rb("a", n, "Role", n, groupS("g")))
	}
	for i := range 100 {
		if i%3 == 0 {
			x.DeleteRoleBinding("a", fmt.Sprintf("r%02d", i))
		}
	}
	rules, err := x.PolicyRules("u", ss("g"), "a")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rules {
		got = append(got, r.Resources[0])
	}
	var want []string
	for i := range 100 {
		if i%3 != 0 {
			want = append(want, fmt.Sprintf("r%02d", i))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rules %v\nwant %v", got, want)
	}
}

func TestRulesFor(t *testing.T) {
	x := docsIndex()
	rr, nr, incomplete, evalErr := x.RulesFor("alice", ss("system:authenticated"), "dev")
	// kube-apiserver answers the same rules (its ClusterRoleBindings in
	// informer order, not sorted) and this evaluationError, incomplete false.
	wantRR := []authorizationv1.ResourceRule{
		{Verbs: ss("create"), APIGroups: ss("authorization.k8s.io"), Resources: ss("selfsubjectaccessreviews", "selfsubjectrulesreviews")},
		{Verbs: ss("create"), APIGroups: ss("authentication.k8s.io"), Resources: ss("selfsubjectreviews")},
	}
	wantNR := []authorizationv1.NonResourceRule{
		{Verbs: ss("get"), NonResourceURLs: ss("/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/")},
		{Verbs: ss("get"), NonResourceURLs: ss("/healthz", "/livez", "/readyz", "/version", "/version/")},
	}
	if fmt.Sprint(rr) != fmt.Sprint(wantRR) || fmt.Sprint(nr) != fmt.Sprint(wantNR) || incomplete ||
		evalErr != `[role.rbac.authorization.k8s.io "nosuch" not found, clusterrole.rbac.authorization.k8s.io "nosuchcr" not found]` {
		t.Fatalf("RulesFor:\n%v\n%v\n%v %q", rr, nr, incomplete, evalErr)
	}
	// A rule with both resources and URLs (not valid in Kubernetes, but
	// stored) gives one of each; rules of bindings in order; ClusterRoleBindings first.
	y := NewIndex()
	y.SetClusterRole(clusterRole("both", rbacv1.PolicyRule{Verbs: ss("get"), APIGroups: ss(""), Resources: ss("pods"), NonResourceURLs: ss("/x")}))
	y.SetRole(role("n", "r1", pr(ss("get"), ss(""), ss("a")), pr(ss("get"), ss(""), ss("b"))))
	y.SetRole(role("n", "r2", pr(ss("get"), ss(""), ss("c"))))
	y.SetRoleBinding(rb("n", "z", "Role", "r1", userS("u")))
	y.SetRoleBinding(rb("n", "a", "Role", "r2", groupS("g")))
	y.SetClusterRoleBinding(crb("zz", "both", userS("u")))
	rr, nr, _, evalErr = y.RulesFor("u", ss("g"), "n")
	if got := fmt.Sprint(rr, nr, evalErr); got != "[{[get] [] [pods] []} {[get] [] [c] []} {[get] [] [a] []} {[get] [] [b] []}] [{[get] [/x]}]" {
		t.Fatalf("RulesFor: %s", got)
	}
	// Namespace "": ClusterRoleBindings only.
	rr, _, _, _ = y.RulesFor("u", ss("g"), "")
	if len(rr) != 1 {
		t.Fatalf("cluster-wide rules: %v", rr)
	}
}

func TestRoleRefRules(t *testing.T) {
	x := docsIndex()
	if r, err := x.RoleRefRules(rbacv1.RoleRef{Kind: "Role", Name: "pod-reader"}, "default"); err != nil || len(r) != 1 {
		t.Fatal(r, err)
	}
	if _, err := x.RoleRefRules(rbacv1.RoleRef{Kind: "Role", Name: "pod-reader"}, ""); err == nil || err.Error() != `role.rbac.authorization.k8s.io "pod-reader" not found` {
		t.Fatal(err)
	}
	if _, err := x.RoleRefRules(rbacv1.RoleRef{Kind: "Thing", Name: "x"}, "default"); err == nil || err.Error() != `unsupported role reference kind: "Thing"` {
		t.Fatal(err)
	}
}

// TestConcurrent runs readers during writes (go test -race).
func TestConcurrent(t *testing.T) {
	x := docsIndex()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				x.Authorize("jane", nil, res("list", "", "pods", "", "default", ""))
				x.RulesFor("alice", ss("system:authenticated"), "dev")
			}
		})
	}
	for i := range 500 {
		x.SetRoleBinding(rb("default", fmt.Sprint("b", i%20), "Role", "pod-reader", userS(fmt.Sprint("u", i))))
		x.SetRole(role("default", fmt.Sprint("r", i%7)))
		if i%50 == 0 {
			x.DeleteRoleBinding("default", "b3")
		}
	}
	close(stop)
	wg.Wait()
	if ok, _ := x.Authorize("jane", nil, res("list", "", "pods", "", "default", "")); !ok {
		t.Fatal("jane lost her binding")
	}
}
