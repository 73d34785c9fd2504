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
// An Authenticator accepts a client certificate verified against the CA
// (user from the subject's CN, groups from its O) or a bearer token it knows,
// and stores the resulting User in the request context with WithUser.
// Authorization is not decided here.
package auth
