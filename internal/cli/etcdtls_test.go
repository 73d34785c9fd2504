package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/objwatch/objwatch/server/auth"
)

func TestEtcdTLSFlags(t *testing.T) {
	dir := t.TempDir()
	if _, err := auth.EnsureCredentials(dir, nil); err != nil {
		t.Fatal(err)
	}
	ca, cert, key := filepath.Join(dir, auth.CACertFile), filepath.Join(dir, auth.AdminCertFile), filepath.Join(dir, auth.AdminKeyFile)
	if tc, err := etcdTLS("", "", ""); err != nil || tc != nil {
		t.Fatalf("etcdTLS() without flags = %v, %v; want nil, nil (plain)", tc, err)
	}
	tc, err := etcdTLS(ca, cert, key)
	if err != nil || tc.RootCAs == nil || len(tc.Certificates) != 1 {
		t.Fatalf("etcdTLS(ca, cert, key) = %+v, %v; want a CA pool and one client certificate", tc, err)
	}
	empty := filepath.Join(dir, "empty.pem")
	os.WriteFile(empty, []byte("not a certificate"), 0o600)
	for _, bad := range [][3]string{{filepath.Join(dir, "missing"), "", ""}, {empty, "", ""}, {ca, cert, ""}, {ca, key, cert}} {
		if _, err := etcdTLS(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("etcdTLS(%q, %q, %q) = nil error, want one", bad[0], bad[1], bad[2])
		}
	}
}
