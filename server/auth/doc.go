// Package auth provisions objwatch's TLS credentials and authenticates API
// requests.
//
// # Credentials
//
// EnsureCredentials keeps a small PKI in one directory so that a restarted
// server presents the same identity and accepts the same clients:
//
//	ca.crt, ca.key          self-signed CA, CN "objwatch-ca", valid 10 years
//	server.crt, server.key  serving certificate for 127.0.0.1, ::1, localhost
//	                        and the configured hosts
//	admin.crt, admin.key    client certificate, CN "admin", O "system:masters"
//	admin.token             random 32-byte bearer token, hex encoded
//	sa.key                  service-account token signing key (EnsureServiceAccountKey)
//
// All keys are ECDSA P-256 (small, fast and accepted by every Kubernetes
// client), stored as PKCS #8 PEM with mode 0600. Files are written to a
// temporary file and renamed, so a crash never leaves a half-written file.
//
// The CA and the token are the durable identity: they are created only when
// their file (ca.crt, admin.token) does not exist, and a damaged one is an
// error rather than silently replaced, since clients already trust it. The leaf
// certificates are derived from the CA and are reissued whenever they are
// missing, unreadable, not signed by the CA, close to expiry or, for the
// serving certificate, missing a requested host.
//
// # Authentication
//
// An Authenticator (New) tries a request's credentials in kube-apiserver's
// order:
//
//  1. a client certificate chaining to the CA: user CN, groups O;
//     a certificate from another CA is refused (401) whatever follows;
//  2. a bearer token among the static ones (the admin token, a
//     --token-auth-file read by ReadTokenFile): its user, uid and groups;
//  3. a bearer token that is a service-account JWT of the TokenIssuer:
//     user system:serviceaccount:NS:NAME with the account's uid, groups
//     system:serviceaccounts and system:serviceaccounts:NS, and extras
//     credential-id (JTI=...) and pod-name/pod-uid for a pod-bound token;
//     with a ServiceAccountLookup, only while the account exists with that
//     uid. A bearer token neither step knows is refused (401);
//  4. nothing usable: user system:anonymous in group
//     system:unauthenticated if anonymous requests are allowed, else
//     ErrNoCredentials (401).
//
// Every authenticated user has group system:authenticated, once.
// AuthenticateToken is step 2 and 3 alone, for TokenReview. Impersonate
// then decides whether the user may act as the one its Impersonate-*
// headers name, asking the caller's authorizer as kube-apiserver v1.37's
// legacy and constrained impersonation do. Authorization is not decided
// here.
//
// # Concurrency
//
// Authenticator, TokenIssuer and Impersonator are safe for concurrent use;
// tokens may be added and the lookup set while requests are authenticated.
// Nothing here starts a goroutine.
package auth
