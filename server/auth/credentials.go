package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// File names inside the credentials directory.
const (
	CACertFile     = "ca.crt"
	CAKeyFile      = "ca.key"
	ServerCertFile = "server.crt"
	ServerKeyFile  = "server.key"
	AdminCertFile  = "admin.crt"
	AdminKeyFile   = "admin.key"
	AdminTokenFile = "admin.token"
)

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	// Leaves are reissued at startup once they get this close to expiry.
	leafRenewBefore = 30 * 24 * time.Hour
	// Backdating tolerates clients whose clocks run a little behind.
	backdate = time.Hour
)

// Credentials is the server's TLS identity plus the admin client credentials.
// It is returned by EnsureCredentials and must not be modified afterwards;
// it is then safe for concurrent use.
type Credentials struct {
	CACertPEM    []byte          // CA certificate, PEM
	CAPool       *x509.CertPool  // pool holding only the CA
	ServingCert  tls.Certificate // serving certificate and key, Leaf set
	AdminCertPEM []byte          // admin client certificate, PEM
	AdminKeyPEM  []byte          // admin client key, PKCS #8 PEM
	AdminToken   string          // admin bearer token
}

// EnsureCredentials loads the credentials stored in dir, creating dir (0700)
// and whatever is missing. The serving certificate is valid for 127.0.0.1,
// ::1, localhost and each of hosts (IP addresses become IP SANs, anything
// else a DNS SAN); if the stored one lacks a host it is reissued by the same
// CA. See the package doc for which files are durable and which are reissued.
//
// It must not run concurrently with itself on the same dir.
func EnsureCredentials(dir string, hosts []string) (*Credentials, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	ca, err := ensureCA(dir)
	if err != nil {
		return nil, fmt.Errorf("auth: ca: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert.Leaf)

	ips, names := servingSANs(hosts)
	serving, err := ensureLeaf(dir, "server", ca, pool, servingTemplate(ips, names), func(c *x509.Certificate) bool {
		return coversSANs(c, ips, names)
	})
	if err != nil {
		return nil, fmt.Errorf("auth: serving cert: %w", err)
	}
	admin, err := ensureLeaf(dir, "admin", ca, pool, adminTemplate(), nil)
	if err != nil {
		return nil, fmt.Errorf("auth: admin cert: %w", err)
	}
	token, err := ensureToken(filepath.Join(dir, AdminTokenFile))
	if err != nil {
		return nil, fmt.Errorf("auth: admin token: %w", err)
	}
	return &Credentials{
		CACertPEM:    ca.certPEM,
		CAPool:       pool,
		ServingCert:  serving.cert,
		AdminCertPEM: admin.certPEM,
		AdminKeyPEM:  admin.keyPEM,
		AdminToken:   token,
	}, nil
}

// ServerTLSConfig returns a new TLS config that serves c's certificate and
// asks clients for a certificate, as kube-apiserver does. The
// Authenticator verifies it against the CA, so that a certificate from
// another CA is answered 401 rather than failing the handshake; clients
// without one are let through to bearer token authentication.
func (c *Credentials) ServerTLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{c.ServingCert},
		ClientCAs:    c.CAPool,
		ClientAuth:   tls.RequestClientCert,
		NextProtos:   []string{"h2", "http/1.1"},
	}
}

// pair is a certificate with its key, parsed and as stored.
type pair struct {
	cert            tls.Certificate // Leaf is set
	certPEM, keyPEM []byte
}

// ensureCA loads the CA, creating one only if ca.crt does not exist: once
// clients trust a CA, replacing it behind the operator's back would lock
// them out, so a damaged CA is an error. The key is written before the
// certificate, so a crash in between leaves no ca.crt and a retry starts over.
func ensureCA(dir string) (pair, error) {
	_, err := os.Stat(filepath.Join(dir, CACertFile))
	if errors.Is(err, fs.ErrNotExist) {
		return createPair(dir, "ca", caTemplate(), nil)
	}
	ca, err := loadPair(dir, "ca")
	if err != nil {
		return pair{}, err
	}
	if !ca.cert.Leaf.IsCA {
		return pair{}, fmt.Errorf("%s is not a ca certificate", CACertFile)
	}
	return ca, nil
}

// ensureLeaf loads name.crt and name.key and reissues them from tmpl unless
// they are a matching pair, chain to the CA for tmpl's key usage until after
// the renewal window, and satisfy ok (if not nil). Leaves are cheap to
// reissue, so a damaged leaf is replaced rather than reported.
func ensureLeaf(dir, name string, ca pair, pool *x509.CertPool, tmpl *x509.Certificate, ok func(*x509.Certificate) bool) (pair, error) {
	p, err := loadPair(dir, name)
	if err == nil {
		_, err = p.cert.Leaf.Verify(x509.VerifyOptions{
			Roots:       pool,
			CurrentTime: time.Now().Add(leafRenewBefore),
			KeyUsages:   tmpl.ExtKeyUsage,
		})
	}
	if err == nil && (ok == nil || ok(p.cert.Leaf)) {
		return p, nil
	}
	return createPair(dir, name, tmpl, &ca)
}

