package auth_test

import (
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/objwatch/objwatch/server/auth"
)

func TestImpersonationRefused(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
		want   string // "" for no refusal
	}{
		{"none", http.Header{"Authorization": {"Bearer x"}}, ""},
		{"user", http.Header{"Impersonate-User": {"alice"}},
			`users "alice" is forbidden: User "admin" cannot impersonate resource "users" in API group "" at the cluster scope`},
		{"user before group", http.Header{"Impersonate-User": {"alice"}, "Impersonate-Group": {"devs"}},
			`users "alice" is forbidden: User "admin" cannot impersonate resource "users" in API group "" at the cluster scope`},
		{"service account", http.Header{"Impersonate-User": {"system:serviceaccount:team:bot"}},
			`serviceaccounts "bot" is forbidden: User "admin" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "team"`},
		{"group alone", http.Header{"Impersonate-Group": {"devs"}},
			`groups "devs" is forbidden: User "admin" cannot impersonate resource "groups" in API group "" at the cluster scope`},
		{"extra", http.Header{"Impersonate-Extra-Scopes%2fa": {"view"}},
			`userextras.authentication.k8s.io "view" is forbidden: User "admin" cannot impersonate resource "userextras/scopes/a" in API group "authentication.k8s.io" at the cluster scope`},
		{"uid", http.Header{"Impersonate-Uid": {"1234"}},
			`uids.authentication.k8s.io "1234" is forbidden: User "admin" cannot impersonate resource "uids" in API group "authentication.k8s.io" at the cluster scope`},
		{"empty user", http.Header{"Impersonate-User": {""}},
			`users is forbidden: User "admin" cannot impersonate resource "users" in API group "" at the cluster scope`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := auth.ImpersonationRefused(tt.header, adminUser)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("ImpersonationRefused() = %v, want nil", err)
			case tt.want == "":
			case !apierrors.IsForbidden(err) || err.Error() != tt.want:
				t.Fatalf("ImpersonationRefused() = %v, want 403 %q", err, tt.want)
			}
		})
	}
}
