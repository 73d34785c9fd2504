package ui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/internal/ui"
)

var configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// openLive opens GET /api/live with q and lastID (the Last-Event-ID).
func (e *uiEnv) openLive(t testing.TB, q url.Values, lastID string) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url("/api/live", q), nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	c := &http.Client{Jar: e.web.Jar}
	resp, err := c.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("live: %s", resp.Status)
	}
	s := &sse{resp: resp, ch: make(chan sseEvent, 1024)}
	go func() {
		defer close(s.ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var id, data string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				id = line[4:]
			case strings.HasPrefix(line, "data: "):
				data = line[6:]
			case line == "" && data != "":
				var ev ui.LiveEvent
				err := json.Unmarshal([]byte(data), &ev)
				s.ch <- sseEvent{id: id, ev: ev, err: err}
				data = ""
			}
		}
		s.ch <- sseEvent{err: errClosed}
	}()
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	s.resp = resp
	_ = cancel
	return s
}

// next returns the next change or note (not READY), failing after d.
func (s *sse) next(t testing.TB, d time.Duration) sseEvent {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case e := <-s.ch:
			if e.err != nil {
				t.Fatalf("live stream: %v", e.err)
			}
			if e.ev.Type == "READY" {
				continue
			}
			return e
		case <-timer.C:
			t.Fatalf("no live event within %s", d)
		}
	}
}

// ready waits for the READY event and returns its id.
func (s *sse) ready(t testing.TB) sseEvent {
	t.Helper()
	select {
	case e := <-s.ch:
		if e.err != nil || e.ev.Type != "READY" {
			t.Fatalf("first event = %+v, %v; want READY", e.ev, e.err)
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no READY")
	}
	return sseEvent{}
}

func (s *sse) close() { s.resp.Body.Close() }

func (e *uiEnv) createCM(t testing.TB, ns, name string, data map[string]any) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": ns}, "data": data}}
	if _, err := e.cms.Create(context.Background(), obj, metav1.CreateOptions{FieldManager: "test"}); err != nil {
		t.Fatal(err)
	}
}

func (e *uiEnv) patchCM(t testing.TB, ns, name, patch string) {
	t.Helper()
	e.patchCMAs(t, "test", ns, name, patch)
}

// patchCMAs merge-patches a ConfigMap as field manager manager.
func (e *uiEnv) patchCMAs(t testing.TB, manager, ns, name, patch string) {
	t.Helper()
	if _, err := e.cms.Patch(context.Background(), ns, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: manager}); err != nil {
		t.Fatal(err)
	}
}

// TestLiveStreamCarriesPatchDiff: a kubectl patch (a client patch when
// kubectl is absent) reaches the live stream as a MODIFIED with the
// field-level change and the JSON patch.
func TestLiveStreamCarriesPatchDiff(t *testing.T) {
	e := startUI(t)
	e.createCM(t, "default", "app", map[string]any{"mode": "slow"})
	s := e.openLive(t, url.Values{"resource": {"configmaps"}, "namespace": {"default"}}, "")
	ready := s.ready(t)
	if ready.ev.Objects["configmaps"] < 1 {
		t.Fatalf("READY = %+v, want the configmaps counted", ready.ev)
	}
	start := time.Now()
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.Command(kubectl, "--kubeconfig", e.env.Kubeconfig, "-n", "default", "patch", "configmap", "app", "--type=merge", "-p", `{"data":{"mode":"fast"}}`).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl patch: %v\n%s", err, out)
		}
	} else {
		t.Log("kubectl not found: patching with the client library")
		e.patchCM(t, "default", "app", `{"data":{"mode":"fast"}}`)
	}
	got := s.next(t, 5*time.Second)
	t.Logf("the change reached the stream %s after the patch started", time.Since(start))
	ev := got.ev
	if ev.Type != "MODIFIED" || ev.Name != "app" || ev.Namespace != "default" || len(ev.Changes) != 1 {
		t.Fatalf("event = %+v", ev)
	}
	c := ev.Changes[0]
	if c.Path != "data.mode" || c.Op != "replace" || *c.Old != "slow" || *c.New != "fast" {
		t.Fatalf("change = %+v (%v → %v)", c, *c.Old, *c.New)
	}
	if len(ev.Patch) != 1 || ev.Patch[0].Path != "/data/mode" {
		t.Fatalf("patch = %+v", ev.Patch)
	}
	if !strings.HasPrefix(got.id, "configmaps=") {
		t.Fatalf("id = %q, want the configmaps cursor", got.id)
	}
}

