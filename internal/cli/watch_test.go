package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// syncBuffer is written by the command's goroutine and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until buf contains want.
func waitFor(t *testing.T, buf *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(buf.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %q; output so far:\n%s", want, buf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testWatchCmd returns a watchCmd with a clock that starts at 12:04:05
// and advances a second per event, and short backoffs.
func testWatchCmd() *watchCmd {
	var n atomic.Int64
	start := time.Date(2026, 1, 2, 12, 4, 5, 0, time.UTC)
	return &watchCmd{
		now:        func() time.Time { return start.Add(time.Duration(n.Add(1)-1) * time.Second) },
		minBackoff: 10 * time.Millisecond,
		maxBackoff: 100 * time.Millisecond,
	}
}

// startWatch runs `objwatch watch args...` in-process until the returned
// stop is called; stop returns the command's error.
func startWatch(t *testing.T, w *watchCmd, args ...string) (stdout, stderr *syncBuffer, stop func() error) {
	t.Helper()
	root := &cobra.Command{Use: "objwatch", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(w.command())
	root.SetArgs(append([]string{"watch"}, args...))
	stdout, stderr = &syncBuffer{}, &syncBuffer{}
	root.SetOut(stdout)
	root.SetErr(stderr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stdout, stderr, stop
}

// configMaps returns a client for config maps in a new namespace ns.
func configMaps(t *testing.T, env *testenv.Env, ns string) *client.Client[*unstructured.Unstructured] {
	t.Helper()
	cfg, err := client.FromKubeconfig(env.Kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.CloseIdleConnections)
	nss := client.Unstructured(rc, client.Resource{GVR: corev1GV.WithResource("namespaces"), Kind: "Namespace"})
	nso := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
	if _, err := nss.Create(context.Background(), nso, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return client.Unstructured(rc, client.Resource{
		GVR: corev1GV.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap",
	})
}

// edits changes config maps through the API, failing the test on errors.
type edits struct {
	t   *testing.T
	c   *client.Client[*unstructured.Unstructured]
	ns  string
	ctx context.Context
}

func (e edits) create(name string, data map[string]any) {
	e.t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": e.ns},
		"data":     data,
	}}
	if _, err := e.c.Create(e.ctx, obj, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create %s: %v", name, err)
	}
}

func (e edits) patch(name, mergePatch string) {
	e.t.Helper()
	if _, err := e.c.Patch(e.ctx, e.ns, name, types.MergePatchType, []byte(mergePatch), metav1.PatchOptions{}, ""); err != nil {
		e.t.Fatalf("patch %s: %v", name, err)
	}
}

func (e edits) delete(name string) {
	e.t.Helper()
	if err := e.c.Delete(e.ctx, e.ns, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("delete %s: %v", name, err)
	}
}

var volatile = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`rv=\d+`), "rv=N"},
	{regexp.MustCompile(`"resourceVersion":"\d+"`), `"resourceVersion":"N"`},
	{regexp.MustCompile(`resourceVersion \d+ expired`), "resourceVersion N expired"},
}

