package client_test

import (
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/client"
)

// TestCertFileReload checks that rotated client certificate files replace
// the certificate on kept-alive connections, over HTTP/1.1 and HTTP/2
// (where every request shares one connection), and that a pair that does
// not parse keeps the old one.
func TestCertFileReload(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("http2=%v", h2), func(t *testing.T) {
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "%s %d", r.TLS.PeerCertificates[0].Subject.CommonName, r.ProtoMajor)
			}))
			srv.EnableHTTP2 = h2
			srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
			srv.StartTLS()
			t.Cleanup(srv.Close)
			ctx := ctxFor(t)
			proto := map[bool]string{false: "1", true: "2"}[h2]

			dir := t.TempDir()
			certA, keyA := selfSigned(t, "a")
			certB, keyB := selfSigned(t, "b")
			certC, keyC := selfSigned(t, "c")
			certFile := writeFile(t, dir, "tls.crt", certA)
			keyFile := writeFile(t, dir, "tls.key", keyA)
			rotate := func(cert, key string) {
				t.Helper()
				writeFile(t, dir, "tls.crt", cert)
				writeFile(t, dir, "tls.key", key)
			}
			ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
			rc := newExecREST(t, &client.Config{Host: srv.URL, CAData: ca, CertFile: certFile, KeyFile: keyFile})
			get := func(want string) {
				t.Helper()
				got, err := rc.Raw(ctx, "/")
				if want += " " + proto; err != nil || string(got) != want {
					t.Fatalf("Raw() = %q, %v; want client certificate and protocol %q", got, err, want)
				}
			}

			get("a")
			rotate(certB, keyB)
			get("a") // not re-read before certFileRefresh
			defer client.SetCertFileRefresh(0)()
			get("b")
			get("b")

			writeFile(t, dir, "tls.crt", "garbage")
			get("b")
			rotate(certC, keyB) // half written: the key is still b's
			get("b")
			writeFile(t, dir, "tls.key", keyC)
			get("c")
		})
	}
}

func TestCertFileErrors(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, "a")
	certFile := writeFile(t, dir, "tls.crt", cert)
	keyFile := writeFile(t, dir, "tls.key", key)
	garbage := writeFile(t, dir, "garbage", "garbage")
	tests := []struct {
		name string
		cfg  client.Config
		want string // in the error; "" for none
	}{
		{name: "files", cfg: client.Config{CertFile: certFile, KeyFile: keyFile}},
		{name: "file and data", cfg: client.Config{CertFile: certFile, KeyData: []byte(key)}},
		{name: "data wins", cfg: client.Config{CertData: []byte(cert), KeyData: []byte(key), CertFile: garbage, KeyFile: garbage}},
		{name: "garbage", cfg: client.Config{CertFile: garbage, KeyFile: keyFile}, want: "client certificate"},
		{name: "missing", cfg: client.Config{CertFile: filepath.Join(dir, "absent"), KeyFile: keyFile}, want: "absent"},
		{name: "no key", cfg: client.Config{CertFile: certFile}, want: "together"},
		{name: "no key with exec", cfg: client.Config{CertFile: certFile, Exec: &client.ExecConfig{Command: "x", APIVersion: execV1}}, want: "together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Host = "https://127.0.0.1:1"
			_, err := client.New(&tt.cfg)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("New() error = %v, want none", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("New() error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
