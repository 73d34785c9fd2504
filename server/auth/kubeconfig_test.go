package auth_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/objwatch/objwatch/server/auth"
)

func TestWriteKubeconfig(t *testing.T) {
	c := newCredentials(t)
	srv := newServer(t, c)
	path := filepath.Join(t.TempDir(), ".kube", "config")
	// Written twice: the second write must replace the first cleanly.
	for range 2 {
		if err := auth.WriteKubeconfig(path, srv.URL, c); err != nil {
			t.Fatalf("WriteKubeconfig() error = %v", err)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode() != 0o600 {
		t.Fatalf("Stat(kubeconfig) = %v, %v, want mode 0600", fi, err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("kubeconfig dir has %d entries, want 1 (no temporary files)", len(entries))
	}

	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatalf("clientcmd.LoadFromFile() error = %v", err)
	}
	if raw.CurrentContext != "objwatch" {
		t.Errorf("current-context = %q, want objwatch", raw.CurrentContext)
	}
	if kctx := raw.Contexts["objwatch"]; kctx == nil || kctx.Cluster != "objwatch" || kctx.AuthInfo != "admin" {
		t.Errorf("context objwatch = %+v, want cluster objwatch, user admin", kctx)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("clientcmd.BuildConfigFromFlags() error = %v", err)
	}
	if cfg.Host != srv.URL || cfg.BearerToken != c.AdminToken || len(cfg.CertData) == 0 || len(cfg.KeyData) == 0 {
		t.Errorf("rest.Config host %q token %q cert %d bytes key %d bytes, want %q, the admin token and both PEMs",
			cfg.Host, cfg.BearerToken, len(cfg.CertData), len(cfg.KeyData), srv.URL)
	}

	tests := []struct {
		name string
		edit func(*rest.Config)
	}{
		{"cert and token", func(*rest.Config) {}},
		{"cert only", func(cfg *rest.Config) { cfg.BearerToken = "" }},
		{"token only", func(cfg *rest.Config) { cfg.CertData, cfg.KeyData = nil, nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := rest.CopyConfig(cfg)
			tt.edit(cfg)
			client, err := rest.HTTPClientFor(cfg)
			if err != nil {
				t.Fatalf("rest.HTTPClientFor() error = %v", err)
			}
			defer client.CloseIdleConnections()
			resp, err := client.Get(srv.URL + "/api")
			if err != nil {
				t.Fatalf("GET error = %v", err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			const want = "admin system:masters,system:authenticated"
			if resp.StatusCode != http.StatusOK || string(body) != want {
				t.Errorf("GET = %d %q, want 200 %q", resp.StatusCode, body, want)
			}
		})
	}
}
