package rbac

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/server/auth"
)

func TestConfirmNoEscalation(t *testing.T) {
	x := docsIndex()
	x.SetRole(role("dev", "role-maker", pr(ss("create"), ss("rbac.authorization.k8s.io"), ss("roles"))))
	x.SetRoleBinding(rb("dev", "role-maker", "Role", "role-maker", userS("alice")))
	groups := ss("system:authenticated")
	wanted := []rbacv1.PolicyRule{
		pr(ss("get"), ss(""), ss("secrets")),
		pr(ss("list"), ss(""), ss("secrets")),
		pr(ss("list"), ss("", "apps"), ss("pods", "deployments")),
		{Verbs: ss("get"), NonResourceURLs: ss("/x")},
		pr(ss("create"), ss("rbac.authorization.k8s.io"), ss("roles")),
	}
	// kube-apiserver v1.37.2's answer to alice creating this Role in dev
	// (after "roles.rbac.authorization.k8s.io \"esc\" is forbidden: "):
	want := `user "alice" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
{APIGroups:[""], Resources:["deployments"], Verbs:["list"]}
{APIGroups:[""], Resources:["pods"], Verbs:["list"]}
{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}
{APIGroups:["apps"], Resources:["deployments"], Verbs:["list"]}
{APIGroups:["apps"], Resources:["pods"], Verbs:["list"]}
{NonResourceURLs:["/x"], Verbs:["get"]}; resolution errors: [[roles.rbac.authorization.k8s.io "nosuch" not found, roles.rbac.authorization.k8s.io "nosuchcr" not found]]`
	err := x.ConfirmNoEscalation("alice", groups, "dev", "roles", wanted)
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
	// Rules she holds: no error, even with resolution errors.
	if err := x.ConfirmNoEscalation("alice", groups, "dev", "roles", wanted[4:]); err != nil {
		t.Fatal(err)
	}
	// Cluster rules count in a namespace; namespace rules not cluster-wide.
	if err := x.ConfirmNoEscalation("x", ss("manager"), "dev", "roles", []rbacv1.PolicyRule{pr(ss("get", "list"), ss(""), ss("secrets"))}); err != nil {
		t.Fatal(err)
	}
	if err := x.ConfirmNoEscalation("dave", nil, "development", "rolebindings", []rbacv1.PolicyRule{pr(ss("get"), ss(""), ss("secrets"))}); err != nil {
		t.Fatal(err)
	}
	err = x.ConfirmNoEscalation("dave", nil, "", "clusterroles", []rbacv1.PolicyRule{pr(ss("get"), ss(""), ss("secrets"))})
	if want := "user \"dave\" (groups=[]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"; err == nil || err.Error() != want {
		t.Fatalf("got %v", err)
	}
	// cluster-admin covers everything, resourceNames and URLs included.
	all := append(wanted, rbacv1.PolicyRule{Verbs: ss("get"), APIGroups: ss(""), Resources: ss("configmaps"), ResourceNames: ss("a")})
	if err := x.ConfirmNoEscalation("root", ss("system:masters"), "", "clusterroles", all); err != nil {
		t.Fatal(err)
	}
	// A resourceNames rule does not cover the whole resource.
	err = x.ConfirmNoEscalation("erin", nil, "default", "roles", []rbacv1.PolicyRule{pr(ss("get"), ss(""), ss("configmaps"))})
	if want := "user \"erin\" (groups=[]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"get\"]}"; err == nil || err.Error() != want {
		t.Fatalf("got %v", err)
	}
	if err := x.ConfirmNoEscalation("erin", nil, "default", "roles", []rbacv1.PolicyRule{{Verbs: ss("get"), APIGroups: ss(""), Resources: ss("configmaps"), ResourceNames: ss("my-configmap")}}); err != nil {
		t.Fatal(err)
	}
}

func TestCompactString(t *testing.T) {
	r := rbacv1.PolicyRule{Verbs: ss("get"), APIGroups: ss(""), Resources: ss("configmaps"), ResourceNames: ss("a", "b")}
	if got := compactString(r); got != `{APIGroups:[""], Resources:["configmaps"], ResourceNames:["a" "b"], Verbs:["get"]}` {
		t.Fatal(got)
	}
}

