package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
)

// ServiceAccountKeyFile is the service-account signing key inside the
// credentials directory.
const ServiceAccountKeyFile = "sa.key"

// DefaultIssuer is the issuer (and API audience) of service-account tokens
// unless configured, the one kube-apiserver's tooling sets.
const DefaultIssuer = "https://kubernetes.default.svc.cluster.local"

// Expiration bounds of TokenRequest, as kube-apiserver's.
const (
	// DefaultTokenExpiration is a TokenRequest's expirationSeconds default.
	DefaultTokenExpiration = time.Hour
	// MinTokenExpiration is the shortest expiry a TokenRequest may ask for.
	MinTokenExpiration = 10 * time.Minute
	// MaxTokenExpiration is the longest expiry a TokenRequest may ask for
	// (2^32 seconds); a TokenIssuer's own maximum shortens longer ones.
	MaxTokenExpiration = (1 << 32) * time.Second
)

// ExpirationError is Issue's refusal of an expiry outside
// [MinTokenExpiration, MaxTokenExpiration]. Error is kube-apiserver's
// field detail for spec.expirationSeconds, e.g. "may not specify a
// duration less than 10 minutes"; the TokenRequest endpoint answers it as
// a 422 field.Invalid(spec.expirationSeconds, Seconds, Error()).
type ExpirationError struct {
	Seconds int64
}

func (e *ExpirationError) Error() string {
	if time.Duration(e.Seconds)*time.Second < MinTokenExpiration {
		return "may not specify a duration less than 10 minutes"
	}
	return "may not specify a duration larger than 2^32 seconds"
}

// BoundObject is an object a token is bound to (TokenRequest's
// spec.boundObjectRef): Kind is Pod, Secret or Node.
type BoundObject struct {
	Kind, Name, UID string
	// Node is the pod's node, for a token bound to a pod (optional).
	Node *BoundObject
}

// ServiceAccountToken is what a verified token says.
type ServiceAccountToken struct {
	Namespace, Name, UID string
	// ID is the token's jti.
	ID string
	// Audiences are the token's audiences among those it was verified for.
	Audiences []string
	Expiry    time.Time
	// Pod, Secret and Node are the objects the token is bound to, if any.
	Pod, Secret, Node *BoundObject
}

// TokenIssuer signs and verifies service-account tokens: JWTs with
// Kubernetes' claims, ES256 for an ECDSA P-256 key and RS256 for an RSA
// key. It is safe for concurrent use.
//
// Every server of one etcd must verify the tokens the others issue, so
// they must share the signing key: copy one data dir's sa.key to the
// others, or give them all the same --service-account-signing-key-file
// (or each the others' keys with --service-account-key-file).
type TokenIssuer struct {
	issuer    string
	audiences []string
	max       time.Duration
	key       crypto.Signer
	method    jwt.SigningMethod
	kid       string
	// verify holds the public keys tokens are accepted from by key id,
	// the signing key's first.
	verify []verifyKey
	// shared are the keys other servers on the same store published (see
	// SetSharedKeys); read without a lock.
	shared atomic.Pointer[[]verifyKey]
}

type verifyKey struct {
	kid string
	key crypto.PublicKey
}

// TokenIssuerConfig configures NewTokenIssuer.
type TokenIssuerConfig struct {
	// Key signs tokens (*ecdsa.PrivateKey on P-256, or *rsa.PrivateKey).
	Key crypto.Signer
	// Issuer is the iss claim; default DefaultIssuer.
	Issuer string
	// Audiences are the API audiences: a request's token must have one of
	// them, and Issue defaults to them. Default: the issuer.
	Audiences []string
	// MaxExpiration shortens longer requested expiries (kube-apiserver's
	// --service-account-max-token-expiration); 0: no limit.
	MaxExpiration time.Duration
	// VerifyKeys are more public keys whose tokens are accepted (those of
	// other servers); private keys are accepted for their public half.
	VerifyKeys []crypto.PublicKey
}

