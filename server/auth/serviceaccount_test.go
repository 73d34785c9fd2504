package auth_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server/auth"
)

func newIssuer(t *testing.T, cfg auth.TokenIssuerConfig) *auth.TokenIssuer {
	t.Helper()
	if cfg.Key == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Key = k
	}
	iss, err := auth.NewTokenIssuer(cfg)
	if err != nil {
		t.Fatalf("NewTokenIssuer() error = %v", err)
	}
	return iss
}

func issue(t *testing.T, iss *auth.TokenIssuer, auds []string, bound *auth.BoundObject) string {
	t.Helper()
	tok, _, err := iss.Issue("a", "bot", "uid-1", auds, 0, bound)
	if err != nil {
		t.Fatalf("Issue() error = %v", err)
	}
	return tok
}

// The texts are kube-apiserver v1.37.2's: `kubectl create token bot
// --duration=5m` said `spec.expirationSeconds: Invalid value: 300: may not
// specify a duration less than 10 minutes`; without
// --service-account-max-token-expiration --duration=1000h was granted.
func TestIssueExpiration(t *testing.T) {
	iss := newIssuer(t, auth.TokenIssuerConfig{MaxExpiration: 48 * time.Hour})
	tests := []struct {
		expiry, want time.Duration
		err          string
	}{
		{0, time.Hour, ""},
		{10 * time.Minute, 10 * time.Minute, ""},
		{5 * time.Minute, 0, "may not specify a duration less than 10 minutes"},
		{1000 * time.Hour, 48 * time.Hour, ""},
		{auth.MaxTokenExpiration + time.Second, 0, "may not specify a duration larger than 2^32 seconds"},
	}
	for _, tt := range tests {
		before := time.Now()
		_, exp, err := iss.Issue("a", "bot", "u", nil, tt.expiry, nil)
		var ee *auth.ExpirationError
		if tt.err != "" {
			if !errors.As(err, &ee) || err.Error() != tt.err {
				t.Errorf("Issue(%v) error = %v, want %q", tt.expiry, err, tt.err)
			}
			continue
		}
		if err != nil || exp.Sub(before) < tt.want-time.Second || exp.Sub(before) > tt.want+time.Second {
			t.Errorf("Issue(%v) = %v, %v, want expiry in %v", tt.expiry, exp, err, tt.want)
		}
	}
}

func TestTokenClaims(t *testing.T) {
	iss := newIssuer(t, auth.TokenIssuerConfig{})
	tok := issue(t, iss, nil, &auth.BoundObject{Kind: "Pod", Name: "p", UID: "pod-uid"})
	parts := strings.Split(tok, ".")
	header, _ := base64.RawURLEncoding.DecodeString(parts[0])
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	for _, want := range []string{`"alg":"ES256"`, `"kid":"`} {
		if !strings.Contains(string(header), want) {
			t.Errorf("header %s lacks %s", header, want)
		}
	}
	for _, want := range []string{
		`"iss":"https://kubernetes.default.svc.cluster.local"`, `"sub":"system:serviceaccount:a:bot"`,
		`"aud":["https://kubernetes.default.svc.cluster.local"]`, `"exp":`, `"iat":`, `"nbf":`, `"jti":"`,
		`"kubernetes.io":{"namespace":"a","serviceaccount":{"name":"bot","uid":"uid-1"},"pod":{"name":"p","uid":"pod-uid"}}`,
	} {
		if !strings.Contains(string(payload), want) {
			t.Errorf("payload %s lacks %s", payload, want)
		}
	}
}

