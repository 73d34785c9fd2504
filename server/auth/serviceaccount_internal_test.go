package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// signed returns a token of t's with the given validity times (Issue
// refuses such short lives).
func (t *TokenIssuer) signed(tb testing.TB, iat, exp time.Time) string {
	tb.Helper()
	c := claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: t.issuer, Subject: "system:serviceaccount:a:bot", Audience: t.audiences,
			IssuedAt: jwt.NewNumericDate(iat), NotBefore: jwt.NewNumericDate(iat), ExpiresAt: jwt.NewNumericDate(exp),
		},
		Kubernetes: k8sClaims{Namespace: "a", ServiceAccount: ref{Name: "bot", UID: "u"}},
	}
	s, err := jwt.NewWithClaims(t.method, c).SignedString(t.key)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// kube-apiserver's texts (claims.go) and go-jose's minute of leeway.
func TestVerifyTimes(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	iss, err := NewTokenIssuer(TokenIssuerConfig{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tests := []struct {
		name     string
		iat, exp time.Time
		err      string
	}{
		{"valid", now, now.Add(time.Hour), ""},
		{"expired", now.Add(-time.Hour), now.Add(-2 * time.Minute), "service account token has expired"},
		{"expired within the leeway", now.Add(-time.Hour), now.Add(-30 * time.Second), ""},
		{"not yet valid", now.Add(5 * time.Minute), now.Add(time.Hour), "service account token is not valid yet"},
		{"clock skew within the leeway", now.Add(30 * time.Second), now.Add(time.Hour), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := iss.Verify(iss.signed(t, tt.iat, tt.exp), nil)
			if (tt.err == "" && err != nil) || (tt.err != "" && (err == nil || err.Error() != tt.err)) {
				t.Errorf("Verify() error = %v, want %q", err, tt.err)
			}
		})
	}
}
