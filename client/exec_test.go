package client_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/testenv"
)

const execV1 = "client.authentication.k8s.io/v1"

// plugin is a credential plugin script in its own directory. Its n-th run
// prints outputs[n-1] (the last output from then on) after running pre;
// it records each run in runs, and its KUBERNETES_EXEC_INFO, arguments and
// PLUGIN_TEST_VAR in files.
type plugin struct {
	dir, path string
}

func newPlugin(t *testing.T, pre string, outputs ...string) *plugin {
	t.Helper()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skipf("exec plugin tests run /bin/sh scripts: %v", err)
	}
	dir := t.TempDir()
	for i, out := range outputs {
		writeFile(t, dir, "out"+strconv.Itoa(i+1), out)
	}
	script := fmt.Sprintf(`#!/bin/sh
d='%s'
echo run >> "$d/runs"
printf '%%s' "$KUBERNETES_EXEC_INFO" > "$d/info"
printf '%%s' "$*" > "$d/args"
printf '%%s' "$PLUGIN_TEST_VAR" > "$d/env"
n=$(wc -l < "$d/runs" | tr -d ' ')
[ -f "$d/out$n" ] || n=%d
%s
cat "$d/out$n"
`, dir, len(outputs), pre)
	p := filepath.Join(dir, "plugin")
	if err := os.WriteFile(p, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return &plugin{dir: dir, path: p}
}

func (p *plugin) runs(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.dir, "runs"))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func (p *plugin) file(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// credential is a plugin's ExecCredential output.
func credential(t *testing.T, apiVersion string, status map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"apiVersion": apiVersion, "kind": "ExecCredential", "status": status})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func tokenCredential(t *testing.T, token string, expiry time.Time) string {
	st := map[string]any{"token": token}
	if !expiry.IsZero() {
		st["expirationTimestamp"] = expiry.UTC().Format(time.RFC3339Nano)
	}
	return credential(t, execV1, st)
}

func newExecREST(t *testing.T, cfg *client.Config) *client.REST {
	t.Helper()
	rc, err := client.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(rc.CloseIdleConnections)
	return rc
}