// Each case is a token the authenticator must refuse, with kube-apiserver
// v1.37.2's TokenReview status.error where it was asked: a garbage token
// "invalid bearer token"; another audience `[invalid bearer token, token
// audiences ["https://kubernetes.default.svc.cluster.local"] is invalid
// for the target audiences ["other"]]`; a tampered signature "[invalid
// bearer token, go-jose/go-jose: error in cryptographic primitive]"; a
// deleted service account `[invalid bearer token, serviceaccounts "bot2"
// not found]`; a re-created one "[invalid bearer token, service account
// UID (new) does not match claim (old)]".
func TestAuthenticateServiceAccountToken(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	iss := newIssuer(t, auth.TokenIssuerConfig{Key: rsaKey})
	other := newIssuer(t, auth.TokenIssuerConfig{})
	otherIssuer := newIssuer(t, auth.TokenIssuerConfig{Key: rsaKey, Issuer: "https://elsewhere"})
	accounts := map[string]string{"a/bot": "uid-1"}
	a := auth.New(auth.Config{ServiceAccounts: iss})
	a.SetServiceAccountLookup(func(_ context.Context, ns, name string) (string, bool, error) {
		uid, ok := accounts[ns+"/"+name]
		return uid, ok, nil
	})
	good := issue(t, iss, nil, nil)
	parts := strings.Split(good, ".")
	forged := parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString([]byte("not a signature"))

	ok, aud, u, gotErr := func(tok string, auds []string) (bool, []string, auth.User, error) {
		u, aud, ok, err := a.AuthenticateToken(context.Background(), tok, auds)
		return ok, aud, u, err
	}(good, nil)
	want := auth.User{Name: "system:serviceaccount:a:bot", UID: "uid-1",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:a", "system:authenticated"}}
	if !ok || gotErr != nil || u.Name != want.Name || u.UID != want.UID || !slices.Equal(u.Groups, want.Groups) ||
		!strings.HasPrefix(u.Extra["authentication.kubernetes.io/credential-id"][0], "JTI=") ||
		!slices.Equal(aud, []string{auth.DefaultIssuer}) {
		t.Fatalf("AuthenticateToken(good) = %+v, %v, %v, %v, want %+v", u, aud, ok, gotErr, want)
	}
	pod := issue(t, iss, nil, &auth.BoundObject{Kind: "Pod", Name: "p", UID: "pu"})
	if u, _, ok, err := a.AuthenticateToken(context.Background(), pod, nil); !ok || u.Extra["authentication.kubernetes.io/pod-name"][0] != "p" || u.Extra["authentication.kubernetes.io/pod-uid"][0] != "pu" {
		t.Errorf("AuthenticateToken(pod-bound) = %+v, %v, %v, want pod extras", u, ok, err)
	}

	tests := []struct {
		name   string
		token  string
		auds   []string
		before func()
		err    string
	}{
		{name: "garbage", token: "garbage", err: "invalid bearer token"},
		{name: "malformed jwt", token: "a.b.c", err: "invalid bearer token"},
		{name: "other issuer", token: issue(t, otherIssuer, nil, nil), err: "invalid bearer token"},
		{name: "wrong audience", token: good, auds: []string{"other"},
			err: `[invalid bearer token, token audiences ["https://kubernetes.default.svc.cluster.local"] is invalid for the target audiences ["other"]]`},
		{name: "token for another audience", token: issue(t, iss, []string{"vault"}, nil),
			err: `[invalid bearer token, token audiences ["vault"] is invalid for the target audiences ["https://kubernetes.default.svc.cluster.local"]]`},
		{name: "forged signature", token: forged, err: "[invalid bearer token, go-jose/go-jose: error in cryptographic primitive]"},
		{name: "another key", token: issue(t, other, nil, nil), err: "[invalid bearer token, go-jose/go-jose: error in cryptographic primitive]"},
		{name: "deleted", token: good, before: func() { delete(accounts, "a/bot") },
			err: `[invalid bearer token, serviceaccounts "bot" not found]`},
		{name: "re-created", token: good, before: func() { accounts["a/bot"] = "uid-2" },
			err: `[invalid bearer token, service account UID (uid-2) does not match claim (uid-1)]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				tt.before()
			}
			u, _, ok, err := a.AuthenticateToken(context.Background(), tt.token, tt.auds)
			if ok || err == nil || err.Error() != tt.err || !errors.Is(err, auth.ErrInvalidToken) {
				t.Errorf("AuthenticateToken() = %+v, %v, %v, want false, %q", u, ok, err, tt.err)
			}
			if tt.auds != nil {
				return // requests are for the API audiences
			}
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("Authorization", "Bearer "+tt.token)
			if _, err := a.AuthenticateRequest(r); err == nil || errors.Is(err, auth.ErrNoCredentials) {
				t.Errorf("AuthenticateRequest() error = %v, want bad credentials", err)
			}
		})
	}
}

func TestVerifyKeys(t *testing.T) {
	k1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	one := newIssuer(t, auth.TokenIssuerConfig{Key: k1})
	two := newIssuer(t, auth.TokenIssuerConfig{Key: k2, VerifyKeys: []crypto.PublicKey{k1.Public()}})
	if _, err := two.Verify(issue(t, one, nil, nil), nil); err != nil {
		t.Errorf("Verify(token of a listed key) error = %v", err)
	}
	if _, err := one.Verify(issue(t, two, nil, nil), nil); err == nil {
		t.Errorf("Verify(token of an unlisted key) = nil error")
	}
}

func TestEnsureServiceAccountKey(t *testing.T) {
	dir := t.TempDir()
	k1, err := auth.EnsureServiceAccountKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, auth.ServiceAccountKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("sa.key = %v, %v, want mode 0600", fi, err)
	}
	k2, err := auth.EnsureServiceAccountKey(dir)
	if err != nil || !k1.(*ecdsa.PrivateKey).Equal(k2) {
		t.Errorf("EnsureServiceAccountKey(again) = %v, want the stored key", err)
	}
	os.WriteFile(filepath.Join(dir, auth.ServiceAccountKeyFile), []byte("junk"), 0o600)
	if _, err := auth.EnsureServiceAccountKey(dir); err == nil {
		t.Errorf("EnsureServiceAccountKey(damaged) = nil error, want an error")
	}
}