// NewTokenIssuer returns an issuer for cfg.
func NewTokenIssuer(cfg TokenIssuerConfig) (*TokenIssuer, error) {
	t := &TokenIssuer{issuer: cfg.Issuer, audiences: slices.Clone(cfg.Audiences), max: cfg.MaxExpiration, key: cfg.Key}
	if t.issuer == "" {
		t.issuer = DefaultIssuer
	}
	if len(t.audiences) == 0 {
		t.audiences = []string{t.issuer}
	}
	var err error
	if t.method, err = signingMethod(cfg.Key); err != nil {
		return nil, fmt.Errorf("auth: service-account key: %w", err)
	}
	for _, k := range append([]crypto.PublicKey{cfg.Key.Public()}, cfg.VerifyKeys...) {
		if s, ok := k.(crypto.Signer); ok {
			k = s.Public()
		}
		kid, err := keyID(k)
		if err != nil {
			return nil, fmt.Errorf("auth: service-account key: %w", err)
		}
		t.verify = append(t.verify, verifyKey{kid: kid, key: k})
	}
	t.kid = t.verify[0].kid
	return t, nil
}

func signingMethod(k crypto.Signer) (jwt.SigningMethod, error) {
	switch k := k.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, errors.New("ecdsa key must be on curve P-256")
		}
		return jwt.SigningMethodES256, nil
	case *rsa.PrivateKey:
		return jwt.SigningMethodRS256, nil
	case nil:
		return nil, errors.New("no key")
	}
	return nil, fmt.Errorf("unsupported key type %T", k)
}

// keyID is Kubernetes' kid: the unpadded base64url SHA-256 of the public
// key's PKIX DER.
func keyID(k crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// Issuer returns the iss claim of the tokens t issues.
func (t *TokenIssuer) Issuer() string { return t.issuer }

// APIAudiences returns the audiences a token needs to authenticate API
// requests. The caller must not modify the slice.
func (t *TokenIssuer) APIAudiences() []string { return t.audiences }

// claims are a service-account token's, as kube-apiserver writes them.
type claims struct {
	jwt.RegisteredClaims
	Kubernetes k8sClaims `json:"kubernetes.io"`
}

type k8sClaims struct {
	Namespace      string `json:"namespace,omitempty"`
	ServiceAccount ref    `json:"serviceaccount"`
	Pod            *ref   `json:"pod,omitempty"`
	Secret         *ref   `json:"secret,omitempty"`
	Node           *ref   `json:"node,omitempty"`
}

type ref struct {
	Name string `json:"name,omitempty"`
	UID  string `json:"uid,omitempty"`
}

// Issue signs a token for service account ns/name (uid) with audiences
// (nil: the API audiences), valid for expiry (0: DefaultTokenExpiration;
// beyond the issuer's maximum: that maximum), bound to bound if not nil.
// It follows TokenRequest: an expiry outside [MinTokenExpiration,
// MaxTokenExpiration] is an *ExpirationError, and a bound object of
// another kind than Pod, Secret or Node an error.
func (t *TokenIssuer) Issue(ns, name, uid string, audiences []string, expiry time.Duration, bound *BoundObject) (string, time.Time, error) {
	if expiry == 0 {
		expiry = DefaultTokenExpiration
	}
	if expiry < MinTokenExpiration || expiry > MaxTokenExpiration {
		return "", time.Time{}, &ExpirationError{Seconds: int64(expiry / time.Second)}
	}
	if t.max > 0 && expiry > t.max {
		expiry = t.max
	}
	if len(audiences) == 0 {
		audiences = t.audiences
	}
	now := time.Now()
	exp := now.Add(expiry)
	c := claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    t.issuer,
			Subject:   serviceaccount.MakeUsername(ns, name),
			Audience:  jwt.ClaimStrings(audiences),
			ExpiresAt: jwt.NewNumericDate(exp),
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now),
			ID:        string(uuid.NewUUID()),
		},
		Kubernetes: k8sClaims{Namespace: ns, ServiceAccount: ref{Name: name, UID: uid}},
	}
	if bound != nil {
		r := &ref{Name: bound.Name, UID: bound.UID}
		switch bound.Kind {
		case "Pod":
			c.Kubernetes.Pod = r
			if n := bound.Node; n != nil {
				c.Kubernetes.Node = &ref{Name: n.Name, UID: n.UID}
			}
		case "Secret":
			c.Kubernetes.Secret = r
		case "Node":
			c.Kubernetes.Node = r
		default:
			return "", time.Time{}, fmt.Errorf("auth: token bound to a %s, not a Pod, Secret or Node", bound.Kind)
		}
	}
	tok := jwt.NewWithClaims(t.method, c)
	tok.Header["kid"] = t.kid
	s, err := tok.SignedString(t.key)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("auth: sign token: %w", err)
	}
	return s, exp.Truncate(time.Second), nil
}

