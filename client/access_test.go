package client_test

import (
	"slices"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/testenv"
)

// restAs returns a REST authenticating as the test user c.
func restAs(t *testing.T, c testenv.Config) *client.REST {
	t.Helper()
	rc, err := client.New(&client.Config{Host: c.Host, CAData: c.CAData, CertData: c.CertData, KeyData: c.KeyData})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(rc.CloseIdleConnections)
	return rc
}

// TestAccessReviews: CanI, Rules and WhoAmI answer for the caller, admin
// or a user allowed to read ConfigMaps in namespace a only.
func TestAccessReviews(t *testing.T) {
	env, admin := start(t)
	ctx := ctxFor(t)
	alice := restAs(t, env.User(t, "alice", "dev"))

	who, err := alice.WhoAmI(ctx)
	if err != nil || who.Username != "alice" || !slices.Contains(who.Groups, "dev") || !slices.Contains(who.Groups, "system:authenticated") {
		t.Errorf("WhoAmI() as alice = %+v, %v; want alice in dev and system:authenticated", who, err)
	}
	if who, err := admin.WhoAmI(ctx); err != nil || !slices.Contains(who.Groups, "system:masters") {
		t.Errorf("WhoAmI() as admin = %+v, %v; want system:masters", who, err)
	}

	for _, ns := range []string{"a", "b"} {
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if _, err := client.NewClient[*corev1.Namespace](admin, namespaces).Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "cm-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}
	if _, err := client.NewClient[*rbacv1.Role](admin, roles).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	listA := authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps", Namespace: "a"}
	if ok, _, err := alice.CanI(ctx, listA); err != nil || ok {
		t.Errorf("CanI(list configmaps in a) before the binding = %v, %v; want false", ok, err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "alice-reads"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "cm-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}},
	}
	if _, err := client.NewClient[*rbacv1.RoleBinding](admin, roleBindings).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The binding reaches the authorizer through a watch.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, reason, err := alice.CanI(ctx, listA)
		if err != nil {
			t.Fatalf("CanI(list configmaps in a) = %v", err)
		}
		if ok {
			t.Logf("allowed: %q", reason)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CanI(list configmaps in a) = false 5 s after the binding, reason %q", reason)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, tc := range []struct {
		rc    *client.REST
		who   string
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{alice, "alice", authorizationv1.ResourceAttributes{Verb: "watch", Resource: "configmaps", Namespace: "a"}, true},
		{alice, "alice", authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: "a", Name: "x"}, true},
		{alice, "alice", authorizationv1.ResourceAttributes{Verb: "create", Resource: "configmaps", Namespace: "a"}, false},
		{alice, "alice", authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps", Namespace: "b"}, false},
		{alice, "alice", authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps"}, false},
		{alice, "alice", authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets", Namespace: "a"}, false},
		{admin, "admin", authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps"}, true},
		{admin, "admin", authorizationv1.ResourceAttributes{Verb: "delete", Resource: "namespaces", Name: "b"}, true},
	} {
		if ok, _, err := tc.rc.CanI(ctx, tc.attrs); err != nil || ok != tc.want {
			t.Errorf("CanI(%+v) as %s = %v, %v; want %v", tc.attrs, tc.who, ok, err, tc.want)
		}
	}

	allows := func(st authorizationv1.SubjectRulesReviewStatus, verb, resource string) bool {
		return slices.ContainsFunc(st.ResourceRules, func(r authorizationv1.ResourceRule) bool {
			return (slices.Contains(r.Verbs, verb) || slices.Contains(r.Verbs, "*")) &&
				(slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, "*"))
		})
	}
	inA, err := alice.Rules(ctx, "a")
	if err != nil || !allows(inA, "watch", "configmaps") || allows(inA, "create", "configmaps") {
		t.Errorf("Rules(a) as alice = %+v, %v; want watch configmaps and not create", inA, err)
	}
	inB, err := alice.Rules(ctx, "b")
	if err != nil || allows(inB, "list", "configmaps") {
		t.Errorf("Rules(b) as alice = %+v, %v; want no configmaps", inB, err)
	}
	if st, err := admin.Rules(ctx, "b"); err != nil || !allows(st, "list", "configmaps") {
		t.Errorf("Rules(b) as admin = %+v, %v; want everything", st, err)
	}
}

var (
	namespaces   = client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("namespaces"), Kind: "Namespace"}
	roles        = client.Resource{GVR: rbacv1.SchemeGroupVersion.WithResource("roles"), Namespaced: true, Kind: "Role"}
	roleBindings = client.Resource{GVR: rbacv1.SchemeGroupVersion.WithResource("rolebindings"), Namespaced: true, Kind: "RoleBinding"}
)
