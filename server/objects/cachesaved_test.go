package objects_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

const widgets = "/apis/form.objwatch.io/v1/namespaces/default/widgets"

// logLines is a server's log, one text line a record. Safe for
// concurrent use.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// with returns the lines holding every one of parts.
func (l *logLines) with(parts ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for line := range strings.Lines(l.buf.String()) {
		match := true
		for _, p := range parts {
			match = match && strings.Contains(line, p)
		}
		if match {
			out = append(out, line)
		}
	}
	return out
}

// widgetsPrefix is where the widgets are stored, as the caches' log
// lines name it.
func widgetsPrefix(t *testing.T, env *testenv.Env) string {
	res, ok := env.Server.Registry().Get(schema.GroupVersionResource{Group: "form.objwatch.io", Version: "v1", Resource: "widgets"})
	if !ok {
		t.Fatal("widgets not served")
	}
	return res.StoragePrefix
}

// savedForm is an etcd with testdata/cachedform/crd.json's CRD and 20
// of its objects, a directory for saved states, and a server on that
// etcd without a watch cache, whose answers are etcd's.
type savedForm struct {
	ep, dir string
	ref     *servertest.API
}

func newSavedForm(t *testing.T) *savedForm {
	s := &savedForm{ep: testenv.StartEtcd(t), dir: filepath.Join(t.TempDir(), "watchcache")}
	_, s.ref = startFormServer(t, testenv.WithEtcd(s.ep), testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = true }))
	for i := range 20 {
		body := fmt.Sprintf(`{"apiVersion":"form.objwatch.io/v1","kind":"Widget","metadata":{"name":"w-%02d","labels":{"i":"%d"}},"spec":{"color":"c%d"}}`, i, i, i%3)
		servertest.MustCode(t, "create", s.ref.JSON("POST", widgets, body), http.StatusCreated)
	}
	return s
}

// start starts a server keeping its saved states in s.dir, its log in
// log (if not nil).
func (s *savedForm) start(t *testing.T, log io.Writer) *testenv.Env {
	t.Helper()
	opts := []testenv.Option{testenv.WithEtcd(s.ep), testenv.WithServerConfig(func(c *server.Config) { c.WatchCacheSnapshots = s.dir })}
	if log != nil {
		opts = append(opts, testenv.WithLogger(slog.New(slog.NewTextHandler(log, nil))))
	}
	return testenv.Start(t, opts...)
}

// sameAsEtcd fails unless env's list of widgets is etcd's.
func (s *savedForm) sameAsEtcd(t *testing.T, env *testenv.Env) {
	t.Helper()
	a := servertest.NewAPI(t, env)
	defer a.C.CloseIdleConnections()
	items := func(a *servertest.API) []json.RawMessage {
		r := a.JSON("GET", widgets, "")
		servertest.MustCode(t, "list", r, http.StatusOK)
		var l struct{ Items []json.RawMessage }
		if err := json.Unmarshal(r.Body, &l); err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	got, want := items(a), items(s.ref)
	if len(got) != 20 || len(got) != len(want) {
		t.Fatalf("%d widgets listed, etcd holds %d (want 20)", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("widget %d = %s\netcd holds %s", i, got[i], want[i])
		}
	}
}

// TestSavedStateOfAnotherBinaryUsed: a state saved by another binary
// built from the same code — here a copy of this test binary, with bytes
// added (another size) and an older modification time — is loaded by a
// server of this one, which catches up from it instead of listing etcd.
func TestSavedStateOfAnotherBinaryUsed(t *testing.T) {
	s := newSavedForm(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other-objects.test")
	if err := os.WriteFile(other, append(b, make([]byte, 4096)...), 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-30 * 24 * time.Hour)
	if err := os.Chtimes(other, old, old); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(other, "-test.run=^TestSavedStateHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "OBJWATCH_SAVED_FORM_HELPER="+s.ep+"|"+s.dir)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestSavedStateHelperProcess")) {
		t.Fatalf("the other binary: %v\n%s", err, out)
	}

	var log logLines
	env := s.start(t, &log)
	prefix := "prefix=" + widgetsPrefix(t, env)
	if loaded := log.with("loaded saved state", prefix+" "); len(loaded) != 2 { // the caches of v1 and v2
		t.Fatalf("the widgets' caches did not start from the other binary's saved state; its log:\n%s", strings.Join(log.with(prefix+" "), ""))
	}
	s.sameAsEtcd(t, env)
}

// TestSavedStateHelperProcess is the other binary of
// TestSavedStateOfAnotherBinaryUsed: a server that starts on its etcd,
// loads the widgets and saves its caches' states when it stops.
func TestSavedStateHelperProcess(t *testing.T) {
	arg := os.Getenv("OBJWATCH_SAVED_FORM_HELPER")
	if arg == "" {
		t.Skip("run by TestSavedStateOfAnotherBinaryUsed")
	}
	ep, dir, _ := strings.Cut(arg, "|")
	s := &savedForm{ep: ep, dir: dir}
	env := s.start(t, nil)
	if c := servertest.NewAPI(t, env).JSON("GET", widgets, ""); c.Code != http.StatusOK {
		t.Fatalf("list widgets = %d %s", c.Code, c.Body)
	}
	env.Stop()
	if _, err := os.Stat(filepath.Join(dir, "widgets.v1.form.objwatch.io.cache")); err != nil {
		t.Fatalf("no saved state: %v", err)
	}
}

// TestSavedStateOfAnotherDecodingNotUsed: a state saved by a binary whose
// decoding differs (another objects.CachedForm) is not used: the cache
// lists etcd, saying why, and answers as etcd does.
func TestSavedStateOfAnotherDecodingNotUsed(t *testing.T) {
	s := newSavedForm(t)
	restore := objects.SetCachedForm(objects.CachedForm + 1)
	s.start(t, nil).Stop()
	restore()
	if _, err := os.Stat(filepath.Join(s.dir, "widgets.v1.form.objwatch.io.cache")); err != nil {
		t.Fatalf("no saved state: %v", err)
	}

	var log logLines
	env := s.start(t, &log)
	prefix := "prefix=" + widgetsPrefix(t, env)
	if loaded := log.with("loaded saved state", prefix+" "); len(loaded) != 0 {
		t.Fatalf("the widgets' caches started from a state saved with another decoding: %s", loaded)
	}
	want := fmt.Sprintf("fingerprint \\\"form %d ", objects.CachedForm+1)
	if listed := log.with("saved state not used; listing", prefix+" ", want); len(listed) != 2 { // the caches of v1 and v2
		t.Fatalf("the widgets' caches did not say it listed etcd because of the form (%s); its log:\n%s", want, strings.Join(log.with(prefix+" "), ""))
	}
	s.sameAsEtcd(t, env)
}