func TestExecPlugin(t *testing.T) {
	newPlugin(t, "") // skips without /bin/sh before starting a server
	env := testenv.Start(t)
	ctx := ctxFor(t)
	token := env.Config.BearerToken
	execCfg := func(p *plugin) *client.Config {
		return &client.Config{Host: env.Config.Host, CAData: env.Config.CAData,
			Exec: &client.ExecConfig{Command: p.path, APIVersion: execV1, InteractiveMode: "Never"}}
	}

	t.Run("kubeconfig", func(t *testing.T) {
		p := newPlugin(t, "", tokenCredential(t, token, time.Time{}))
		b64 := base64.StdEncoding.EncodeToString
		kc := writeFile(t, t.TempDir(), "kubeconfig", `
apiVersion: v1
kind: Config
current-context: c
clusters:
- name: s
  cluster:
    server: `+env.Config.Host+`
    certificate-authority-data: `+b64(env.Config.CAData)+`
    extensions:
    - name: client.authentication.k8s.io/exec
      extension: {audience: objwatch}
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: `+p.path+`
      args: [get-token, --cluster, s]
      env: [{name: PLUGIN_TEST_VAR, value: hello}]
      provideClusterInfo: true
      interactiveMode: IfAvailable
      installHint: install it
contexts:
- name: c
  context: {cluster: s, user: u}
`)
		cfg, err := client.FromKubeconfig(kc, "")
		if err != nil {
			t.Fatalf("FromKubeconfig: %v", err)
		}
		want := &client.ExecConfig{Command: p.path, Args: []string{"get-token", "--cluster", "s"},
			Env: []client.ExecEnvVar{{Name: "PLUGIN_TEST_VAR", Value: "hello"}}, APIVersion: execV1,
			InstallHint: "install it", ProvideClusterInfo: true, InteractiveMode: "IfAvailable",
			ClusterConfig: json.RawMessage(`{"audience":"objwatch"}`)}
		if diff := cmp.Diff(want, cfg.Exec); diff != "" {
			t.Errorf("FromKubeconfig().Exec mismatch (-want +got):\n%s", diff)
		}
		rc := newExecREST(t, cfg)
		nss, err := client.NewClient[*corev1.Namespace](rc, client.Resource{
			GVR: corev1.SchemeGroupVersion.WithResource("namespaces"), Kind: "Namespace",
		}).List(ctx, "", metav1.ListOptions{})
		if err != nil || len(nss.Items) == 0 {
			t.Fatalf("List(namespaces) = %v, %v; want namespaces", nss, err)
		}
		if got := p.file(t, "args"); got != "get-token --cluster s" {
			t.Errorf("plugin args = %q, want %q", got, "get-token --cluster s")
		}
		if got := p.file(t, "env"); got != "hello" {
			t.Errorf("plugin PLUGIN_TEST_VAR = %q, want hello", got)
		}
		var info struct {
			APIVersion, Kind string
			Spec             struct {
				Interactive bool
				Cluster     struct {
					Server                   string
					CertificateAuthorityData []byte `json:"certificate-authority-data"`
					Config                   map[string]string
				}
			}
		}
		if err := json.Unmarshal([]byte(p.file(t, "info")), &info); err != nil {
			t.Fatalf("KUBERNETES_EXEC_INFO: %v", err)
		}
		if info.APIVersion != execV1 || info.Kind != "ExecCredential" || info.Spec.Interactive ||
			info.Spec.Cluster.Server != env.Config.Host || string(info.Spec.Cluster.CertificateAuthorityData) != string(env.Config.CAData) ||
			info.Spec.Cluster.Config["audience"] != "objwatch" {
			t.Errorf("KUBERNETES_EXEC_INFO = %s, want a v1 ExecCredential with the cluster", p.file(t, "info"))
		}
	})

	t.Run("static credentials win", func(t *testing.T) {
		cfg := execCfg(&plugin{path: filepath.Join(t.TempDir(), "absent")})
		cfg.BearerToken = token
		if _, err := newExecREST(t, cfg).Raw(ctx, "/api/v1/namespaces"); err != nil {
			t.Errorf("Raw() with a token and an exec plugin error = %v, want the token used", err)
		}
	})

	t.Run("expiry", func(t *testing.T) {
		expiry := time.Now().Add(2 * time.Second)
		p := newPlugin(t, "", tokenCredential(t, token, expiry), tokenCredential(t, token, time.Time{}))
		rc := newExecREST(t, execCfg(p))
		for range 2 {
			if _, err := rc.Raw(ctx, "/api/v1/namespaces"); err != nil {
				t.Fatalf("Raw() error = %v", err)
			}
		}
		if time.Now().Before(expiry) {
			if got := p.runs(t); got != 1 {
				t.Errorf("plugin runs before expiry = %d, want 1", got)
			}
		}
		time.Sleep(time.Until(expiry) + 10*time.Millisecond)
		if _, err := rc.Raw(ctx, "/api/v1/namespaces"); err != nil {
			t.Fatalf("Raw() after expiry error = %v", err)
		}
		if got := p.runs(t); got != 2 {
			t.Errorf("plugin runs after expiry = %d, want 2", got)
		}
	})

	t.Run("401 refreshes", func(t *testing.T) {
		p := newPlugin(t, "", tokenCredential(t, "wrong", time.Time{}), tokenCredential(t, token, time.Time{}))
		rc := newExecREST(t, execCfg(p))
		if _, err := rc.Raw(ctx, "/api/v1/namespaces"); err != nil {
			t.Fatalf("Raw() with a refused first token error = %v, want success after a refresh", err)
		}
		if _, err := rc.Raw(ctx, "/api/v1/namespaces"); err != nil {
			t.Fatalf("Raw() error = %v", err)
		}
		if got := p.runs(t); got != 2 {
			t.Errorf("plugin runs = %d, want 2", got)
		}

		p = newPlugin(t, "", tokenCredential(t, "wrong", time.Time{}), tokenCredential(t, token, time.Time{}))
		cms := client.NewClient[*corev1.ConfigMap](newExecREST(t, execCfg(p)), configMaps)
		if _, err := cms.Create(ctx, newCM("default", "exec", nil), metav1.CreateOptions{}); err != nil {
			t.Errorf("Create() with a refused first token error = %v, want success after a refresh", err)
		}
		if got := p.runs(t); got != 2 {
			t.Errorf("plugin runs for Create = %d, want 2", got)
		}

		p = newPlugin(t, "", tokenCredential(t, "wrong", time.Time{}))
		_, err := newExecREST(t, execCfg(p)).Raw(ctx, "/api/v1/namespaces")
		if !errors.Is(err, client.ErrUnauthorized) {
			t.Errorf("Raw() with a refused token error = %v, want ErrUnauthorized", err)
		}
		if got := p.runs(t); got != 2 {
			t.Errorf("plugin runs for a refused token = %d, want 2", got)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		p := newPlugin(t, "sleep 0.3", tokenCredential(t, token, time.Time{}))
		rc := newExecREST(t, execCfg(p))
		var wg sync.WaitGroup
		errs := make([]error, 20)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = rc.Raw(ctx, "/api/v1/namespaces")
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("concurrent Raw() error = %v", err)
		}
		if got := p.runs(t); got != 1 {
			t.Errorf("plugin runs for 20 concurrent requests = %d, want 1", got)
		}
	})

	t.Run("client certificate", func(t *testing.T) {
		p := newPlugin(t, "", credential(t, execV1, map[string]any{
			"clientCertificateData": string(env.Config.CertData), "clientKeyData": string(env.Config.KeyData),
		}))
		if _, err := newExecREST(t, execCfg(p)).Raw(ctx, "/api/v1/namespaces"); err != nil {
			t.Errorf("Raw() with a plugin's client certificate error = %v", err)
		}
	})
}