func loadPair(dir, name string) (pair, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, name+".crt"))
	if err != nil {
		return pair{}, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, name+".key"))
	if err != nil {
		return pair{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return pair{}, fmt.Errorf("load %s: %w", name, err)
	}
	return pair{cert: cert, certPEM: certPEM, keyPEM: keyPEM}, nil
}

// createPair generates a P-256 key, has tmpl signed by parent (self-signed
// if parent is nil) and writes name.key, then name.crt.
func createPair(dir, name string, tmpl *x509.Certificate, parent *pair) (pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pair{}, fmt.Errorf("generate key: %w", err)
	}
	tmpl.NotBefore = time.Now().Add(-backdate)
	issuer, signer := tmpl, any(key)
	if parent != nil {
		issuer, signer = parent.cert.Leaf, parent.cert.PrivateKey
	}
	// A nil SerialNumber makes CreateCertificate pick a random one.
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, key.Public(), signer)
	if err != nil {
		return pair{}, fmt.Errorf("create %s certificate: %w", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return pair{}, fmt.Errorf("marshal %s key: %w", name, err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := writeFileAtomic(filepath.Join(dir, name+".key"), keyPEM, 0o600); err != nil {
		return pair{}, err
	}
	if err := writeFileAtomic(filepath.Join(dir, name+".crt"), certPEM, 0o644); err != nil {
		return pair{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return pair{}, fmt.Errorf("load %s: %w", name, err)
	}
	return pair{cert: cert, certPEM: certPEM, keyPEM: keyPEM}, nil
}

func caTemplate() *x509.Certificate {
	return &x509.Certificate{
		Subject:               pkix.Name{CommonName: "objwatch-ca"},
		NotAfter:              time.Now().Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
}

func servingTemplate(ips []net.IP, names []string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: "objwatch"},
		NotAfter:    time.Now().Add(leafValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: ips,
		DNSNames:    names,
	}
}

func adminTemplate() *x509.Certificate {
	return clientTemplate("admin", []string{GroupMasters}, leafValidity)
}

func clientTemplate(name string, groups []string, validity time.Duration) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: name, Organization: groups},
		NotAfter:    time.Now().Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

// servingSANs splits the loopback names plus hosts into IP and DNS SANs,
// without blanks or duplicates.
func servingSANs(hosts []string) (ips []net.IP, names []string) {
	for _, h := range append([]string{"127.0.0.1", "::1", "localhost"}, hosts...) {
		h = strings.TrimSpace(h)
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		} else if h = strings.ToLower(h); h != "" && !slices.Contains(names, h) {
			names = append(names, h)
		}
	}
	return ips, names
}

// coversSANs reports whether c lists every one of ips and names literally.
func coversSANs(c *x509.Certificate, ips []net.IP, names []string) bool {
	for _, ip := range ips {
		if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
			return false
		}
	}
	for _, n := range names {
		if !slices.ContainsFunc(c.DNSNames, func(d string) bool { return strings.EqualFold(d, n) }) {
			return false
		}
	}
	return true
}

// ensureToken reads the token at path, or stores a new random one if there
// is no file. Like the CA it is durable: an empty file is an error.
func ensureToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		token := strings.TrimSpace(string(b))
		if token == "" {
			return "", fmt.Errorf("%s is empty", path)
		}
		return token, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	token := hex.EncodeToString(raw)
	if err := writeFileAtomic(path, []byte(token+"\n"), 0o600); err != nil {
		return "", err
	}
	return token, nil
}

// writeFileAtomic writes data to a temporary file beside path and renames it
// into place, so path holds either the old content or the new, never part.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// IssueClientCert signs a client certificate for user name in groups (the
// subject's CN and O, as the Authenticator reads them) with the CA stored
// in dir, valid for validity (0: one year). It returns the certificate and
// its new P-256 key as PEM and writes nothing.
func IssueClientCert(dir, name string, groups []string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if name == "" {
		return nil, nil, errors.New("auth: client cert: empty user name")
	}
	if validity <= 0 {
		validity = leafValidity
	}
	ca, err := loadPair(dir, "ca")
	if err != nil {
		return nil, nil, fmt.Errorf("auth: client cert: ca: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: client cert: %w", err)
	}
	tmpl := clientTemplate(name, groups, validity)
	tmpl.NotBefore = time.Now().Add(-backdate)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert.Leaf, key.Public(), ca.cert.PrivateKey)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: client cert: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: client cert: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}