// checkGolden compares got, normalized, with testdata/name.golden.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	for _, v := range volatile {
		got = v.re.ReplaceAllString(got, v.repl)
	}
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("watch output differs from %s (run with -update to accept):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

func TestWatch(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()

	// script makes the same changes in each case: a create, an update of
	// three fields, an update of one label, a delete.
	script := func(e edits) {
		e.create("w1", map[string]any{"size": "3", "color": "red"})
		e.patch("w1", `{"metadata":{"labels":{"app":"web"}},"data":{"size":"4","color":null}}`)
		e.patch("w1", `{"metadata":{"labels":{"app":"api"}}}`)
		e.delete("w1")
	}
	tests := []struct {
		name  string
		args  []string
		ready func(stdout, stderr *syncBuffer) *syncBuffer // where the start note appears
	}{
		{name: "diff", args: []string{"--diff", "--no-color"}},
		{name: "plain", args: []string{"--no-color"}},
		{name: "json", args: []string{"-o", "json"}},
		{name: "fields", args: []string{"--diff", "--no-color", "--fields", "metadata.labels.*"}},
		{name: "fields-none", args: []string{"--diff", "--no-color", "--fields", "data.missing"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := "watch-" + tt.name
			cms := configMaps(t, env, ns)
			args := append([]string{"configmaps", "-n", ns, "--kubeconfig", env.Kubeconfig}, tt.args...)
			stdout, stderr, stop := startWatch(t, testWatchCmd(), args...)
			notes := stdout
			if slices.Contains(tt.args, "json") {
				notes = stderr
			}
			waitFor(t, notes, "# watching")
			script(edits{t: t, c: cms, ns: ns, ctx: ctx})
			waitFor(t, stdout, "DELETED")
			if err := stop(); err != nil {
				t.Fatalf("watch: %v", err)
			}
			if tt.name == "json" {
				checkGolden(t, "watch-json-notes", stderr.String())
			}
			checkGolden(t, "watch-"+tt.name, stdout.String())
		})
	}
}

// TestWatchRelist cuts the watch, holds the reconnection back until the
// server has forgotten its resourceVersion, and checks that the watch
// explains the 410 in one line and prints what changed meanwhile.
func TestWatchRelist(t *testing.T) {
	env := testenv.Start(t, testenv.WithHistory(100*time.Millisecond))
	ctx := context.Background()
	ns := "watch-relist"
	cms := configMaps(t, env, ns)
	e := edits{t: t, c: cms, ns: ns, ctx: ctx}
	e.create("w0", map[string]any{"a": "1"})

	w := testWatchCmd()
	cut := &cutter{}
	w.wrap = func(rt http.RoundTripper) http.RoundTripper { cut.rt = rt; return cut }
	stdout, _, stop := startWatch(t, w, "cm", "-n", ns, "--kubeconfig", env.Kubeconfig, "--diff", "--no-color")
	waitFor(t, stdout, "# watching")
	e.create("w1", map[string]any{"size": "3"})
	waitFor(t, stdout, "ADDED "+ns+"/w1")

	cut.cut()
	e.patch("w1", `{"data":{"size":"4"}}`)
	e.create("w2", map[string]any{"b": "2"})
	e.delete("w0")
	time.Sleep(time.Second) // several compactions
	// Writes after the compaction make the old resourceVersion stale for
	// the watch cache too.
	e.create("w3", map[string]any{"c": "3"})
	time.Sleep(300 * time.Millisecond)
	cut.release()

	waitFor(t, stdout, "DELETED "+ns+"/w0")
	if err := stop(); err != nil {
		t.Fatalf("watch: %v", err)
	}
	checkGolden(t, "watch-relist", stdout.String())
}

// cutter is a transport that can end the current watches (their bodies
// then read io.EOF, as when the server ends a watch) and hold new watch
// requests back until released.
type cutter struct {
	rt     http.RoundTripper
	mu     sync.Mutex
	gate   chan struct{} // non-nil while cut
	bodies []*cutBody
}

func (c *cutter) RoundTrip(req *http.Request) (*http.Response, error) {
	watch := req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1"
	if watch {
		c.mu.Lock()
		gate := c.gate
		c.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
		}
	}
	resp, err := c.rt.RoundTrip(req)
	if err != nil || !watch {
		return resp, err
	}
	b := &cutBody{rc: resp.Body}
	resp.Body = b
	c.mu.Lock()
	c.bodies = append(c.bodies, b)
	c.mu.Unlock()
	return resp, nil
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gate = make(chan struct{})
	for _, b := range c.bodies {
		b.cut.Store(true)
		b.rc.Close()
	}
	c.bodies = nil
}

func (c *cutter) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.gate)
	c.gate = nil
}

type cutBody struct {
	rc  io.ReadCloser
	cut atomic.Bool
}

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if b.cut.Load() {
		return 0, io.EOF
	}
	return n, err
}

func (b *cutBody) Close() error { return b.rc.Close() }

func TestWatchUnknownResource(t *testing.T) {
	env := testenv.Start(t)
	root := &cobra.Command{Use: "objwatch", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(testWatchCmd().command())
	root.SetArgs([]string{"watch", "nosuchthings", "--kubeconfig", env.Kubeconfig})
	root.SetOut(io.Discard)
	if err := root.ExecuteContext(context.Background()); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("watch nosuchthings = %v, want ErrNotFound", err)
	}
}

