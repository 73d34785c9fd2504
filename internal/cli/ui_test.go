package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/internal/ui"
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

	rc, err := client.New(env.Config.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.CloseIdleConnections()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	token, _ := ui.NewToken()
	s, err := ui.New(ui.Config{REST: rc, Addr: l.Addr().String(), Token: token, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s.Handler()}
	go srv.Serve(l)
	defer func() { s.Close(); srv.Close() }()
	jar, _ := cookiejar.New(nil)
	web := &http.Client{Jar: jar}
	if resp, err := web.Get(s.URL()); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	resp, err := web.Get("http://" + l.Addr().String() + "/api/object?" + url.Values{"resource": {"cm"}, "namespace": {"default"}, "name": {"app"}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	var page ui.ObjectPage
	err = json.NewDecoder(resp.Body).Decode(&page)
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
