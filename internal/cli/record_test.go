package cli

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/recording"
	"github.com/objwatch/objwatch/testenv"
)

// runRecCmd runs cmd with args until ctx ends or it returns.
func runRecCmd(ctx context.Context, cmd *cobra.Command, stdin io.Reader, stderr *syncBuffer, args ...string) (stdout, _ *syncBuffer, err error) {
	root := &cobra.Command{Use: "objwatch", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(cmd)
	root.SetArgs(args)
	stdout = &syncBuffer{}
	if stderr == nil {
		stderr = &syncBuffer{}
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	if stdin != nil {
		root.SetIn(stdin)
	}
	return stdout, stderr, root.ExecuteContext(ctx)
}

// partial returns what a recording being written holds so far (the
// writer flushes every second; the gzip stream has no end yet).
func partial(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return ""
	}
	b, _ := io.ReadAll(zr)
	return string(b)
}

// TestRecordAndReplay records ConfigMaps with objwatch record while the
// test writes them, forcing a 410 (the recorder's watch is held back until
// the server compacted its history), then replays the file with objwatch
// replay into a fresh server: it must end with the same objects, through
// the recorded sequence of writes.
func TestRecordAndReplay(t *testing.T) {
	// Half a second of history: enough for the recorder's watch to start
	// from its list on a loaded machine (100 ms was not, under -race, and
	// it got a 410 before any change), short enough that the cut below
	// outlasts it.
	env := testenv.Start(t, testenv.WithHistory(500*time.Millisecond))
	ctx := context.Background()
	const ns = "rec"
	cms := configMaps(t, env, ns)
	e := edits{t: t, c: cms, ns: ns, ctx: ctx}
	e.create("a", map[string]any{"v": "0"})
	e.create("b", map[string]any{"v": "0"})

	file := filepath.Join(t.TempDir(), "incident.rec")
	ready := make(chan struct{})
	cut := &cutter{}
	rec := &recordCmd{ready: func() { close(ready) }}
	rec.wrap = func(rt http.RoundTripper) http.RoundTripper { cut.rt = rt; return cut }
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	recOut := &syncBuffer{}
	go func() {
		_, _, err := runRecCmd(rctx, rec.command(), nil, recOut, "record", "configmaps", "-n", ns, "--kubeconfig", env.Kubeconfig,
			"-o", file, "--redact", "data.secret")
		done <- err
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("record did not finish its initial list")
	}
	e.create("c", map[string]any{"v": "0", "secret": "hunter2"})
	e.patch("a", `{"data":{"v":"1"}}`)
	e.delete("b")
	waitForFile(t, file, `"name":"b"`, recOut)

	cut.cut() // the watch ends and cannot come back until release
	e.patch("a", `{"data":{"v":"2"}}`)
	e.patch("a", `{"data":{"v":"3"}}`)
	e.delete("c")
	e.create("d", map[string]any{"v": "0"})
	time.Sleep(2500 * time.Millisecond) // several compactions, past the cache's window
	e.create("e", map[string]any{"v": "0"})
	time.Sleep(300 * time.Millisecond)
	cut.release()
	waitForFile(t, file, `"kind":"relist"`, recOut)
	e.patch("d", `{"data":{"v":"1","last":"yes"}}`)
	waitForFile(t, file, `"last":"yes"`, recOut)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("record: %v", err)
	}
	if !strings.Contains(recOut.String(), "# recorded") {
		t.Errorf("record's summary: %q", recOut.String())
	}

	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	r, err := recording.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, it := range r.Items {
		if it.Kind != recording.Bookmark {
			kinds = append(kinds, string(it.Kind))
		}
		if bytes.Contains(it.Object, []byte("hunter2")) {
			t.Errorf("line %d: data.secret not redacted: %s", it.Line, it.Object)
		}
	}
	if got, want := strings.Join(kinds, " "), "initial initial synced ADDED MODIFIED DELETED gone relist listed listed listed synced MODIFIED"; got != want {
		t.Errorf("recorded kinds:\n  %s\nwant\n  %s", got, want)
	}

	// Replay into a fresh server.
	fresh := testenv.Start(t)
	start := time.Now()
	out, _, err := runRecCmd(ctx, (&replayCmd{}).command(), nil, nil, "replay", file, "--kubeconfig", fresh.Kubeconfig, "--speed", "0")
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	t.Logf("replayed in %v:\n%s", time.Since(start), out)
	var actions []string
	for _, l := range strings.Split(out.String(), "\n") {
		if m := regexp.MustCompile(`^\+[0-9.]+s line \d+ (\w+ \S+ \S+)$`).FindStringSubmatch(l); m != nil {
			actions = append(actions, m[1])
		}
	}
	want := []string{
		"create v1/configmaps rec/a", "create v1/configmaps rec/b", // initial
		"create v1/configmaps rec/c", "update v1/configmaps rec/a", "delete v1/configmaps rec/b", // watched
		"update v1/configmaps rec/a", "create v1/configmaps rec/d", "create v1/configmaps rec/e", "delete v1/configmaps rec/c", // the relist
		"update v1/configmaps rec/d",
	}
	if !slices.Equal(actions, want) {
		t.Errorf("replay wrote\n  %s\nwant\n  %s", strings.Join(actions, "\n  "), strings.Join(want, "\n  "))
	}
	if got, want := dataOf(t, fresh, ns), dataOf(t, env, ns); got != want || want == "" {
		t.Errorf("replayed state %s, want the recorded server's %s", got, want)
	}
}

func waitForFile(t *testing.T, file, want string, notes fmt.Stringer) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(partial(file), want); {
		if time.Now().After(deadline) {
			t.Fatalf("the recording never had %s:\n%s\nrecord's notes:\n%s", want, partial(file), notes)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dataOf lists ns's ConfigMaps on env as "name=data ...", sorted.
func dataOf(t *testing.T, env *testenv.Env, ns string) string {
	t.Helper()
	rc, _, err := restClient(env.Kubeconfig, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.CloseIdleConnections()
	l, err := client.Unstructured(rc, client.Resource{GVR: corev1GV.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap"}).
		List(context.Background(), ns, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range l.Items {
		if o.GetName() == "kube-root-ca.crt" {
			continue
		}
		out = append(out, fmt.Sprintf("%s=%v", o.GetName(), o.Object["data"]))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}