// TestBootstrapMatchesKube compares Bootstrap with what kube-apiserver
// v1.37.2 stored at its first start (kubectl get -o json, without the
// server-set metadata; no controller manager ran, so admin, edit and view
// have no rules yet).
func TestBootstrapMatchesKube(t *testing.T) {
	b, err := os.ReadFile("testdata/kube-v1.37.2-bootstrap.json")
	if err != nil {
		t.Fatal(err)
	}
	var kube struct {
		ClusterRoles        []*rbacv1.ClusterRole
		ClusterRoleBindings []*rbacv1.ClusterRoleBinding
	}
	if err := json.Unmarshal(b, &kube); err != nil {
		t.Fatal(err)
	}
	roles, bindings := Bootstrap()
	if d := cmp.Diff(kube.ClusterRoles, roles); d != "" {
		t.Errorf("cluster roles (-kube +ours):\n%s", d)
	}
	if d := cmp.Diff(kube.ClusterRoleBindings, bindings); d != "" {
		t.Errorf("cluster role bindings (-kube +ours):\n%s", d)
	}
}

func labelled(name string, lbls map[string]string, agg []string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	cr := clusterRole(name, rules...)
	cr.Labels = lbls
	if agg != nil {
		cr.AggregationRule = &rbacv1.AggregationRule{}
		for _, l := range agg {
			cr.AggregationRule.ClusterRoleSelectors = append(cr.AggregationRule.ClusterRoleSelectors, metav1.LabelSelector{MatchLabels: map[string]string{l: "true"}})
		}
	}
	return cr
}

func TestAggregation(t *testing.T) {
	a, b, c := pr(ss("get"), ss(""), ss("a")), pr(ss("get"), ss(""), ss("b")), pr(ss("get"), ss(""), ss("c"))
	m := map[string]string{"rbac.example.com/aggregate-to-monitoring": "true"}
	monitoring := labelled("monitoring", nil, ss("rbac.example.com/aggregate-to-monitoring"))
	endpoints := labelled("monitoring-endpoints", m, nil, b, a)
	other := labelled("z-other", m, nil, a, c) // a repeats: kept once
	unlabelled := labelled("unlabelled", nil, nil, c)
	all := []*rbacv1.ClusterRole{other, monitoring, endpoints, unlabelled}
	got := AggregationUpdates(all)
	if d := cmp.Diff(map[string][]rbacv1.PolicyRule{"monitoring": {b, a, c}}, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
	// Written back: nothing left to do.
	monitoring.Rules = got["monitoring"]
	if got := AggregationUpdates(all); len(got) != 0 {
		t.Fatalf("after write-back: %v", got)
	}
	// Removing a label removes its rules.
	other.Labels = nil
	if d := cmp.Diff(map[string][]rbacv1.PolicyRule{"monitoring": {b, a}}, AggregationUpdates(all)); d != "" {
		t.Fatalf("label removed (-want +got):\n%s", d)
	}
	monitoring.Rules = []rbacv1.PolicyRule{b, a}
	// Adding one adds them.
	unlabelled.Labels = m
	if d := cmp.Diff(map[string][]rbacv1.PolicyRule{"monitoring": {b, a, c}}, AggregationUpdates(all)); d != "" {
		t.Fatalf("label added (-want +got):\n%s", d)
	}
	// No matching role: empty rules.
	endpoints.Labels, unlabelled.Labels = nil, nil
	if d := cmp.Diff(map[string][]rbacv1.PolicyRule{"monitoring": {}}, AggregationUpdates(all)); d != "" {
		t.Fatalf("none (-want +got):\n%s", d)
	}
	// An invalid selector: no update.
	bad := clusterRole("bad", a)
	bad.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"in valid": "x"}}}}
	if got := AggregationUpdates([]*rbacv1.ClusterRole{bad, endpoints}); len(got) != 0 {
		t.Fatalf("bad selector: %v", got)
	}
}

