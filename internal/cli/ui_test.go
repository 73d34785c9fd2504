package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/internal/ui"
	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/testenv"
)

// TestUIMatchesBlameAndHistory: the object page's blame and history are
// what objwatch blame and objwatch history print, line for line.
func TestUIMatchesBlameAndHistory(t *testing.T) {
	env := testenv.Start(t, testenv.WithHistoryStore())
	e := &whyEnv{t: t, env: env, c: env.HTTPClient()}
	cms := "/api/v1/namespaces/default/configmaps"
	e.do("POST", cms+"?fieldManager=creator", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"app","labels":{"team":"a"}},"data":{"mode":"slow","size":"3"}}`)
	e.do("PATCH", cms+"/app?fieldManager=editor", "application/merge-patch+json", `{"data":{"mode":"fast"},"metadata":{"labels":{"tier":"web"}}}`)
	e.do("PATCH", cms+"/app?fieldManager=editor", "application/merge-patch+json", `{"data":{"size":null,"extra":"{\"a\":1}"}}`)
	now := time.Now().Add(time.Minute).Truncate(time.Second)

	get := serveUI(t, env, func(c *ui.Config) { c.Now = func() time.Time { return now } })
	resp := get("/api/object?" + url.Values{"resource": {"cm"}, "namespace": {"default"}, "name": {"app"}}.Encode())
	var page ui.ObjectPage
	err := json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("object page: %s, %v", resp.Status, err)
	}

	// Blame: the page's lines, laid out as the command lays them out.
	var buf strings.Builder
	b := &blameCmd{now: func() time.Time { return now }}
	b.kubeconfig, b.namespace = env.Kubeconfig, "default"
	if err := b.run(context.Background(), &buf, "cm", "app"); err != nil {
		t.Fatal(err)
	}
	width := 0
	for _, l := range page.Blame {
		width = max(width, len(l.Note))
	}
	var fromPage strings.Builder
	for _, l := range page.Blame {
		fmt.Fprintf(&fromPage, "%-*s   %s\n", width, l.Note, l.Text)
	}
	if fromPage.String() != buf.String() {
		t.Errorf("page blame:\n%s\nobjwatch blame:\n%s", fromPage.String(), buf.String())
	}
	if !strings.Contains(buf.String(), "via editor") {
		t.Errorf("blame names no user:\n%s", buf.String())
	}

	// History: the page's revisions, printed as the command prints them.
	out, err := runCommand(t, newHistoryCommand(), "cm", "app", "--kubeconfig", env.Kubeconfig, "-n", "default")
	if err != nil {
		t.Fatal(err)
	}
	var hist strings.Builder
	fmt.Fprintf(&hist, "# configmaps default/app: %s\n", plural(len(page.Revisions), "revision"))
	for _, n := range page.HistoryNotes {
		fmt.Fprintln(&hist, "# "+n)
	}
	for _, r := range page.Revisions {
		fmt.Fprintln(&hist, r.Header)
		for _, c := range r.Changes {
			switch c.Op {
			case change.OpAdd:
				fmt.Fprintf(&hist, "  + %s: %s\n", c.Path, formatValue(*c.New))
			case change.OpRemove:
				fmt.Fprintf(&hist, "  - %s: %s\n", c.Path, formatValue(*c.Old))
			default:
				fmt.Fprintf(&hist, "  ~ %s: %s → %s\n", c.Path, formatValue(*c.Old), formatValue(*c.New))
			}
		}
	}
	if hist.String() != out {
		t.Errorf("page history:\n%s\nobjwatch history:\n%s", hist.String(), out)
	}
	if len(page.Revisions) != 3 || page.HistoryMissing != "" {
		t.Errorf("revisions = %d, missing %q", len(page.Revisions), page.HistoryMissing)
	}
}

// serveUI serves objwatch ui's handler for env (as admin) and returns a
// GET of a path of it, logged in.
func serveUI(t *testing.T, env *testenv.Env, opts ...func(*ui.Config)) func(path string) *http.Response {
	t.Helper()
	rc, err := client.New(env.Config.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.CloseIdleConnections)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	token, _ := ui.NewToken()
	cfg := ui.Config{REST: rc, Addr: l.Addr().String(), Token: token}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := ui.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s.Handler()}
	go srv.Serve(l)
	t.Cleanup(func() { s.Close(); srv.Close() })
	jar, _ := cookiejar.New(nil)
	web := &http.Client{Jar: jar}
	if resp, err := web.Get(s.URL()); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	return func(path string) *http.Response {
		t.Helper()
		resp, err := web.Get("http://" + cfg.Addr + path)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
}

// TestUIAuditSearch: the page's audit search reads the log of objwatch
// serve --audit-log-path as objwatch audit query does; without a log it
// says how to give one.
func TestUIAuditSearch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.Audit = audit.Config{Path: path} }))
	e := &whyEnv{t: t, env: env, c: env.HTTPClient()}
	cms := "/api/v1/namespaces/default/configmaps"
	e.do("POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"app"},"data":{"mode":"slow"}}`)
	e.do("PATCH", cms+"/app", "application/merge-patch+json", `{"data":{"mode":"fast"}}`)

	get := serveUI(t, env, func(c *ui.Config) { c.Audit = auditSearch(path) })
	resp := get("/api/audit?name=app&verb=patch&since=1h")
	var recs []ui.AuditRecord
	err := json.NewDecoder(resp.Body).Decode(&recs)
	resp.Body.Close()
	if err != nil || len(recs) != 1 {
		t.Fatalf("audit search: %v, %+v", err, recs)
	}
	r := recs[0]
	if r.User != "admin" || r.Verb != "patch" || r.Resource != "configmaps" || r.Name != "app" || r.Code != 200 || r.RV == "" ||
		strings.Join(r.Lines, "|") != `    ~ data.mode: "fast"` {
		t.Fatalf("record = %+v", r)
	}

	noLog := serveUI(t, env)
	resp = noLog("/api/audit")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented || !strings.Contains(string(b), "--audit-log") {
		t.Fatalf("without a log: %s %s", resp.Status, b)
	}
}

// TestUICommand: objwatch ui prints a URL with a token that opens the
// page; it refuses to listen on every address.
func TestUICommand(t *testing.T) {
	env := testenv.Start(t)
	if _, err := runCommand(t, newUICommand(), "--kubeconfig", env.Kubeconfig, "--listen", "0.0.0.0:0"); err == nil || !strings.Contains(err.Error(), "not all addresses") {
		t.Fatalf("--listen 0.0.0.0:0: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	urls := make(chan string, 1)
	u := &uiCmd{ready: func(s string) { urls <- s }}
	u.kubeconfig, u.listen = env.Kubeconfig, "127.0.0.1:0"
	var out strings.Builder
	done := make(chan error, 1)
	go func() { done <- u.run(ctx, &out) }()
	var pageURL string
	select {
	case pageURL = <-urls:
	case err := <-done:
		t.Fatalf("ui ended: %v", err)
	}
	jar, _ := cookiejar.New(nil)
	resp, err := (&http.Client{Jar: jar}).Get(pageURL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "<title>objwatch</title>") {
		t.Fatalf("%s: %s %.200s", pageURL, resp.Status, b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ui: %v", err)
	}
	if !strings.Contains(out.String(), "objwatch ui: open "+pageURL) {
		t.Fatalf("output = %q", out.String())
	}
}
