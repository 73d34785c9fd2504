package rbac

import (
	"fmt"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// benchIndex: the bootstrap policy plus 1,000 Roles (in 100 namespaces)
// and 10,000 RoleBindings (100 a namespace, each to one user and one
// group), and 20 ClusterRoleBindings to system:authenticated.
func benchIndex() *Index {
	roles := make([]*rbacv1.Role, 0, 1000)
	bindings := make([]*rbacv1.RoleBinding, 0, 10000)
	for ns := range 100 {
		n := fmt.Sprint("ns", ns)
		for r := range 10 {
			roles = append(roles, role(n, fmt.Sprint("role", r),
				pr(ss("get", "list", "watch"), ss(""), ss("configmaps", "secrets")),
				pr(ss("get"), ss("apps"), ss("deployments", fmt.Sprint("thing", r)))))
		}
		for b := range 100 {
			bindings = append(bindings, rb(n, fmt.Sprint("bind", b), "Role", fmt.Sprint("role", b%10),
				userS(fmt.Sprint("user", b)), groupS(fmt.Sprint("team", b%7))))
		}
	}
	clusterRoles, clusterBindings := Bootstrap()
	for i := range 20 {
		clusterRoles = append(clusterRoles, clusterRole(fmt.Sprint("cr", i), pr(ss("get"), ss(fmt.Sprint("g", i)), ss("things"))))
		clusterBindings = append(clusterBindings, crb(fmt.Sprint("crb", i), fmt.Sprint("cr", i), groupS("system:authenticated")))
	}
	x := NewIndex()
	x.Replace(roles, clusterRoles, bindings, clusterBindings)
	return x
}

// BenchmarkAuthorize: user42 (groups team0, system:authenticated) in
// ns57, allowed by her one RoleBinding there (after the 23
// ClusterRoleBindings' rules of system:authenticated and team0's
// bindings are tried).
func BenchmarkAuthorize(b *testing.B) {
	x := benchIndex()
	groups := ss("team0", "system:authenticated")
	a := res("list", "", "secrets", "", "ns57", "")
	if ok, _ := x.Authorize("user42", groups, a); !ok {
		b.Fatal("not allowed")
	}
	b.ReportAllocs()
	for b.Loop() {
		x.Authorize("user42", groups, a)
	}
}

// BenchmarkAllows is BenchmarkAuthorize without the reason, as the
// server decides requests.
func BenchmarkAllows(b *testing.B) {
	x := benchIndex()
	groups := ss("team0", "system:authenticated")
	a := res("list", "", "secrets", "", "ns57", "")
	if !x.Allows("user42", groups, &a) {
		b.Fatal("not allowed")
	}
	b.ReportAllocs()
	for b.Loop() {
		x.Allows("user42", groups, &a)
	}
}

// BenchmarkAuthorizeDenied: the same user asks for what no rule allows:
// every rule of every applicable binding is tried.
func BenchmarkAuthorizeDenied(b *testing.B) {
	x := benchIndex()
	groups := ss("team0", "system:authenticated")
	a := res("delete", "", "secrets", "", "ns57", "s")
	if ok, _ := x.Authorize("user42", groups, a); ok {
		b.Fatal("allowed")
	}
	b.ReportAllocs()
	for b.Loop() {
		x.Authorize("user42", groups, a)
	}
}

// BenchmarkAuthorizeParallel: the allowed case from all Ps at once
// (readers share nothing but the snapshot pointer).
func BenchmarkAuthorizeParallel(b *testing.B) {
	x := benchIndex()
	groups := ss("team0", "system:authenticated")
	a := res("list", "", "secrets", "", "ns57", "")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			x.Authorize("user42", groups, a)
		}
	})
}

// BenchmarkSetRoleBinding: one binding update in the 10,000-binding index.
func BenchmarkSetRoleBinding(b *testing.B) {
	x := benchIndex()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		x.SetRoleBinding(rb("ns3", "bind5", "Role", "role5", userS(fmt.Sprint("user", i%100)), groupS("team1")))
	}
}