// TestExecCertificateRotation checks that a new client certificate from
// the plugin replaces the old one on kept-alive connections.
func TestExecCertificateRotation(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ctx := ctxFor(t)

	certA, keyA := selfSigned(t, "a")
	certB, keyB := selfSigned(t, "b")
	expiry := time.Now().Add(time.Second)
	p := newPlugin(t, "",
		credential(t, execV1, map[string]any{"clientCertificateData": certA, "clientKeyData": keyA,
			"expirationTimestamp": expiry.UTC().Format(time.RFC3339Nano)}),
		credential(t, execV1, map[string]any{"clientCertificateData": certB, "clientKeyData": keyB}))
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	rc := newExecREST(t, &client.Config{Host: srv.URL, CAData: ca,
		Exec: &client.ExecConfig{Command: p.path, APIVersion: execV1}})

	get := func(want string) {
		t.Helper()
		got, err := rc.Raw(ctx, "/")
		if err != nil || string(got) != want {
			t.Fatalf("Raw() = %q, %v; want client certificate %q", got, err, want)
		}
	}
	get("a")
	time.Sleep(time.Until(expiry) + 10*time.Millisecond)
	get("b")
	get("b")
	if got := p.runs(t); got != 2 {
		t.Errorf("plugin runs = %d, want 2", got)
	}
}

func selfSigned(t *testing.T, cn string) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
}