// TestLiveResumeExactlyOnce: a stream that reconnects with Last-Event-ID
// gets every change made while it was away, once each, in order; with a
// cursor the server no longer holds it says so with a NOTE.
func TestLiveResumeExactlyOnce(t *testing.T) {
	e := startUI(t, func(c *ui.Config) { c.Ring = 64 })
	e.createCM(t, "default", "n", map[string]any{"i": "0"})
	q := url.Values{"resource": {"configmaps"}, "namespace": {"default"}}
	s := e.openLive(t, q, "")
	s.ready(t)
	e.patchCM(t, "default", "n", `{"data":{"i":"1"}}`)
	first := s.next(t, 5*time.Second)
	s.close()
	for i := 2; i <= 6; i++ {
		e.patchCM(t, "default", "n", fmt.Sprintf(`{"data":{"i":"%d"}}`, i))
	}
	s2 := e.openLive(t, q, first.id)
	if r := s2.ready(t); r.ev.Note != "resumed" {
		t.Fatalf("READY = %+v, want resumed", r.ev)
	}
	for i := 2; i <= 6; i++ {
		got := s2.next(t, 5*time.Second)
		if got.ev.Type != "MODIFIED" || *got.ev.Changes[0].New != fmt.Sprint(i) {
			t.Fatalf("resumed event %d = %+v", i, got.ev)
		}
	}
	e.patchCM(t, "default", "n", `{"data":{"i":"7"}}`)
	if got := s2.next(t, 5*time.Second); *got.ev.Changes[0].New != "7" {
		t.Fatalf("after the resumed ones: %+v, want i=7 (no repeat)", got.ev)
	}

	// Pause/resume through ?after= (the page's way) resumes the same.
	s2.close()
	e.patchCM(t, "default", "n", `{"data":{"i":"8"}}`)
	q2 := url.Values{"resource": q["resource"], "namespace": q["namespace"], "after": {first.id}}
	s3 := e.openLive(t, q2, "")
	s3.ready(t)
	for i := 2; i <= 8; i++ {
		if got := s3.next(t, 5*time.Second); *got.ev.Changes[0].New != fmt.Sprint(i) {
			t.Fatalf("?after= event %d = %+v", i, got.ev)
		}
	}
	s3.close()

	// A cursor older than what the server holds: a NOTE says so.
	s4 := e.openLive(t, q, "configmaps=1")
	s4.ready(t)
	if got := s4.next(t, 5*time.Second); got.ev.Type != "NOTE" || !strings.Contains(got.ev.Note, "no longer held") {
		t.Fatalf("stale cursor: %+v, want a NOTE", got.ev)
	}
}

// TestLiveFieldFilter: with fields, only updates that changed them come,
// with only those changes.
func TestLiveFieldFilter(t *testing.T) {
	e := startUI(t)
	e.createCM(t, "default", "f", map[string]any{"a": "1", "b": "1"})
	s := e.openLive(t, url.Values{"resource": {"configmaps"}, "namespace": {"default"}, "fields": {"data.b"}}, "")
	s.ready(t)
	e.patchCM(t, "default", "f", `{"data":{"a":"2"}}`)
	e.patchCM(t, "default", "f", `{"data":{"a":"3","b":"2"}}`)
	got := s.next(t, 5*time.Second)
	if got.ev.Type != "MODIFIED" || len(got.ev.Changes) != 1 || got.ev.Changes[0].Path != "data.b" {
		t.Fatalf("filtered event = %+v", got.ev)
	}
}

// TestLiveIdleHubStops: a watch nobody streams stops after Config.Idle,
// with its goroutine, while the Server runs on; a new stream starts it
// again.
func TestLiveIdleHubStops(t *testing.T) {
	e := startUI(t, func(c *ui.Config) { c.Idle = 100 * time.Millisecond })
	q := url.Values{"resource": {"configmaps"}, "namespace": {"default"}}
	s := e.openLive(t, q, "")
	s.ready(t)
	if !hubRunning() {
		t.Fatal("no watch goroutine while streaming")
	}
	s.close()
	waitFor(t, "the idle watch to stop", func() bool { return !hubRunning() })
	s2 := e.openLive(t, q, "")
	s2.ready(t)
	e.createCM(t, "default", "again", map[string]any{"k": "v"})
	if got := s2.next(t, 5*time.Second); got.ev.Type != "ADDED" || got.ev.Name != "again" {
		t.Fatalf("after a restart of the watch: %+v", got.ev)
	}
}

// hubRunning: a live watch's goroutine runs.
func hubRunning() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "internal/ui.(*hub).run")
}

// TestLiveSeveralNamespaces: one stream follows several namespaces (a
// watch each) and resumes each from its own resourceVersion; other
// namespaces are not shown.
func TestLiveSeveralNamespaces(t *testing.T) {
	e := startUI(t)
	for _, ns := range []string{"a", "b", "c"} {
		e.createNamespace(t, ns)
	}
	q := url.Values{"resource": {"configmaps"}, "namespace": {"a,b"}}
	s := e.openLive(t, q, "")
	if r := s.ready(t); len(r.ev.Objects) != 2 {
		t.Fatalf("READY = %+v, want a watch per namespace", r.ev)
	}
	e.createCM(t, "c", "x", nil)
	e.createCM(t, "a", "x", nil)
	first := s.next(t, 5*time.Second)
	if first.ev.Namespace != "a" || first.ev.Resource != "configmaps" {
		t.Fatalf("first = %+v", first.ev)
	}
	s.close()
	e.createCM(t, "b", "y", nil)
	e.createCM(t, "a", "y", nil)
	s2 := e.openLive(t, q, first.id)
	s2.ready(t)
	seen := map[string]bool{}
	for range 2 {
		got := s2.next(t, 5*time.Second)
		seen[got.ev.Namespace+"/"+got.ev.Name] = true
	}
	if !seen["b/y"] || !seen["a/y"] {
		t.Fatalf("resumed = %v, want a/y and b/y", seen)
	}
	e.createCM(t, "b", "z", nil)
	if got := s2.next(t, 5*time.Second); got.ev.Namespace+"/"+got.ev.Name != "b/z" {
		t.Fatalf("next = %+v, want b/z (nothing repeated, c not shown)", got.ev)
	}
}
