package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/objwatch/objwatch/internal/instance"
	"github.com/objwatch/objwatch/server/auth"
)

// user add prints a kubeconfig whose certificate the server's
// Authenticator takes for the user (CN) in its groups (O), for the
// server of the data dir.
func TestUserAdd(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	in, err := instance.Start(context.Background(), instance.Options{DataDir: dir, Listen: "127.0.0.1:0", EtcdNoFsync: true})
	if err != nil {
		t.Fatalf("instance.Start() error = %v", err)
	}
	defer in.Close()

	cmd := newUserCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"add", "alice", "--group", "dev", "--group", "ops", "--data-dir", dir})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("user add: %v (%s)", err, errOut.String())
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(out.Bytes())
	if err != nil {
		t.Fatalf("user add printed no kubeconfig: %v\n%s", err, out.String())
	}
	if cfg.Host != in.URL || cfg.BearerToken != "" {
		t.Errorf("kubeconfig server %q, token %q, want %q and none", cfg.Host, cfg.BearerToken, in.URL)
	}

	// The instance's own Authenticator, behind its TLS config.
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, err := in.Authenticator.AuthenticateRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "%s %s", u.Name, strings.Join(u.Groups, ","))
	}))
	srv.TLS = in.Credentials.ServerTLSConfig()
	srv.StartTLS()
	defer srv.Close()

	for _, url := range []string{srv.URL, in.URL + "/api"} {
		tr, err := rest.TransportFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := (&http.Client{Transport: tr}).Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case url == srv.URL && (resp.StatusCode != 200 || string(body) != "alice dev,ops,system:authenticated"):
			t.Errorf("GET as the new user = %d %q, want 200 %q", resp.StatusCode, body, "alice dev,ops,system:authenticated")
		case resp.StatusCode == http.StatusUnauthorized:
			t.Errorf("GET %s as the new user = 401 %s", url, body)
		}
	}
}

func TestUserAddNeedsDataDir(t *testing.T) {
	cmd := newUserCommand()
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"add", "alice", "--data-dir", filepath.Join(t.TempDir(), "none")})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), auth.CACertFile) {
		t.Errorf("user add without a data dir = %v, want an error naming %s", err, auth.CACertFile)
	}
}
