package auth

import (
	"context"
	"crypto/sha256"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// Groups with a fixed meaning, named as in Kubernetes.
const (
	GroupMasters       = "system:masters"       // unrestricted access
	GroupAuthenticated = "system:authenticated" // every authenticated user
)

// User is an authenticated identity.
type User struct {
	Name   string
	Groups []string
}

type userKey struct{}

// WithUser returns a copy of ctx carrying u.
func WithUser(ctx context.Context, u User) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the user stored in ctx by WithUser.
func UserFrom(ctx context.Context) (User, bool) {
	u, ok := ctx.Value(userKey{}).(User)
	return u, ok
}

// Authenticator identifies the user behind a request from a verified client
// certificate or a known bearer token. It is safe for concurrent use; tokens
// may be added while requests are being authenticated.
type Authenticator struct {
	mu sync.RWMutex
	// tokens is keyed by the SHA-256 digest of the token; see Authenticate.
	tokens map[[sha256.Size]byte]User
}

// NewAuthenticator returns an Authenticator that accepts client certificates
// verified against c's CA and c's admin token as user "admin" in group
// system:masters.
func NewAuthenticator(c *Credentials) *Authenticator {
	a := &Authenticator{tokens: make(map[[sha256.Size]byte]User)}
	a.AddToken(c.AdminToken, User{Name: "admin", Groups: []string{GroupMasters}})
	return a
}

// AddToken makes token authenticate as u, replacing any earlier user of the
// same token. Group system:authenticated is added to u if missing. An empty
// token is ignored.
func (a *Authenticator) AddToken(token string, u User) {
	if token == "" {
		return
	}
	u = authenticated(u)
	a.mu.Lock()
	a.tokens[sha256.Sum256([]byte(token))] = u
	a.mu.Unlock()
}

// Authenticate returns the user r was sent by, and false if r carries no
// valid credentials. A client certificate wins over a bearer token, as in
// Kubernetes.
//
// Certificates are trusted when r.TLS.VerifiedChains is non-empty, so the
// server must verify them against the CA, as ServerTLSConfig does. The user
// is the subject's CN, the groups its O values plus system:authenticated.
//
// Tokens are compared by SHA-256 digest rather than directly: the map
// lookup's timing then reveals at most how much of a digest matched, which
// says nothing about the token, so it is as safe as a constant-time compare
// while staying O(1) as tokens are added.
func (a *Authenticator) Authenticate(r *http.Request) (User, bool) {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		subject := r.TLS.VerifiedChains[0][0].Subject
		if subject.CommonName != "" {
			return authenticated(User{Name: subject.CommonName, Groups: subject.Organization}), true
		}
	}
	token, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok {
		return User{}, false
	}
	digest := sha256.Sum256([]byte(token))
	a.mu.RLock()
	u, ok := a.tokens[digest]
	a.mu.RUnlock()
	if !ok {
		return User{}, false
	}
	u.Groups = slices.Clone(u.Groups) // callers may not alter the stored user
	return u, true
}

// bearerToken extracts the token from an "Authorization: Bearer <token>"
// header value; the scheme is case-insensitive (RFC 9110).
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// authenticated returns u with its own copy of the groups, including
// system:authenticated.
func authenticated(u User) User {
	g := slices.Clone(u.Groups)
	if !slices.Contains(g, GroupAuthenticated) {
		g = append(g, GroupAuthenticated)
	}
	u.Groups = g
	return u
}