// TestMissingNamespaceHints: a watch of a namespace that does not exist
// says so in its start note (and one of an existing, empty namespace does
// not); blame of a missing object names the namespace it looked in, and
// how it was chosen.
func TestMissingNamespaceHints(t *testing.T) {
	env := testenv.Start(t)
	configMaps(t, env, "empty")
	for ns, want := range map[string]string{
		"nosuchns": `# watching configmaps in nosuchns: 0 objects (namespace "nosuchns" does not exist; waiting for objects in it)` + "\n",
		"empty":    "# watching configmaps in empty: 0 objects\n",
	} {
		stdout, _, stop := startWatch(t, testWatchCmd(), "configmaps", "-n", ns, "--kubeconfig", env.Kubeconfig)
		waitFor(t, stdout, "# watching")
		if err := stop(); err != nil {
			t.Fatalf("watch -n %s: %v", ns, err)
		}
		if got := stdout.String(); got != want {
			t.Errorf("watch -n %s printed %q, want %q", ns, got, want)
		}
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, `configmaps x (in namespace "default", the context's or the default; choose one with -n): configmaps "x" not found`},
		{[]string{"-n", "empty"}, `configmaps x (in namespace "empty"): configmaps "x" not found`},
	} {
		_, err := runCommand(t, newBlameCommand(), append([]string{"cm", "x", "--kubeconfig", env.Kubeconfig}, tt.args...)...)
		if err == nil || err.Error() != tt.want || !errors.Is(err, client.ErrNotFound) {
			t.Errorf("blame cm x %v = %v, want %q (ErrNotFound)", tt.args, err, tt.want)
		}
	}
}

func TestRelistNote(t *testing.T) {
	tests := []struct {
		rv               string
		objects, changes int
		want             string
	}{
		{"1234", 12, 1, "resourceVersion 1234 expired (410 Gone); relisted 12 objects, 1 change"},
		{"7", 1, 0, "resourceVersion 7 expired (410 Gone); relisted 1 object, 0 changes"},
	}
	for _, tt := range tests {
		if got := relistNote(tt.rv, tt.objects, tt.changes); got != tt.want {
			t.Errorf("relistNote(%q, %d, %d) = %q, want %q", tt.rv, tt.objects, tt.changes, got, tt.want)
		}
	}
}