// TestAggregationBootstrap: admin gets edit's and view's rules through
// the chain admin <- edit <- view, in Kubernetes' order.
func TestAggregationBootstrap(t *testing.T) {
	x := NewIndex()
	roles, bindings := Bootstrap()
	x.Replace(nil, roles, nil, bindings)
	up := x.AggregationUpdates()
	view, edit := viewRules(), editRules()
	adminOwn := []rbacv1.PolicyRule{
		newRule("create").groups(authorizationGroup).resources("localsubjectaccessreviews").rule(),
		newRule(verbsReadWrite...).groups(rbacGroup).resources("roles", "rolebindings").rule(),
	}
	// edit = aggregate-to-edit's rules, then view's (by name:
	// system:aggregate-to-edit < view); admin = edit < system:aggregate-to-admin.
	wantEdit := append(append([]rbacv1.PolicyRule{}, edit...), view...)
	wantAdmin := append(append([]rbacv1.PolicyRule{}, wantEdit...), adminOwn...)
	if d := cmp.Diff(map[string][]rbacv1.PolicyRule{"admin": wantAdmin, "edit": wantEdit, "view": view}, up); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
	for name, rules := range up {
		for _, cr := range roles {
			if cr.Name == name {
				c := cr.DeepCopy()
				c.Rules = rules
				x.SetClusterRole(c)
			}
		}
	}
	if up := x.AggregationUpdates(); len(up) != 0 {
		t.Fatalf("after write-back: %v", up)
	}
	x.SetRoleBinding(rb("dev", "v", "ClusterRole", "view", userS("v")))
	x.SetRoleBinding(rb("dev", "a", "ClusterRole", "admin", userS("a")))
	for _, c := range []struct {
		user, verb, group, resource string
		want                        bool
	}{
		{"v", "list", "", "pods", true},
		{"v", "get", "", "secrets", false},
		{"v", "create", "", "pods", false},
		{"a", "get", "", "secrets", true},
		{"a", "create", "rbac.authorization.k8s.io", "rolebindings", true},
		{"a", "create", "", "pods", true},
		{"a", "update", "", "resourcequotas", false},
	} {
		if got, _ := x.Authorize(c.user, nil, res(c.verb, c.group, c.resource, "", "dev", "")); got != c.want {
			t.Errorf("%s %s %s.%s: %v, want %v", c.user, c.verb, c.resource, c.group, got, c.want)
		}
	}
}

