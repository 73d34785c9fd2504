package auth_test

import (
	"net/http"
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
