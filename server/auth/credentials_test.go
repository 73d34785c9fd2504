package auth_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server/auth"
)

func parseCert(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(pemBytes)
	if b == nil {
		t.Fatalf("no PEM block in %q", pemBytes)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatalf("ParseCertificate() error = %v", err)
	}
	return c
}

func fingerprint(t *testing.T, pemBytes []byte) [sha256.Size]byte {
	return sha256.Sum256(parseCert(t, pemBytes).Raw)
}

func TestEnsureCredentialsGenerateAndReload(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	hosts := []string{"10.0.0.1", "api.example.test", "fd00::1"}
	first, err := auth.EnsureCredentials(dir, hosts)
	if err != nil {
		t.Fatalf("EnsureCredentials() error = %v", err)
	}

	modes := map[string]os.FileMode{
		".":                 0o700 | os.ModeDir,
		auth.CACertFile:     0o644,
		auth.CAKeyFile:      0o600,
		auth.ServerCertFile: 0o644,
		auth.ServerKeyFile:  0o600,
		auth.AdminCertFile:  0o644,
		auth.AdminKeyFile:   0o600,
		auth.AdminTokenFile: 0o600,
	}
	for name, want := range modes {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("Stat(%s) error = %v", name, err)
		}
		if fi.Mode() != want {
			t.Errorf("mode of %s = %v, want %v", name, fi.Mode(), want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != len(modes)-1 {
		t.Errorf("dir has %d entries, want %d (no temporary files)", len(entries), len(modes)-1)
	}

	ca := parseCert(t, first.CACertPEM)
	if ca.Subject.CommonName != "objwatch-ca" || !ca.IsCA {
		t.Errorf("CA subject %v IsCA %v, want objwatch-ca and true", ca.Subject, ca.IsCA)
	}
	if k, ok := ca.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("CA key is %T, want ECDSA P-256", ca.PublicKey)
	}
	if life := time.Until(ca.NotAfter); life < 9*365*24*time.Hour || life > 10*366*24*time.Hour {
		t.Errorf("CA expires in %v, want about 10 years", life)
	}

	serving := first.ServingCert.Leaf
	if _, err := serving.Verify(x509.VerifyOptions{Roots: first.CAPool}); err != nil {
		t.Errorf("serving cert does not verify against CA: %v", err)
	}
	for _, h := range append([]string{"127.0.0.1", "::1", "localhost"}, hosts...) {
		if err := serving.VerifyHostname(h); err != nil {
			t.Errorf("serving cert VerifyHostname(%s) = %v, want nil", h, err)
		}
	}

	admin := parseCert(t, first.AdminCertPEM)
	if admin.Subject.CommonName != "admin" || !slices.Equal(admin.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("admin subject = %v, want CN=admin,O=system:masters", admin.Subject)
	}
	if _, err := admin.Verify(x509.VerifyOptions{
		Roots:     first.CAPool,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		t.Errorf("admin cert does not verify for client auth: %v", err)
	}
	if raw, err := hex.DecodeString(first.AdminToken); err != nil || len(raw) != 32 {
		t.Errorf("admin token %q is not 32 hex-encoded bytes", first.AdminToken)
	}

	second, err := auth.EnsureCredentials(dir, hosts)
	if err != nil {
		t.Fatalf("EnsureCredentials() again error = %v", err)
	}
	if fingerprint(t, second.CACertPEM) != fingerprint(t, first.CACertPEM) {
		t.Errorf("reloaded CA fingerprint differs")
	}
	if second.AdminToken != first.AdminToken {
		t.Errorf("reloaded token = %q, want %q", second.AdminToken, first.AdminToken)
	}
	if !bytes.Equal(second.ServingCert.Leaf.Raw, serving.Raw) {
		t.Errorf("serving cert was reissued on reload")
	}
	if !bytes.Equal(second.AdminCertPEM, first.AdminCertPEM) || !bytes.Equal(second.AdminKeyPEM, first.AdminKeyPEM) {
		t.Errorf("admin cert or key changed on reload")
	}
}

func TestEnsureCredentialsHosts(t *testing.T) {
	tests := []struct {
		name          string
		first, second []string
		reissue       bool
	}{
		{"same hosts", []string{"api.example.test"}, []string{"api.example.test"}, false},
		{"added name", []string{"api.example.test"}, []string{"api.example.test", "other.example.test"}, true},
		{"added ip", nil, []string{"10.1.2.3"}, true},
		{"added ipv6", nil, []string{"fd00::2"}, true},
		{"fewer hosts", []string{"a.example.test", "10.1.2.3"}, []string{"a.example.test"}, false},
		{"loopback only", nil, []string{"localhost", "127.0.0.1", "::1"}, false},
		{"other case", []string{"API.example.test"}, []string{"api.EXAMPLE.test"}, false},
		{"blank", nil, []string{"", " "}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			first, err := auth.EnsureCredentials(dir, tt.first)
			if err != nil {
				t.Fatalf("EnsureCredentials(%v) error = %v", tt.first, err)
			}
			second, err := auth.EnsureCredentials(dir, tt.second)
			if err != nil {
				t.Fatalf("EnsureCredentials(%v) error = %v", tt.second, err)
			}
			if !bytes.Equal(second.CACertPEM, first.CACertPEM) ||
				!bytes.Equal(second.AdminCertPEM, first.AdminCertPEM) ||
				second.AdminToken != first.AdminToken {
				t.Errorf("CA, admin cert or token changed, want only the serving cert to change")
			}
			reissued := !bytes.Equal(second.ServingCert.Leaf.Raw, first.ServingCert.Leaf.Raw)
			if reissued != tt.reissue {
				t.Errorf("serving cert reissued = %v, want %v", reissued, tt.reissue)
			}
			onDisk, err := os.ReadFile(filepath.Join(dir, auth.ServerCertFile))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(parseCert(t, onDisk).Raw, second.ServingCert.Leaf.Raw) {
				t.Errorf("%s does not hold the returned serving cert", auth.ServerCertFile)
			}
			if _, err := second.ServingCert.Leaf.Verify(x509.VerifyOptions{Roots: first.CAPool}); err != nil {
				t.Errorf("serving cert does not verify against the original CA: %v", err)
			}
			for _, h := range tt.second {
				if h == "" || h == " " {
					continue
				}
				if err := second.ServingCert.Leaf.VerifyHostname(h); err != nil {
					t.Errorf("VerifyHostname(%s) = %v, want nil", h, err)
				}
			}
		})
	}
}

func TestEnsureCredentialsDamage(t *testing.T) {
	remove := func(name string) func(string) error {
		return func(dir string) error { return os.Remove(filepath.Join(dir, name)) }
	}
	garble := func(name string) func(string) error {
		return func(dir string) error { return os.WriteFile(filepath.Join(dir, name), []byte("garbage"), 0o600) }
	}
	tests := []struct {
		name    string
		damage  func(dir string) error
		wantErr bool
		newCA   bool
	}{
		{"server key missing", remove(auth.ServerKeyFile), false, false},
		{"server cert garbled", garble(auth.ServerCertFile), false, false},
		{"admin key garbled", garble(auth.AdminKeyFile), false, false},
		{"server key swapped for admin key", func(dir string) error {
			b, err := os.ReadFile(filepath.Join(dir, auth.AdminKeyFile))
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, auth.ServerKeyFile), b, 0o600)
		}, false, false},
		{"ca cert missing", remove(auth.CACertFile), false, true},
		{"ca key missing", remove(auth.CAKeyFile), true, false},
		{"ca key garbled", garble(auth.CAKeyFile), true, false},
		{"ca cert is a leaf", func(dir string) error {
			if err := os.Rename(filepath.Join(dir, auth.AdminCertFile), filepath.Join(dir, auth.CACertFile)); err != nil {
				return err
			}
			return os.Rename(filepath.Join(dir, auth.AdminKeyFile), filepath.Join(dir, auth.CAKeyFile))
		}, true, false},
		{"token rewritten", garble(auth.AdminTokenFile), false, false},
		{"token blank", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, auth.AdminTokenFile), []byte("\n"), 0o600)
		}, true, false},
		{"dir is a file", func(dir string) error {
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
			return os.WriteFile(dir, nil, 0o600)
		}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "pki")
			first, err := auth.EnsureCredentials(dir, nil)
			if err != nil {
				t.Fatalf("EnsureCredentials() error = %v", err)
			}
			if err := tt.damage(dir); err != nil {
				t.Fatal(err)
			}
			second, err := auth.EnsureCredentials(dir, nil)
			if (err != nil) != tt.wantErr {
				t.Fatalf("EnsureCredentials() after damage error = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if newCA := !bytes.Equal(second.CACertPEM, first.CACertPEM); newCA != tt.newCA {
				t.Errorf("new CA = %v, want %v", newCA, tt.newCA)
			}
			for _, c := range []*x509.Certificate{second.ServingCert.Leaf, parseCert(t, second.AdminCertPEM)} {
				if _, err := c.Verify(x509.VerifyOptions{
					Roots:     second.CAPool,
					KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
				}); err != nil {
					t.Errorf("%s cert does not verify against the CA: %v", c.Subject.CommonName, err)
				}
			}
		})
	}
}