func TestReconcile(t *testing.T) {
	wantRoles, wantBindings := Bootstrap()
	// Nothing stored: create everything.
	rw, bw := Reconcile(nil, nil)
	if len(rw) != len(wantRoles) || len(bw) != len(wantBindings) {
		t.Fatalf("fresh: %d roles, %d bindings", len(rw), len(bw))
	}
	for i, w := range rw {
		if w.Op != ReconcileCreate || w.Object.Name != wantRoles[i].Name {
			t.Fatalf("fresh role %d: %s %s", i, w.Op, w.Object.Name)
		}
	}
	// Everything stored as created: nothing to do.
	stored := func() ([]*rbacv1.ClusterRole, []*rbacv1.ClusterRoleBinding) { return Bootstrap() }
	roles, bindings := stored()
	if rw, bw := Reconcile(roles, bindings); len(rw)+len(bw) != 0 {
		t.Fatalf("up to date: %v %v", rw, bw)
	}
	// Aggregated roles with aggregated rules: nothing to do either.
	for _, r := range roles {
		if r.Name == "view" {
			r.Rules = viewRules()
		}
	}
	if rw, _ := Reconcile(roles, bindings); len(rw) != 0 {
		t.Fatalf("aggregated rules: %v", rw)
	}

	// An admin trimmed system:basic-user, added a rule and a subject:
	// reconciling adds back, never removes.
	roles, bindings = stored()
	extra := pr(ss("get"), ss(""), ss("pods"))
	basic := roles[2]
	basic.Rules = []rbacv1.PolicyRule{basic.Rules[1], extra}
	basic.Labels["mine"] = "x"
	basic.Annotations[rbacv1.AutoUpdateAnnotationKey] = "true"
	disc := bindings[1]
	disc.Subjects = []rbacv1.Subject{userS("me")}
	disc.Labels = nil
	rw, bw = Reconcile(roles, bindings)
	if len(rw) != 1 || rw[0].Op != ReconcileUpdate || rw[0].Object.Name != "system:basic-user" {
		t.Fatalf("roles: %v", rw)
	}
	// Missing rules are added broken down (Covers' output), as Kubernetes does.
	if d := cmp.Diff([]rbacv1.PolicyRule{wantRoles[2].Rules[1], extra,
		pr(ss("create"), ss("authorization.k8s.io"), ss("selfsubjectaccessreviews")),
		pr(ss("create"), ss("authorization.k8s.io"), ss("selfsubjectrulesreviews"))}, rw[0].Object.Rules); d != "" {
		t.Fatalf("rules (-want +got):\n%s", d)
	}
	if rw[0].Object.Labels["mine"] != "x" || rw[0].Object.Labels[BootstrappingLabel] != BootstrappingLabelValue {
		t.Fatalf("labels %v", rw[0].Object.Labels)
	}
	if len(bw) != 1 || bw[0].Op != ReconcileUpdate || bw[0].Object.Labels[BootstrappingLabel] != BootstrappingLabelValue {
		t.Fatalf("bindings: %v", bw)
	}
	if d := cmp.Diff([]rbacv1.Subject{userS("me"), groupS("system:authenticated")}, bw[0].Object.Subjects); d != "" {
		t.Fatalf("subjects (-want +got):\n%s", d)
	}

	// autoupdate "false": left alone, whatever changed.
	basic.Annotations[rbacv1.AutoUpdateAnnotationKey] = "false"
	disc.Annotations = map[string]string{rbacv1.AutoUpdateAnnotationKey: "false"}
	if rw, bw := Reconcile(roles, bindings); len(rw)+len(bw) != 0 {
		t.Fatalf("protected: %v %v", rw, bw)
	}
	op, _, prot := ReconcileClusterRole(basic, wantRoles[2])
	if op != ReconcileUpdate || !prot {
		t.Fatalf("ReconcileClusterRole protected: %s %v", op, prot)
	}

	// A binding whose roleRef changed is recreated; a role that lost its
	// aggregationRule gets it back; a role that should not aggregate loses it.
	roles, bindings = stored()
	bindings[0].RoleRef.Name = "view"
	roles[4].AggregationRule = nil                // admin
	roles[0].AggregationRule = aggregation("x/y") // cluster-admin
	rw, bw = Reconcile(roles, bindings)
	if len(bw) != 1 || bw[0].Op != ReconcileRecreate || bw[0].Object.RoleRef.Name != "cluster-admin" {
		t.Fatalf("recreate: %v", bw)
	}
	if len(rw) != 2 || rw[0].Object.Name != "cluster-admin" || rw[0].Object.AggregationRule != nil ||
		rw[1].Object.Name != "admin" || rw[1].Object.AggregationRule == nil {
		t.Fatalf("aggregation rules: %v", rw)
	}
}

func TestForbiddenMessage(t *testing.T) {
	for _, c := range []struct {
		a      auth.Attributes
		reason string
		want   string
	}{
		// kube-apiserver v1.37.2 (reference kit's smoke test and the missing-role case).
		{res("list", "", "configmaps", "", "b", ""), "", `User "alice" cannot list resource "configmaps" in API group "" in the namespace "b"`},
		{res("list", "", "configmaps", "", "dev", ""), `RBAC: [role.rbac.authorization.k8s.io "nosuch" not found, clusterrole.rbac.authorization.k8s.io "nosuchcr" not found]`,
			`User "alice" cannot list resource "configmaps" in API group "" in the namespace "dev": rbac: RBAC: [role.rbac.authorization.k8s.io "nosuch" not found, clusterrole.rbac.authorization.k8s.io "nosuchcr" not found]`},
		{res("list", "apiextensions.k8s.io", "customresourcedefinitions", "", "", ""), "", `User "alice" cannot list resource "customresourcedefinitions" in API group "apiextensions.k8s.io" at the cluster scope`},
		{res("get", "apps", "deployments", "scale", "a", "d"), "", `User "alice" cannot get resource "deployments/scale" in API group "apps" in the namespace "a"`},
		{path("get", "/foo"), "", `User "alice" cannot get path "/foo"`},
		{path("get", "/a<b>&"), "", `User "alice" cannot get path "/a&lt;b&gt;&amp;"`},
	} {
		if got := ForbiddenMessage("alice", c.a, c.reason); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
	if !IsSystemMasters(ss("a", "system:masters")) || IsSystemMasters(ss("system:authenticated")) {
		t.Error("IsSystemMasters")
	}
}
