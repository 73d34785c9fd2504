package client_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/objwatch/objwatch/client"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFromKubeconfig(t *testing.T) {
	dir := t.TempDir()
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	first := writeFile(t, dir, "first", `
apiVersion: v1
kind: Config
current-context: a
clusters:
- name: c1
  cluster:
    server: https://one:6443
    certificate-authority-data: `+b64("CA1")+`
    tls-server-name: api.one
- name: c2
  cluster:
    server: https://two:6443
    certificate-authority: ca.pem
    proxy-url: http://proxy:3128
users:
- name: u1
  user:
    client-certificate-data: `+b64("CERT")+`
    client-key-data: `+b64("KEY")+`
- name: u2
  user:
    tokenFile: token
- name: ux
  user:
    exec:
      command: aws
contexts:
- name: a
  context: {cluster: c1, user: u1, namespace: team}
- name: b
  context: {cluster: c2, user: u2}
- name: x
  context: {cluster: c2, user: ux}
`)
	second := writeFile(t, dir, "second", `
apiVersion: v1
kind: Config
current-context: c
clusters:
- name: c1
  cluster: {server: https://shadowed:1}
- name: c3
  cluster: {server: https://three:6443, insecure-skip-tls-verify: true}
users:
- name: u3
  user: {token: secret, username: ignored}
- name: u4
  user: {client-certificate: /abs/cert.pem, client-key: key.pem}
contexts:
- name: c
  context: {cluster: c3, user: u3}
- name: d
  context: {cluster: c1, user: u4}
`)
	both := first + string(os.PathListSeparator) + second
	tests := []struct {
		path, context string
		want          *client.Config
		wantErr       bool
	}{
		{path: both, want: &client.Config{Host: "https://one:6443", CAData: []byte("CA1"), ServerName: "api.one",
			CertData: []byte("CERT"), KeyData: []byte("KEY"), Namespace: "team"}},
		{path: both, context: "b", want: &client.Config{Host: "https://two:6443", CAFile: filepath.Join(dir, "ca.pem"),
			ProxyURL: "http://proxy:3128", BearerTokenFile: filepath.Join(dir, "token")}},
		{path: both, context: "c", want: &client.Config{Host: "https://three:6443", Insecure: true, BearerToken: "secret", Username: "ignored"}},
		{path: both, context: "d", want: &client.Config{Host: "https://one:6443", CAData: []byte("CA1"), ServerName: "api.one",
			CertFile: "/abs/cert.pem", KeyFile: filepath.Join(dir, "key.pem")}},
		{path: second, want: &client.Config{Host: "https://three:6443", Insecure: true, BearerToken: "secret", Username: "ignored"}},
		{path: both, context: "x", wantErr: true},
		{path: both, context: "missing", wantErr: true},
		{path: filepath.Join(dir, "nope"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.context, func(t *testing.T) {
			got, err := client.FromKubeconfig(tt.path, tt.context)
			if (err != nil) != tt.wantErr {
				t.Fatalf("FromKubeconfig(%q, %q) error = %v, want error %v", tt.path, tt.context, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("FromKubeconfig(%q, %q) mismatch (-want +got):\n%s", tt.path, tt.context, diff)
			}
		})
	}

	t.Run("KUBECONFIG", func(t *testing.T) {
		t.Setenv("KUBECONFIG", filepath.Join(dir, "absent")+string(os.PathListSeparator)+second)
		got, err := client.Default()
		if err != nil {
			t.Fatalf("Default() error = %v", err)
		}
		if got.Host != "https://three:6443" {
			t.Errorf("Default().Host = %q, want https://three:6443", got.Host)
		}
	})
}

func TestInCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := client.InCluster(); err != client.ErrNotInCluster {
		t.Errorf("InCluster() outside a cluster error = %v, want ErrNotInCluster", err)
	}
	dir := t.TempDir()
	writeFile(t, dir, "token", "tok\n")
	writeFile(t, dir, "namespace", "kube-system")
	restore := client.SetServiceAccountDir(dir)
	defer restore()
	t.Setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	got, err := client.InCluster()
	if err != nil {
		t.Fatalf("InCluster() error = %v", err)
	}
	want := &client.Config{Host: "https://[fd00::1]:443", CAFile: filepath.Join(dir, "ca.crt"),
		BearerTokenFile: filepath.Join(dir, "token"), Namespace: "kube-system"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("InCluster() mismatch (-want +got):\n%s", diff)
	}
}