func TestFormatValue(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{"web", "web"},
		{"", `""`},
		{"two words", "two words"},
		{" padded", `" padded"`},
		{"a\nb", `"a\nb"`},
		{int64(3), "3"},
		{nil, "null"},
		{map[string]any{"app": "web"}, `{"app":"web"}`},
		{strings.Repeat("x", 200), strings.Repeat("x", maxValue-1) + "…"},
	}
	for _, tt := range tests {
		if got := formatValue(tt.in); got != tt.want {
			t.Errorf("formatValue(%#v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

var corev1GV = schema.GroupVersion{Version: "v1"}

func TestChangeLineColor(t *testing.T) {
	r := &watchRun{color: true}
	tests := []struct {
		c    change.Change
		want string
	}{
		{change.Change{Path: change.Path{{Field: "spec"}, {Field: "size"}}, Op: change.OpReplace, Old: int64(3), New: int64(4)}, "\x1b[33m  ~ spec.size: 3 → 4\x1b[0m"},
		{change.Change{Path: change.Path{{Field: "spec"}, {Field: "color"}}, Op: change.OpRemove, Old: "red"}, "\x1b[31m  - spec.color: red\x1b[0m"},
		{change.Change{Path: change.Path{{Field: "spec"}, {Field: "app"}}, Op: change.OpAdd, New: "web"}, "\x1b[32m  + spec.app: web\x1b[0m"},
	}
	for _, tt := range tests {
		if got := r.changeLine(tt.c); got != tt.want {
			t.Errorf("changeLine(%v) = %q, want %q", tt.c, got, tt.want)
		}
	}
}

// TestWatchManagedFieldsOnly: an update that changes nothing but
// managedFields (a second manager applying the value the first set, so
// sharing it) is not shown, unless --show-managed-fields, which also
// lists the managedFields changes.
func TestWatchManagedFieldsOnly(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	for _, show := range []bool{false, true} {
		t.Run(fmt.Sprint("show=", show), func(t *testing.T) {
			ns := fmt.Sprint("watch-mf-", show)
			cms := configMaps(t, env, ns)
			args := []string{"configmaps", "-n", ns, "--kubeconfig", env.Kubeconfig, "--diff", "--no-color"}
			if show {
				args = append(args, "--show-managed-fields")
			}
			stdout, _, stop := startWatch(t, testWatchCmd(), args...)
			waitFor(t, stdout, "# watching")
			e := edits{t: t, c: cms, ns: ns, ctx: ctx}
			e.create("w1", map[string]any{"size": "3"})
			apply := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"w1"},"data":{"size":"3"}}`
			before, err := cms.Get(ctx, ns, "w1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			after, err := cms.Patch(ctx, ns, "w1", types.ApplyPatchType, []byte(apply), metav1.PatchOptions{FieldManager: "second"}, "")
			if err != nil {
				t.Fatalf("apply: %v", err)
			}
			if after.GetResourceVersion() == before.GetResourceVersion() {
				t.Fatal("the apply of a shared value wrote nothing: the test tests nothing")
			}
			e.patch("w1", `{"data":{"size":"4"}}`)
			waitFor(t, stdout, "size: 3 → 4")
			if err := stop(); err != nil {
				t.Fatalf("watch: %v", err)
			}
			out := stdout.String()
			n := strings.Count(out, "MODIFIED")
			switch {
			case !show && (n != 1 || strings.Contains(out, "managedFields")):
				t.Errorf("without --show-managed-fields: %d MODIFIED, want 1, and no managedFields:\n%s", n, out)
			case show && (n != 2 || !strings.Contains(out, `+ metadata.managedFields[0]: {"apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:size":{}}},"manager":"second"`)):
				t.Errorf("with --show-managed-fields: %d MODIFIED, want 2, one adding the second manager:\n%s", n, out)
			}
		})
	}
}

// urlRecorder is a transport that records the query of each watch request.
type urlRecorder struct {
	rt      http.RoundTripper
	mu      sync.Mutex
	watches []url.Values
}

func (u *urlRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if q := req.URL.Query(); q.Get("watch") == "true" {
		u.mu.Lock()
		u.watches = append(u.watches, q)
		u.mu.Unlock()
	}
	return u.rt.RoundTrip(req)
}

// TestWatchFieldsMask: with --fields, the watch asks the server for the
// mask of the patterns' prefixes when the server offers masks, and not
// otherwise, and prints the same either way (the golden file of
// TestWatch's fields case).
func TestWatchFieldsMask(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	ns := "watch-fields-mask"
	cms := configMaps(t, env, ns)
	w := testWatchCmd()
	rec := &urlRecorder{}
	w.wrap = func(rt http.RoundTripper) http.RoundTripper { rec.rt = rt; return rec }
	stdout, _, stop := startWatch(t, w, "configmaps", "-n", ns, "--kubeconfig", env.Kubeconfig, "--diff", "--no-color", "--fields", "metadata.labels.*")
	waitFor(t, stdout, "# watching")
	e := edits{t: t, c: cms, ns: ns, ctx: ctx}
	e.create("w1", map[string]any{"size": "3", "color": "red"})
	e.patch("w1", `{"metadata":{"labels":{"app":"web"}},"data":{"size":"4","color":null}}`)
	e.patch("w1", `{"metadata":{"labels":{"app":"api"}}}`)
	e.delete("w1")
	waitFor(t, stdout, "DELETED")
	if err := stop(); err != nil {
		t.Fatalf("watch: %v", err)
	}
	checkGolden(t, "watch-fields", strings.ReplaceAll(stdout.String(), ns, "watch-fields"))

	cfg, err := client.FromKubeconfig(env.Kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.CloseIdleConnections()
	ext, err := rc.WatchExtensions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	if ext.Has(client.ExtFieldMask) {
		want = "/metadata/labels"
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.watches) == 0 {
		t.Fatal("no watch request")
	}
	for _, q := range rec.watches {
		if got := q.Get("fieldMask"); got != want {
			t.Errorf("server offers %v: watch with fieldMask=%q, want %q", ext, got, want)
		}
	}
}