// errNotOurs: the token is no JWT of this issuer, so another authenticator
// may own it (kube-apiserver's hasCorrectIssuer).
var errNotOurs = errors.New("not a service-account token of this issuer")

// leeway is the clock skew tolerated on exp, nbf and iat, go-jose's
// DefaultLeeway that kube-apiserver validates with.
const leeway = time.Minute

// Verify checks token's signature, issuer, audiences (one of audiences;
// nil: the API audiences) and validity period (with a minute's leeway, as
// Kubernetes), in kube-apiserver's order and with its error texts, e.g.
// "service account token has expired". It does not know whether the
// service account still exists: the Authenticator asks its lookup.
func (t *TokenIssuer) Verify(token string, audiences []string) (*ServiceAccountToken, error) {
	if !t.hasIssuer(token) {
		return nil, errNotOurs
	}
	if len(audiences) == 0 {
		audiences = t.audiences
	}
	var c claims
	parser := jwt.NewParser(jwt.WithValidMethods([]string{"ES256", "RS256"}), jwt.WithoutClaimsValidation())
	_, err := parser.ParseWithClaims(token, &c, func(tok *jwt.Token) (any, error) {
		kid, _ := tok.Header["kid"].(string)
		if k := t.keyFor(kid); k != nil {
			return k, nil
		}
		// As go-jose, from which kube-apiserver's texts come, tries each key.
		keys := make([]jwt.VerificationKey, 0, len(t.verify))
		for _, k := range t.verify {
			keys = append(keys, k.key)
		}
		return jwt.VerificationKeySet{Keys: keys}, nil
	})
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return nil, errNotOurs
	case err != nil:
		// kube-apiserver's (go-jose's) text for a bad signature.
		return nil, errors.New("go-jose/go-jose: error in cryptographic primitive")
	}
	if c.Issuer != t.issuer {
		return nil, fmt.Errorf("token issuer %q is invalid", c.Issuer)
	}
	tokenAuds := []string(c.Audience)
	auds := intersect(tokenAuds, audiences)
	if len(auds) == 0 {
		return nil, fmt.Errorf("token audiences %q is invalid for the target audiences %q", tokenAuds, audiences)
	}
	now := time.Now()
	switch {
	case c.ExpiresAt == nil || now.After(c.ExpiresAt.Add(leeway)):
		return nil, errors.New("service account token has expired")
	case c.NotBefore != nil && now.Add(leeway).Before(c.NotBefore.Time):
		return nil, errors.New("service account token is not valid yet")
	case c.IssuedAt != nil && now.Add(leeway).Before(c.IssuedAt.Time):
		return nil, errors.New("service account token is issued in the future")
	}
	k := c.Kubernetes
	if ns, name, err := serviceaccount.SplitUsername(c.Subject); err != nil || ns != k.Namespace || name != k.ServiceAccount.Name {
		return nil, fmt.Errorf("token subject %q does not match its service account %s/%s", c.Subject, k.Namespace, k.ServiceAccount.Name)
	}
	v := &ServiceAccountToken{
		Namespace: k.Namespace, Name: k.ServiceAccount.Name, UID: k.ServiceAccount.UID,
		ID: c.ID, Audiences: auds, Expiry: c.ExpiresAt.Time,
	}
	if k.Pod != nil {
		v.Pod = &BoundObject{Kind: "Pod", Name: k.Pod.Name, UID: k.Pod.UID}
	}
	if k.Secret != nil {
		v.Secret = &BoundObject{Kind: "Secret", Name: k.Secret.Name, UID: k.Secret.UID}
	}
	if k.Node != nil {
		v.Node = &BoundObject{Kind: "Node", Name: k.Node.Name, UID: k.Node.UID}
	}
	return v, nil
}

