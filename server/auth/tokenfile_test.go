package auth_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/server/auth"
)

// The cases follow k8s.io/apiserver's tokenfile (v0.37.2): at least three
// columns, groups split on commas, an empty token skipped, the last of
// duplicates winning.
func TestReadTokenFile(t *testing.T) {
	tests := []struct {
		name, file string
		want       map[string]auth.User
		err        string // substring
	}{
		{"basic", "t1,alice,u1\n", map[string]auth.User{"t1": {Name: "alice", UID: "u1"}}, ""},
		{"one group", "t1,alice,u1,dev\n", map[string]auth.User{"t1": {Name: "alice", UID: "u1", Groups: []string{"dev"}}}, ""},
		{"quoted groups", "t1,alice,u1,\"dev,ops\"\n", map[string]auth.User{"t1": {Name: "alice", UID: "u1", Groups: []string{"dev", "ops"}}}, ""},
		{"extra columns", "t1,alice,u1,dev,ignored\n", map[string]auth.User{"t1": {Name: "alice", UID: "u1", Groups: []string{"dev"}}}, ""},
		{"empty uid", "t1,alice,\n", map[string]auth.User{"t1": {Name: "alice"}}, ""},
		{"empty token skipped", ",alice,u1\nt2,bob,u2\n", map[string]auth.User{"t2": {Name: "bob", UID: "u2"}}, ""},
		{"last duplicate wins", "t1,alice,u1\nt1,bob,u2\n", map[string]auth.User{"t1": {Name: "bob", UID: "u2"}}, ""},
		{"no final newline", "t1,alice,u1", map[string]auth.User{"t1": {Name: "alice", UID: "u1"}}, ""},
		{"empty file", "", map[string]auth.User{}, ""},
		{"two columns", "t1,alice,u1\nt2,bob\n", nil, "line 2: must have at least 3 columns (token, user name, user uid), found 2"},
		{"bad quote", "t1,alice,u1\nt2,\"bob,u2\n", nil, "line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tokens.csv")
			if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := auth.ReadTokenFile(path)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), path) {
					t.Fatalf("ReadTokenFile() error = %v, want one naming %s and %q", err, path, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ReadTokenFile() = %#v, %v, want %#v", got, err, tt.want)
			}
		})
	}
	if _, err := auth.ReadTokenFile(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadTokenFile(missing) error = %v, want fs.ErrNotExist", err)
	}
}

// Static tokens are audience-agnostic: kube-apiserver's TokenReview of
// alice's token with audiences ["other"] said "invalid bearer token", with
// [api, "x"] it answered audiences [api].
func TestStaticTokenAudiences(t *testing.T) {
	a := auth.New(auth.Config{
		Tokens:          map[string]auth.User{"t1": {Name: "alice", UID: "uid-alice"}},
		ServiceAccounts: newIssuer(t, auth.TokenIssuerConfig{}),
	})
	u, auds, ok, err := a.AuthenticateToken(context.Background(), "t1", []string{auth.DefaultIssuer, "x"})
	if !ok || err != nil || u.Name != "alice" || u.UID != "uid-alice" || !reflect.DeepEqual(u.Groups, []string{"system:authenticated"}) || !reflect.DeepEqual(auds, []string{auth.DefaultIssuer}) {
		t.Errorf("AuthenticateToken(t1) = %+v, %v, %v, %v", u, auds, ok, err)
	}
	if _, _, ok, err := a.AuthenticateToken(context.Background(), "t1", []string{"other"}); ok || !errors.Is(err, auth.ErrInvalidToken) || err.Error() != "invalid bearer token" {
		t.Errorf("AuthenticateToken(t1, other) = %v, %v, want false, invalid bearer token", ok, err)
	}
}

// kube-apiserver with --anonymous-auth: no Authorization header, "Basic",
// "Bearer" alone and "Bearer  x" were all user system:anonymous; an unknown
// bearer token was 401 ("Unauthorized").
func TestAnonymous(t *testing.T) {
	tokens := map[string]auth.User{"t1": {Name: "alice", Groups: []string{"system:authenticated", "dev"}}}
	on := auth.New(auth.Config{Tokens: tokens, Anonymous: true})
	off := auth.New(auth.Config{Tokens: tokens})
	anonymous := auth.User{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}}
	alice := auth.User{Name: "alice", Groups: []string{"system:authenticated", "dev"}}
	tests := []struct {
		header  string
		on      auth.User // zero: refused as bad credentials
		offNone bool      // with anonymous off: ErrNoCredentials rather than bad credentials
	}{
		{"", anonymous, true},
		{"Basic YWxpY2U6eA==", anonymous, true},
		{"Bearer", anonymous, true},
		{"Bearer  t1", anonymous, true},
		{"Bearer t1", alice, false},
		{"Bearer nope", auth.User{}, false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if tt.header != "" {
			r.Header.Set("Authorization", tt.header)
		}
		got, err := on.AuthenticateRequest(r)
		if tt.on.Name == "" {
			if err == nil || errors.Is(err, auth.ErrNoCredentials) {
				t.Errorf("anonymous on: AuthenticateRequest(%q) = %+v, %v, want bad credentials", tt.header, got, err)
			}
		} else if err != nil || !reflect.DeepEqual(got, tt.on) {
			t.Errorf("anonymous on: AuthenticateRequest(%q) = %+v, %v, want %+v", tt.header, got, err, tt.on)
		}
		got, err = off.AuthenticateRequest(r)
		switch {
		case tt.on.Name == "alice":
			if err != nil || !reflect.DeepEqual(got, alice) {
				t.Errorf("anonymous off: AuthenticateRequest(%q) = %+v, %v, want alice", tt.header, got, err)
			}
		case errors.Is(err, auth.ErrNoCredentials) != tt.offNone || err == nil:
			t.Errorf("anonymous off: AuthenticateRequest(%q) error = %v, want no credentials: %v", tt.header, err, tt.offNone)
		}
	}
}
