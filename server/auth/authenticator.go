package auth

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Groups and users with a fixed meaning, named as in Kubernetes.
const (
	GroupMasters         = user.SystemPrivilegedGroup // unrestricted access
	GroupAuthenticated   = user.AllAuthenticated      // every authenticated user
	GroupUnauthenticated = user.AllUnauthenticated    // the anonymous user
	UserAnonymous        = user.Anonymous             // a request without credentials, when allowed
)

// Errors of AuthenticateRequest and AuthenticateToken. Every error means
// 401 to the client; ErrNoCredentials tells a request that carries no
// credentials from one that carries bad ones.
var (
	ErrNoCredentials = errors.New("no credentials")
	// ErrInvalidToken is kube-apiserver's text for a bearer token that no
	// authenticator recognised; a service-account token that was
	// recognised but refused wraps it with the reason.
	ErrInvalidToken = errors.New("invalid bearer token")
)

// User is an authenticated identity, as Kubernetes' user.Info.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// clone returns u with its own copies of the groups and extras.
func (u User) clone() User {
	u.Groups = slices.Clone(u.Groups)
	if u.Extra != nil {
		e := make(map[string][]string, len(u.Extra))
		for k, v := range u.Extra {
			e[k] = slices.Clone(v)
		}
		u.Extra = e
	}
	return u
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

// ServiceAccountLookup returns the uid of service account ns/name, and
// false if it does not exist. An error is a failed lookup.
type ServiceAccountLookup func(ctx context.Context, ns, name string) (uid string, ok bool, err error)

// Config configures an Authenticator. The zero value accepts nothing.
type Config struct {
	// Credentials, if set, makes client certificates issued by its CA
	// valid, and its admin token (user "admin", group system:masters).
	Credentials *Credentials
	// Tokens are static bearer tokens and their users, as ReadTokenFile
	// returns them.
	Tokens map[string]User
	// ServiceAccounts, if set, verifies service-account tokens.
	ServiceAccounts *TokenIssuer
	// Anonymous makes a request without credentials user system:anonymous
	// in group system:unauthenticated (kube-apiserver's --anonymous-auth).
	Anonymous bool
}

// Authenticator identifies the user behind a request, trying in order a
// client certificate, a static token and a service-account token (see the
// package doc). It is safe for concurrent use; tokens may be added and the
// service-account lookup set while requests are being authenticated.
type Authenticator struct {
	pool      *x509.CertPool // nil: no client certificates
	issuer    *TokenIssuer   // nil: no service-account tokens
	anonymous bool
	lookup    atomic.Pointer[ServiceAccountLookup]

	mu sync.RWMutex
	// tokens is keyed by the SHA-256 digest of the token; see AuthenticateToken.
	tokens map[[sha256.Size]byte]User

	certMu sync.Mutex
	// certs remembers verified leaf certificates by digest, so that a
	// client's every request does not verify its chain again.
	certs map[[sha256.Size]byte]verifiedCert
}

type verifiedCert struct {
	user     User
	notAfter time.Time // of the chain
}

// maxCachedCerts bounds Authenticator.certs; the cache is emptied when full.
const maxCachedCerts = 1024

// New returns an Authenticator for cfg.
func New(cfg Config) *Authenticator {
	a := &Authenticator{
		issuer:    cfg.ServiceAccounts,
		anonymous: cfg.Anonymous,
		tokens:    make(map[[sha256.Size]byte]User),
		certs:     make(map[[sha256.Size]byte]verifiedCert),
	}
	if c := cfg.Credentials; c != nil {
		a.pool = c.CAPool
		a.AddToken(c.AdminToken, User{Name: "admin", Groups: []string{GroupMasters}})
	}
	for token, u := range cfg.Tokens {
		a.AddToken(token, u)
	}
	return a
}

// NewAuthenticator returns New(Config{Credentials: c}).
func NewAuthenticator(c *Credentials) *Authenticator {
	return New(Config{Credentials: c})
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

// SetServiceAccountLookup makes service-account tokens valid only while
// their service account exists with the uid they name (kube-apiserver's
// --service-account-lookup). Without one, a token with a valid signature
// is trusted until it expires. The server sets it once its storage is up.
func (a *Authenticator) SetServiceAccountLookup(fn ServiceAccountLookup) {
	a.lookup.Store(&fn)
}

// Authenticate returns the user r was sent by, and false if r carries no
// valid credentials (and is not let in as anonymous). See
// AuthenticateRequest.
func (a *Authenticator) Authenticate(r *http.Request) (User, bool) {
	u, err := a.AuthenticateRequest(r)
	return u, err == nil
}

// AuthenticateRequest returns the user r was sent by, as kube-apiserver
// does:
//
//   - A client certificate is tried first. One that chains to the CA (with
//     client-auth key usage) is user CN, groups O; one that does not is an
//     error, whatever else r carries.
//   - Then an "Authorization: Bearer <token>" header: static tokens, then
//     service-account tokens for the API audiences (AuthenticateToken).
//     An unknown or refused token is an error.
//   - A request with neither (a header without the bearer scheme or with an
//     empty token counts as none, as in Kubernetes) is anonymous if the
//     Config allows it, else ErrNoCredentials.
//
// Every user gets group system:authenticated (anonymous:
// system:unauthenticated).
func (a *Authenticator) AuthenticateRequest(r *http.Request) (User, error) {
	if u, ok, err := a.authenticateCert(r); ok || err != nil {
		return u, err
	}
	if token, ok := bearerToken(r.Header.Get("Authorization")); ok {
		u, _, ok, err := a.AuthenticateToken(r.Context(), token, nil)
		if !ok && err == nil {
			err = ErrInvalidToken
		}
		return u, err
	}
	if a.anonymous {
		return User{Name: UserAnonymous, Groups: []string{GroupUnauthenticated}}, nil
	}
	return User{}, ErrNoCredentials
}

// authenticateCert authenticates r's client certificate: false without
// one, an error if it does not chain to the CA. Certificates the TLS layer
// verified (r.TLS.VerifiedChains, with tls.VerifyClientCertIfGiven) are
// trusted as they are; others (tls.RequestClientCert, as ServerTLSConfig
// sets) are verified here, so that a foreign certificate is a 401 rather
// than a failed handshake, as with kube-apiserver.
func (a *Authenticator) authenticateCert(r *http.Request) (User, bool, error) {
	if r.TLS == nil || a.pool == nil {
		return User{}, false, nil
	}
	if len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		return certUser(r.TLS.VerifiedChains[0][0])
	}
	if len(r.TLS.PeerCertificates) == 0 {
		return User{}, false, nil
	}
	leaf := r.TLS.PeerCertificates[0]
	now := time.Now()
	digest := sha256.Sum256(leaf.Raw)
	a.certMu.Lock()
	v, ok := a.certs[digest]
	a.certMu.Unlock()
	if ok && now.Before(v.notAfter) {
		return v.user.clone(), true, nil
	}
	inter := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{
		Roots: a.pool, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return User{}, false, fmt.Errorf("verifying certificate SN=%s, subject %q failed: %w", leaf.SerialNumber, leaf.Subject, err)
	}
	u, ok, err := certUser(leaf)
	if !ok {
		return u, ok, err
	}
	notAfter := leaf.NotAfter
	for _, c := range chains[0] {
		if c.NotAfter.Before(notAfter) {
			notAfter = c.NotAfter
		}
	}
	a.certMu.Lock()
	if len(a.certs) >= maxCachedCerts {
		clear(a.certs)
	}
	a.certs[digest] = verifiedCert{user: u, notAfter: notAfter}
	a.certMu.Unlock()
	return u.clone(), true, nil
}

// certUser is Kubernetes' CommonNameUserConversion: without a CN the
// certificate authenticates nobody (and is no error).
func certUser(c *x509.Certificate) (User, bool, error) {
	if c.Subject.CommonName == "" {
		return User{}, false, nil
	}
	return authenticated(User{Name: c.Subject.CommonName, Groups: c.Subject.Organization}), true, nil
}

// AuthenticateToken authenticates a bearer token for audiences (nil: the
// API audiences, i.e. the service-account issuer), as kube-apiserver's
// TokenReview does. It returns the user, the audiences the token is valid
// for (the intersection with those asked for), and whether it is valid.
//
// Static tokens are audience-agnostic: they are valid for any request
// naming one of the API audiences, and then answer those. A token nobody
// recognises is not ok with ErrInvalidToken; a service-account token that
// is refused is not ok with an error "[invalid bearer token, <reason>]"
// (kube-apiserver's TokenReview status.error texts), for instance
// "[invalid bearer token, serviceaccounts "bot" not found]".
//
// Tokens are compared by SHA-256 digest rather than directly: the map
// lookup's timing then reveals at most how much of a digest matched, which
// says nothing about the token, so it is as safe as a constant-time compare
// while staying O(1) as tokens are added.
func (a *Authenticator) AuthenticateToken(ctx context.Context, token string, audiences []string) (User, []string, bool, error) {
	api := a.apiAudiences()
	if len(audiences) == 0 {
		audiences = api
	}
	digest := sha256.Sum256([]byte(token))
	a.mu.RLock()
	u, ok := a.tokens[digest]
	a.mu.RUnlock()
	if ok {
		auds := intersect(api, audiences)
		if len(api) > 0 && len(auds) == 0 {
			return User{}, nil, false, ErrInvalidToken
		}
		return u.clone(), auds, true, nil
	}
	if a.issuer == nil {
		return User{}, nil, false, ErrInvalidToken
	}
	t, err := a.issuer.Verify(token, audiences)
	if errors.Is(err, errNotOurs) {
		return User{}, nil, false, ErrInvalidToken
	}
	if err == nil {
		err = a.checkServiceAccount(ctx, t)
	}
	if err != nil {
		return User{}, nil, false, fmt.Errorf("[%w, %v]", ErrInvalidToken, err)
	}
	return t.User(), t.Audiences, true, nil
}

// checkServiceAccount refuses t when the lookup says its service account
// is gone or was re-created, in kube-apiserver's words.
func (a *Authenticator) checkServiceAccount(ctx context.Context, t *ServiceAccountToken) error {
	fn := a.lookup.Load()
	if fn == nil || *fn == nil {
		return nil
	}
	uid, ok, err := (*fn)(ctx, t.Namespace, t.Name)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("serviceaccounts %q not found", t.Name)
	case uid != t.UID:
		return fmt.Errorf("service account UID (%s) does not match claim (%s)", uid, t.UID)
	}
	return nil
}

