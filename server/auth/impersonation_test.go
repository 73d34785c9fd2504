package auth_test

import (
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/objwatch/objwatch/server/auth"
)

// The messages are kube-apiserver v1.37.2's (constrained impersonation)
// for a user allowed no impersonation.
func TestImpersonationRefused(t *testing.T) {
	listCMs := auth.Attributes{ResourceRequest: true, Verb: "list", Resource: "configmaps", Namespace: "default"}
	getLease := auth.Attributes{ResourceRequest: true, Verb: "get", APIGroup: "coordination.k8s.io", Resource: "leases", Namespace: "ns", Name: "l"}
	api := auth.Attributes{Verb: "get", Path: "/api"}
	tests := []struct {
		name   string
		header http.Header
		attrs  auth.Attributes
		code   int32
		want   string // "" for no refusal
	}{
		{"none", http.Header{"Authorization": {"Bearer x"}}, listCMs, 0, ""},
		{"empty user", http.Header{"Impersonate-User": {""}}, listCMs, 0, ""},
		{"user", http.Header{"Impersonate-User": {"alice"}}, listCMs, 403,
			`configmaps is forbidden: User "admin" cannot impersonate-on:user-info:list resource "configmaps" in API group "" in the namespace "default"`},
		{"user and group", http.Header{"Impersonate-User": {"alice"}, "Impersonate-Group": {"devs"}}, getLease, 403,
			`leases.coordination.k8s.io "l" is forbidden: User "admin" cannot impersonate-on:user-info:get resource "leases" in API group "coordination.k8s.io" in the namespace "ns"`},
		{"discovery", http.Header{"Impersonate-User": {"alice"}}, api, 403,
			`forbidden: User "admin" cannot impersonate-on:user-info:get path "/api"`},
		{"service account", http.Header{"Impersonate-User": {"system:serviceaccount:team:bot"}}, listCMs, 403,
			`configmaps is forbidden: User "admin" cannot impersonate-on:serviceaccount:list resource "configmaps" in API group "" in the namespace "default"`},
		{"node", http.Header{"Impersonate-User": {"system:node:n1"}}, listCMs, 403,
			`configmaps is forbidden: User "admin" cannot impersonate-on:arbitrary-node:list resource "configmaps" in API group "" in the namespace "default"`},
		{"service account with a group", http.Header{"Impersonate-User": {"system:serviceaccount:team:bot"}, "Impersonate-Group": {"g"}}, listCMs, 403,
			`serviceaccounts "bot" is forbidden: User "admin" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "team"`},
		{"group alone", http.Header{"Impersonate-Group": {"devs"}}, listCMs, 400,
			`requested &user.DefaultInfo{Name:"", UID:"", Groups:[]string{"devs"}, Extra:map[string][]string(nil)} without impersonating a user name`},
		{"extra alone", http.Header{"Impersonate-Extra-Scopes%2fa": {"view"}}, listCMs, 400,
			`requested &user.DefaultInfo{Name:"", UID:"", Groups:[]string(nil), Extra:map[string][]string{"scopes/a":[]string{"view"}}} without impersonating a user name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := auth.ImpersonationRefused(tt.header, adminUser, tt.attrs)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("ImpersonationRefused() = %v, want nil", err)
			case tt.want == "":
			case err == nil || apierrors.ReasonForError(err) == "" || err.(apierrors.APIStatus).Status().Code != tt.code || err.Error() != tt.want:
				t.Fatalf("ImpersonationRefused() = %v, want %d %q", err, tt.code, tt.want)
			}
		})
	}
}

// allow returns an authorizer allowing exactly the listed verb/group/resource/name
// (namespace ignored) combinations, as "verb group resource name".
func allow(rules ...string) func(auth.User, auth.Attributes) bool {
	return func(_ auth.User, a auth.Attributes) bool {
		res := a.Resource
		if a.Subresource != "" {
			res += "/" + a.Subresource
		}
		return slices.Contains(rules, strings.Join([]string{a.Verb, a.APIGroup, res, a.Name}, " "))
	}
}

// Texts and users as kube-apiserver v1.37.2 answered alice, allowed
// impersonate on users "bob" (legacy): bob got [system:authenticated];
// adding Impersonate-Group devs gave `groups "devs" is forbidden: User
// "alice" cannot impersonate resource "groups" in API group "" at the
// cluster scope`, Impersonate-Uid u1 `uids.authentication.k8s.io "u1" is
// forbidden: ...`, Impersonate-Extra-Scopes%2fA: view
// `userextras.authentication.k8s.io "view" is forbidden: User "alice"
// cannot impersonate resource "userextras/scopes/a" ...`.
func TestImpersonate(t *testing.T) {
	alice := auth.User{Name: "alice", Groups: []string{"system:authenticated"}}
	listCMs := auth.Attributes{ResourceRequest: true, Verb: "list", Resource: "configmaps", Namespace: "default"}
	h := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	tests := []struct {
		name    string
		header  http.Header
		allowed func(auth.User, auth.Attributes) bool
		want    auth.User
		err     string
	}{
		{"none", h(), allow(), alice, ""},
		{"legacy user", h("Impersonate-User", "bob"), allow("impersonate  users bob"),
			auth.User{Name: "bob", Groups: []string{"system:authenticated"}}, ""},
		{"legacy user and group refused", h("Impersonate-User", "bob", "Impersonate-Group", "devs"), allow("impersonate  users bob"), auth.User{},
			// Kubernetes reports the legacy refusal because legacy had allowed
			// alice before; without that memory user-info's comes first.
			`configmaps is forbidden: User "alice" cannot impersonate-on:user-info:list resource "configmaps" in API group "" in the namespace "default"`},
		{"legacy user and group", h("Impersonate-User", "bob", "Impersonate-Group", "devs"), allow("impersonate  users bob", "impersonate  groups devs"),
			auth.User{Name: "bob", Groups: []string{"devs", "system:authenticated"}}, ""},
		{"legacy uid and extra", h("Impersonate-User", "bob", "Impersonate-Uid", "u1", "Impersonate-Extra-Scopes%2fA", "view"),
			allow("impersonate  users bob", "impersonate authentication.k8s.io uids u1", "impersonate authentication.k8s.io userextras/scopes/a view"),
			auth.User{Name: "bob", UID: "u1", Groups: []string{"system:authenticated"}, Extra: map[string][]string{"scopes/a": {"view"}}}, ""},
		{"legacy service account", h("Impersonate-User", "system:serviceaccount:a:bot"), allow("impersonate  serviceaccounts bot"),
			auth.User{Name: "system:serviceaccount:a:bot", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:a", "system:authenticated"}}, ""},
		{"anonymous", h("Impersonate-User", "system:anonymous"), allow("impersonate  users system:anonymous"),
			auth.User{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}}, ""},
		{"unauthenticated group kept", h("Impersonate-User", "bob", "Impersonate-Group", "system:unauthenticated"), allow("impersonate  users bob", "impersonate  groups system:unauthenticated"),
			auth.User{Name: "bob", Groups: []string{"system:unauthenticated"}}, ""},
		{"constrained user-info", h("Impersonate-User", "bob", "Impersonate-Group", "devs"),
			allow("impersonate-on:user-info:list  configmaps ", "impersonate:user-info authentication.k8s.io users bob", "impersonate:user-info authentication.k8s.io groups devs"),
			auth.User{Name: "bob", Groups: []string{"devs", "system:authenticated"}}, ""},
		{"constrained without the user", h("Impersonate-User", "bob"), allow("impersonate-on:user-info:list  configmaps "), auth.User{},
			`users.authentication.k8s.io "bob" is forbidden: User "alice" cannot impersonate:user-info resource "users" in API group "authentication.k8s.io" at the cluster scope`},
		{"constrained masters", h("Impersonate-User", "bob", "Impersonate-Group", "system:masters"),
			allow("impersonate-on:user-info:list  configmaps ", "impersonate:user-info authentication.k8s.io users bob", "impersonate:user-info authentication.k8s.io groups system:masters"), auth.User{},
			`groups.authentication.k8s.io "system:masters" is forbidden: User "alice" cannot impersonate:user-info resource "groups" in API group "authentication.k8s.io" at the cluster scope: impersonating the system:masters group is not allowed`},
		{"constrained service account", h("Impersonate-User", "system:serviceaccount:a:bot"),
			allow("impersonate-on:serviceaccount:list  configmaps ", "impersonate:serviceaccount authentication.k8s.io serviceaccounts bot"),
			auth.User{Name: "system:serviceaccount:a:bot", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:a", "system:authenticated"}}, ""},
		{"constrained node", h("Impersonate-User", "system:node:n1"),
			allow("impersonate-on:arbitrary-node:list  configmaps ", "impersonate:arbitrary-node authentication.k8s.io nodes n1"),
			auth.User{Name: "system:node:n1", Groups: []string{"system:nodes", "system:authenticated"}}, ""},
		{"node with a group falls to legacy", h("Impersonate-User", "system:node:n1", "Impersonate-Group", "g"), allow(), auth.User{},
			`users "system:node:n1" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope`},
		{"constrained bad extra key", h("Impersonate-User", "bob", "Impersonate-Extra-", "v"),
			allow("impersonate-on:user-info:list  configmaps ", "impersonate:user-info authentication.k8s.io users bob"), auth.User{},
			`userextras.authentication.k8s.io is forbidden: User "alice" cannot impersonate:user-info resource "userextras" in API group "authentication.k8s.io" at the cluster scope: impersonating the empty string key in extra is not allowed`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := auth.Impersonate(tt.header, alice, listCMs, tt.allowed)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err || !apierrors.IsForbidden(err) {
					t.Fatalf("Impersonate() = %+v, %v, want 403 %q", got, err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Impersonate() = %+v, %v, want %+v", got, err, tt.want)
			}
		})
	}
}

// An Impersonator reports, as kube-apiserver did, the refusal of the mode
// that last allowed the requesting user: after a legacy impersonation of
// bob, alice impersonating carol got `users "carol" is forbidden: User
// "alice" cannot impersonate resource "users" in API group "" at the
// cluster scope`.
func TestImpersonatorRemembersMode(t *testing.T) {
	alice := auth.User{Name: "alice"}
	listCMs := auth.Attributes{ResourceRequest: true, Verb: "list", Resource: "configmaps", Namespace: "default"}
	var im auth.Impersonator
	allowed := allow("impersonate  users bob")
	if _, err := im.Impersonate(http.Header{"Impersonate-User": {"bob"}}, alice, listCMs, allowed); err != nil {
		t.Fatal(err)
	}
	_, err := im.Impersonate(http.Header{"Impersonate-User": {"carol"}}, alice, listCMs, allowed)
	want := `users "carol" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope`
	if err == nil || err.Error() != want {
		t.Errorf("Impersonate(carol) error = %v, want %q", err, want)
	}
}
