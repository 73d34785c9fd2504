package access_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/access"
	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/rbac"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
)

// policy is 1,000 Roles and 10,000 RoleBindings in namespace bench, the
// bootstrap policy, and one RoleBinding letting alice write configmaps.
func policy(x *rbac.Index) {
	var roles []*rbacv1.Role
	var bindings []*rbacv1.RoleBinding
	for i := range 1000 {
		roles = append(roles, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprint("role-", i)},
			Rules: []rbacv1.PolicyRule{{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{fmt.Sprint("secrets-", i)}}}})
	}
	for i := range 10000 {
		bindings = append(bindings, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprint("binding-", i)},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: fmt.Sprint("role-", i%1000)},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: fmt.Sprint("user-", i)},
				{Kind: "Group", APIGroup: rbacv1.GroupName, Name: fmt.Sprint("group-", i%100)}}})
	}
	roles = append(roles, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "writer"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"*"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}}})
	bindings = append(bindings, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "alice"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "writer"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "alice"}}})
	clusterRoles, clusterBindings := rbac.Bootstrap()
	x.Replace(roles, clusterRoles, bindings, clusterBindings)
}

// BenchmarkCreateAuthorized creates ConfigMaps through the object service
// with RBAC authorization, as system:masters (which bypasses RBAC) and as
// alice (allowed by one RoleBinding among 10,000), side by side: the
// ratio is what authorization costs a create.
func BenchmarkCreateAuthorized(b *testing.B) {
	users := map[string]*auth.User{
		"masters": {Name: "admin", Groups: []string{"system:masters", "system:authenticated"}},
		"alice":   {Name: "alice", Groups: []string{"system:authenticated"}},
	}
	for _, who := range []string{"masters", "alice"} {
		b.Run(who, func(b *testing.B) {
			// A fresh store for each: the two runs see the same sizes.
			reg := registry.New()
			a, err := access.New(access.Config{Registry: reg, Log: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			policy(a.Index())
			svc, err := objects.New(objects.Config{Storage: etcdtest.Start(b), Registry: reg, Hooks: a.Hooks()})
			if err != nil {
				b.Fatal(err)
			}
			defer svc.Close()
			a.Use(svc)
			res, _ := reg.Get(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
			ctx := context.Background()
			n := 0
			for b.Loop() {
				n++
				obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
					"metadata": map[string]any{"namespace": "bench", "name": fmt.Sprint("cm-", n)}, "data": map[string]any{"k": "v"}}}
				req := &objects.Request{User: users[who], Verb: "create", Resource: res, Namespace: "bench"}
				if _, err := svc.Create(ctx, req, obj, objects.WriteOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