func (a *Authenticator) apiAudiences() []string {
	if a.issuer == nil {
		return nil
	}
	return a.issuer.APIAudiences()
}

// User is the user a verified token authenticates, with the groups and
// extras Kubernetes gives a service account.
func (t *ServiceAccountToken) User() User {
	u := User{
		Name:   serviceaccount.MakeUsername(t.Namespace, t.Name),
		UID:    t.UID,
		Groups: append(serviceaccount.MakeGroupNames(t.Namespace), GroupAuthenticated),
	}
	extra := map[string][]string{}
	if t.ID != "" {
		extra[user.CredentialIDKey] = []string{"JTI=" + t.ID}
	}
	if p := t.Pod; p != nil {
		extra[serviceaccount.PodNameKey] = []string{p.Name}
		extra[serviceaccount.PodUIDKey] = []string{p.UID}
	}
	if n := t.Node; n != nil {
		extra[serviceaccount.NodeNameKey] = []string{n.Name}
		extra[serviceaccount.NodeUIDKey] = []string{n.UID}
	}
	if len(extra) > 0 {
		u.Extra = extra
	}
	return u
}

// bearerToken extracts the token from an "Authorization: Bearer <token>"
// header value as kube-apiserver does: the scheme is case-insensitive, the
// token is the word after it (a third word is ignored), and a missing or
// empty token is no token.
func bearerToken(header string) (string, bool) {
	parts := strings.SplitN(strings.TrimSpace(header), " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "bearer") || parts[1] == "" {
		return "", false
	}
	return parts[1], true
}

// authenticated returns u with its own copy of the groups and extras,
// including system:authenticated once.
func authenticated(u User) User {
	u = u.clone()
	if !slices.Contains(u.Groups, GroupAuthenticated) {
		u.Groups = append(u.Groups, GroupAuthenticated)
	}
	return u
}

// intersect returns the elements of a that are also in b.
func intersect(a, b []string) []string {
	var out []string
	for _, s := range a {
		if slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}