func (t *TokenIssuer) keyFor(kid string) crypto.PublicKey {
	if kid == "" {
		return nil
	}
	for _, k := range t.verify {
		if k.kid == kid {
			return k.key
		}
	}
	if shared := t.shared.Load(); shared != nil {
		for _, k := range *shared {
			if k.kid == kid {
				return k.key
			}
		}
	}
	return nil
}

// KeyID returns the kid of t's signing key (its tokens' header).
func (t *TokenIssuer) KeyID() string { return t.kid }

// PublicKeyPEM returns t's signing key's public half, PKIX PEM, for other
// servers to verify t's tokens with (SetSharedKeys).
func (t *TokenIssuer) PublicKeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(t.key.Public())
	if err != nil {
		return nil, fmt.Errorf("auth: service-account key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// SetSharedKeys replaces the keys, besides t's own and its VerifyKeys,
// whose tokens t accepts: those other servers sharing the store
// published. Each is a PKIX PEM public key; one that does not parse is an
// error and nothing changes. Safe to call while tokens are verified.
func (t *TokenIssuer) SetSharedKeys(pems [][]byte) error {
	var keys []verifyKey
	for _, b := range pems {
		block, _ := pem.Decode(b)
		if block == nil {
			return errors.New("auth: shared service-account key: not PEM")
		}
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return fmt.Errorf("auth: shared service-account key: %w", err)
		}
		kid, err := keyID(k)
		if err != nil {
			return fmt.Errorf("auth: shared service-account key: %w", err)
		}
		keys = append(keys, verifyKey{kid: kid, key: k})
	}
	t.shared.Store(&keys)
	return nil
}

// hasIssuer reports whether token is a compact JWT whose unverified iss is
// t's, as kube-apiserver checks before it verifies anything.
func (t *TokenIssuer) hasIssuer(token string) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	var c struct {
		Issuer string `json:"iss"`
	}
	return json.Unmarshal(payload, &c) == nil && c.Issuer == t.issuer
}

// EnsureServiceAccountKey loads the service-account signing key from
// dir/sa.key, creating an ECDSA P-256 key (PKCS #8 PEM, mode 0600, written
// atomically) if there is none. Like the CA it is durable: a damaged file
// is an error, since tokens signed with it are out there.
func EnsureServiceAccountKey(dir string) (crypto.Signer, error) {
	path := filepath.Join(dir, ServiceAccountKeyFile)
	k, err := LoadPrivateKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("auth: generate service-account key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("auth: service-account key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	if err := writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, fmt.Errorf("auth: service-account key: %w", err)
	}
	return key, nil
}

// LoadPrivateKey reads the first private key of a PEM file: PKCS #8
// ("PRIVATE KEY"), SEC 1 ("EC PRIVATE KEY") or PKCS #1 ("RSA PRIVATE
// KEY"). A missing file is an error wrapping fs.ErrNotExist.
func LoadPrivateKey(path string) (crypto.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil, fmt.Errorf("auth: %s: no private key", path)
		}
		k, ok, err := parsePrivateKey(block)
		if !ok {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("auth: %s: %w", path, err)
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("auth: %s: unsupported key type %T", path, k)
		}
		return s, nil
	}
}

// LoadPublicKeys reads the public keys of a PEM file as kube-apiserver's
// --service-account-key-file: "PUBLIC KEY" and "RSA PUBLIC KEY" blocks,
// certificates, and the public halves of private keys.
func LoadPublicKeys(path string) ([]crypto.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	var keys []crypto.PublicKey
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		k, ok, err := parsePrivateKey(block)
		switch {
		case ok:
		case block.Type == "PUBLIC KEY":
			k, err = x509.ParsePKIXPublicKey(block.Bytes)
		case block.Type == "RSA PUBLIC KEY":
			k, err = x509.ParsePKCS1PublicKey(block.Bytes)
		case block.Type == "CERTIFICATE":
			var c *x509.Certificate
			if c, err = x509.ParseCertificate(block.Bytes); err == nil {
				k = c.PublicKey
			}
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("auth: %s: %w", path, err)
		}
		if s, ok := k.(crypto.Signer); ok {
			k = s.Public()
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("auth: %s: no keys", path)
	}
	return keys, nil
}

// parsePrivateKey parses a private key block; false if block is none.
func parsePrivateKey(block *pem.Block) (any, bool, error) {
	var k any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, false, nil
	}
	return k, true, err
}