func TestExecPluginErrors(t *testing.T) {
	certA, _ := selfSigned(t, "a")
	tests := []struct {
		name    string
		pre     string // shell run before printing output
		output  string
		command string // instead of the plugin
		mode    string
		want    []string // in the error message
		wantIs  error
	}{
		{name: "not found", command: "objwatch-no-such-plugin", want: []string{"objwatch-no-such-plugin", "brew install it"}, wantIs: exec.ErrNotFound},
		{name: "path not found", command: "/nonexistent/plugin", want: []string{"brew install it"}, wantIs: os.ErrNotExist},
		{name: "exit", pre: "echo noise >&2; echo 'token expired: run login' >&2; exit 3", want: []string{"exit status 3", "token expired: run login"}},
		{name: "bad JSON", output: "not json", want: []string{"decode ExecCredential"}},
		{name: "wrong apiVersion", output: credential(t, "client.authentication.k8s.io/v1beta1", map[string]any{"token": "x"}), want: []string{"apiVersion", "v1beta1"}},
		{name: "wrong kind", output: `{"apiVersion":"` + execV1 + `","kind":"Pod","status":{"token":"x"}}`, want: []string{`kind "Pod"`}},
		{name: "no status", output: `{"apiVersion":"` + execV1 + `","kind":"ExecCredential"}`, want: []string{"no status"}},
		{name: "empty status", output: credential(t, execV1, map[string]any{}), want: []string{"no token or client certificate"}},
		{name: "certificate without key", output: credential(t, execV1, map[string]any{"clientCertificateData": certA}), want: []string{"together"}},
		{name: "bad certificate", output: credential(t, execV1, map[string]any{"clientCertificateData": "x", "clientKeyData": "y"}), want: []string{"client certificate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlugin(t, tt.pre, tt.output)
			cmd := p.path
			if tt.command != "" {
				cmd = tt.command
			}
			rc := newExecREST(t, &client.Config{Host: "https://127.0.0.1:1",
				Exec: &client.ExecConfig{Command: cmd, APIVersion: execV1, InstallHint: "brew install it"}})
			_, err := rc.Raw(ctxFor(t), "/version")
			if err == nil {
				t.Fatalf("Raw() error = nil, want an exec plugin error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Raw() error = %q, want it to contain %q", err, w)
				}
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("Raw() error = %v, want errors.Is %v", err, tt.wantIs)
			}
		})
	}

	configs := []client.ExecConfig{
		{Command: "x", APIVersion: execV1, InteractiveMode: "Always"},
		{Command: "x", APIVersion: "client.authentication.k8s.io/v1alpha1"},
		{APIVersion: execV1},
		{Command: "x", APIVersion: execV1, InteractiveMode: "Sometimes"},
	}
	for _, e := range configs {
		if _, err := client.New(&client.Config{Host: "https://127.0.0.1:1", Exec: &e}); err == nil {
			t.Errorf("New(%+v) error = nil, want an error", e)
		}
	}
}

func TestFromKubeconfigExecValidation(t *testing.T) {
	dir := t.TempDir()
	kc := func(exec string) string {
		return writeFile(t, dir, "kc", `
current-context: c
clusters: [{name: s, cluster: {server: "https://x:1"}}]
users: [{name: u, user: {exec: `+exec+`}}]
contexts: [{name: c, context: {cluster: s, user: u}}]
`)
	}
	tests := []struct {
		exec    string
		want    *client.ExecConfig
		wantErr bool
	}{
		{exec: `{command: p, apiVersion: client.authentication.k8s.io/v1beta1}`,
			want: &client.ExecConfig{Command: "p", APIVersion: "client.authentication.k8s.io/v1beta1", InteractiveMode: "IfAvailable"}},
		{exec: `{command: bin/p, apiVersion: ` + execV1 + `, interactiveMode: Always}`,
			want: &client.ExecConfig{Command: filepath.Join(dir, "bin/p"), APIVersion: execV1, InteractiveMode: "Always"}},
		{exec: `{command: p, apiVersion: ` + execV1 + `}`, wantErr: true},
		{exec: `{command: p}`, wantErr: true},
		{exec: `{apiVersion: ` + execV1 + `, interactiveMode: Never}`, wantErr: true},
	}
	for _, tt := range tests {
		cfg, err := client.FromKubeconfig(kc(tt.exec), "")
		if (err != nil) != tt.wantErr {
			t.Errorf("FromKubeconfig(exec %s) error = %v, want error %v", tt.exec, err, tt.wantErr)
			continue
		}
		if err == nil {
			if diff := cmp.Diff(tt.want, cfg.Exec); diff != "" {
				t.Errorf("FromKubeconfig(exec %s).Exec mismatch (-want +got):\n%s", tt.exec, diff)
			}
		}
	}
}
