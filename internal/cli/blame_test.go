package cli

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/internal/explain"
	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/testenv"
)

// blameLines runs objwatch blame and returns its lines by their YAML
// text (trimmed), with the annotations of the lines of that text in order.
func blameLines(t *testing.T, env *testenv.Env, resource, name string) (map[string][]string, string) {
	t.Helper()
	out, err := runCommand(t, newBlameCommand(), resource, name, "--kubeconfig", env.Kubeconfig, "-n", "default")
	if err != nil {
		t.Fatalf("blame: %v\n%s", err, out)
	}
	lines := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		note, text, ok := strings.Cut(l, "   ")
		if !ok {
			t.Fatalf("blame line %q has no annotation column", l)
		}
		lines[strings.TrimSpace(text)] = append(lines[strings.TrimSpace(text)], strings.TrimSpace(note))
	}
	return lines, out
}

const blameService = `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","labels":{"app":"web"}},
	"spec":{"selector":{"app":"web"},"ports":[{"name":"http","port":80},{"name":"metrics","port":9090}]}}`

// TestBlame: each line of a Service made by one manager and patched by
// another names the manager owning it; list items (keyed by port and
// protocol) map to their lines; managedFields are not printed.
func TestBlame(t *testing.T) {
	env := testenv.Start(t)
	e := &whyEnv{t: t, env: env, c: env.HTTPClient()}
	svcs := "/api/v1/namespaces/default/services"
	e.do("POST", svcs+"?fieldManager=creator", "application/json", blameService)
	time.Sleep(1100 * time.Millisecond) // distinct managedFields times
	e.do("PATCH", svcs+"/web?fieldManager=editor", "application/merge-patch+json",
		`{"metadata":{"labels":{"team":"ops"}},"spec":{"ports":[{"name":"http","port":80},{"name":"metrics","port":9091}]}}`)
	lines, out := blameLines(t, env, "services", "web")
	t.Logf("\n%s", out)
	// The selector is an atomic map: its owner owns its members.
	checkBlame(t, lines, map[string][]string{
		"app: web":         {"creator (Update ", "creator (Update "},
		"team: ops":        {"editor (Update "},
		"- name: http":     {"creator (Update"},
		"port: 80":         {"creator (Update"},
		"- name: metrics":  {"editor (Update"},
		"port: 9091":       {"editor (Update"},
		"targetPort: 9091": {"editor (Update"},
		"apiVersion: v1":   {""},
		"kind: Service":    {""},
		"metadata:":        {""},
		"name: web":        {""},
		"selector:":        {"creator (Update"},
	})
	if strings.Contains(out, "managedFields") || strings.Contains(out, "fieldsV1") {
		t.Errorf("blame prints managedFields:\n%s", out)
	}
}

// TestBlameUsers: with an audit-logged server, each line also names the
// user whose write last changed the field.
func TestBlameUsers(t *testing.T) {
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) {
		c.Audit = audit.Config{Path: filepath.Join(t.TempDir(), "audit.log")}
	}))
	admin := &whyEnv{t: t, env: env, c: env.HTTPClient()}
	cms := "/api/v1/namespaces/default/configmaps"
	admin.do("POST", cms+"?fieldManager=creator", "application/json",
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"app"},"data":{"mode":"slow","size":"1"}}`)
	alice := &whyEnv{t: t, env: env, c: userClient(t, env, "alice", "system:masters")}
	alice.do("PATCH", cms+"/app?fieldManager=kubectl-edit", "application/merge-patch+json", `{"data":{"mode":"fast"}}`)
	lines, out := blameLines(t, env, "configmaps", "app")
	t.Logf("\n%s", out)
	checkBlame(t, lines, map[string][]string{
		"mode: fast":  {"alice via kubectl-edit (Update"},
		"size: \"1\"": {"admin via creator (Update"},
		"data:":       {"admin via creator (Update"},
		"name: app":   {""},
	})
}

// userClient is an HTTP client of user name in groups (testenv.User).
func userClient(t *testing.T, env *testenv.Env, name string, groups ...string) *http.Client {
	t.Helper()
	c := env.User(t, name, groups...)
	pair, err := tls.X509KeyPair(c.CertData, c.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CAData)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// checkBlame checks the annotations of lines of the given texts start
// with the wanted ones (and that unannotated lines are).
func checkBlame(t *testing.T, lines map[string][]string, want map[string][]string) {
	t.Helper()
	for text, w := range want {
		got := lines[text]
		if len(got) != len(w) {
			t.Errorf("lines %q annotated %q, want %q", text, got, w)
			continue
		}
		for i := range w {
			if !strings.HasPrefix(got[i], w[i]) || (w[i] == "") != (got[i] == "") {
				t.Errorf("line %q annotated %q, want %q…", text, got[i], w[i])
			}
		}
	}
}

// TestBlameSetsAndIndexes: list items named by value (v:) and by index
// (i:) map to their lines; an unowned item is not annotated.
func TestBlameSetsAndIndexes(t *testing.T) {
	now := time.Date(2026, 1, 2, 15, 10, 0, 0, time.UTC)
	obj := map[string]any{
		"metadata": map[string]any{
			"finalizers": []any{"a.example/x", "b.example/y"},
			"managedFields": []any{
				map[string]any{"manager": "fin", "operation": "Apply", "time": "2026-01-02T15:07:00Z",
					"fieldsV1": map[string]any{"f:metadata": map[string]any{"f:finalizers": map[string]any{`v:"b.example/y"`: map[string]any{}}}}},
				map[string]any{"manager": "idx", "operation": "Update", "subresource": "status", "time": "2026-01-02T15:09:00Z",
					"fieldsV1": map[string]any{"f:status": map[string]any{"f:list": map[string]any{"i:1": map[string]any{"f:v": map[string]any{}}}}}},
			},
		},
		"status": map[string]any{"list": []any{map[string]any{"v": int64(1)}, map[string]any{"v": int64(2)}}},
	}
	lines, err := explain.Blame(obj, []explain.AuthoredChange{{Path: change.Path{{Field: "status"}}, User: "carol"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(lines))
	for i, l := range lines {
		got[i] = l.Note + "|" + l.Text
	}
	want := []string{
		"|metadata:",
		"|  finalizers:",
		"|  - a.example/x",
		"fin (Apply 3m ago)|  - b.example/y",
		"|status:",
		"|  list:",
		"|  - v: 1",
		"carol via idx (Update status 60s ago)|  - v: 2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("blame =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
