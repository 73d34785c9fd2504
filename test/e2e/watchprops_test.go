package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/testenv"
)

// This file checks the raw HTTP watch API against the watch guarantees of
// docs/ARCHITECTURE.md ("Guarantees"): ordered, unique, bookmarkable, reliable, resumable
// and filtered, under concurrent writers and restarting watchers. Atomic
// holds trivially here: every write changes one object in its own
// revision, so resourceVersions must strictly increase within a stream.

// TestWatchProperties runs concurrent writers and several watchers (some
// restarting from their last resourceVersion, some filtered) and checks
// every recorded stream against the true history, which an uninterrupted
// unfiltered watcher records and the writers' own results confirm.
func TestWatchProperties(t *testing.T) {
	wpPaths(t, func(t *testing.T, path testenv.Option) {
		env := testenv.Start(t, path, testenv.WithServerConfig(func(c *server.Config) { c.BookmarkInterval = 100 * time.Millisecond }))
		wpProperties(t, env)
	})
}

// wpPaths runs f against both watch implementations: the watch cache and
// etcd directly (DisableWatchCache).
func wpPaths(t *testing.T, f func(t *testing.T, path testenv.Option)) {
	for _, p := range []struct {
		name    string
		noCache bool
	}{
		{"watch cache", false},
		{"etcd", true},
	} {
		t.Run(p.name, func(t *testing.T) {
			f(t, testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = p.noCache }))
		})
	}
}

func wpProperties(t *testing.T, env *testenv.Env) {
	c := wpNewClient(t, env)
	namespaces := []string{"wp-a", "wp-b"}
	for _, ns := range namespaces {
		c.createNamespace(t, ns)
	}
	from := c.listRV(t, "/api/v1/configmaps")

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	specs := []wpSpec{
		// The reference sees everything, uninterrupted: its events are the
		// true history.
		{name: "reference", bookmarks: true, wantBookmarks: true},
		{name: "all", bookmarks: true, restartEvents: 25, restartAfter: [2]time.Duration{100 * time.Millisecond, 700 * time.Millisecond}},
		// Long enough between restarts for bookmarks (the watch cache
		// sends them on a 1 s tick).
		{name: "ns-a", ns: "wp-a", bookmarks: true, wantBookmarks: true, restartAfter: [2]time.Duration{900 * time.Millisecond, 1500 * time.Millisecond}},
		{name: "red", label: "team=red", bookmarks: true, restartEvents: 60, restartAfter: [2]time.Duration{300 * time.Millisecond, 1500 * time.Millisecond}},
		{name: "b-blue", ns: "wp-b", label: "team=blue"},
		{name: "a-not-red-timeout", ns: "wp-a", label: "team!=red", bookmarks: true, timeoutSeconds: 1},
	}
	// The reference watcher has its own context: it stops first, so that
	// the truth is known while the others still run.
	refCtx, refCancel := context.WithCancel(t.Context())
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { refCancel(); cancel(); wg.Wait() }()
	watchers := make([]*wpWatcher, len(specs))
	for i, s := range specs {
		w := &wpWatcher{spec: s, sel: wpSelector(t, s.label), done: make(chan struct{})}
		w.last.Store(from)
		watchers[i] = w
		rng := rand.New(rand.NewPCG(seed, uint64(100+i)))
		wctx := ctx
		if i == 0 {
			wctx = refCtx
		}
		wg.Go(func() { w.run(wctx, c, from, rng) })
	}

	// Writers: each owns its keys, so its log is the order of their changes.
	const writers, writesEach = 4, 75
	logs := make([][]wpOp, writers)
	writeErrs := make([]error, writers)
	var wwg sync.WaitGroup
	started := time.Now()
	for i := range writers {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		wwg.Go(func() { logs[i], writeErrs[i] = wpWrite(ctx, c, i, writesEach, namespaces, rng) })
	}
	wwg.Wait()
	t.Logf("%d writes in %v", writers*writesEach, time.Since(started))
	for i, err := range writeErrs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	final := c.listRV(t, "/api/v1/configmaps")

	// The reference must have the whole history, and every watcher must
	// cover it (through its last matching change, or by a bookmark).
	started = time.Now()
	ref := watchers[0]
	wpWaitFor(t, "reference watcher to reach "+strconv.FormatInt(final, 10), func() bool { return ref.last.Load() >= final })
	refCancel()
	var truth []wpEvent
	<-ref.done
	for _, seg := range ref.segments {
		for _, e := range seg.events {
			if e.Type != "BOOKMARK" {
				truth = append(truth, e)
			}
		}
	}
	if len(ref.segments) != 1 {
		t.Fatalf("reference watcher restarted %d times; errors: %v", len(ref.segments)-1, ref.errs)
	}
	wpCheckTruth(t, truth, logs)
	for _, w := range watchers[1:] {
		want := final
		if !w.spec.bookmarks {
			want = from
			if exp := wpExpected(truth, w.spec.ns, w.sel); len(exp) > 0 {
				want = exp[len(exp)-1].RV
			}
		}
		wpWaitFor(t, fmt.Sprintf("watcher %s to reach %d", w.spec.name, want), func() bool { return w.last.Load() >= want })
	}
	t.Logf("watchers caught up in %v", time.Since(started))
	cancel()
	wg.Wait()

	for _, w := range watchers {
		t.Run(w.spec.name, func(t *testing.T) {
			for _, e := range w.errs {
				t.Errorf("%s", e)
			}
			wpCheckStream(t, w, truth, from)
		})
	}
}

// wpOp is a writer's record of one successful change.
type wpOp struct {
	key    string // namespace/name
	typ    string // ADDED, MODIFIED or DELETED, as a watch reports it
	rv     int64  // 0 for deletions, whose response has none
	labels map[string]string
	data   map[string]string
}

// wpWrite creates, updates and deletes ConfigMaps that only this writer
// touches; updates sometimes move an object between label selections.
func wpWrite(ctx context.Context, c *wpClient, id, n int, namespaces []string, rng *rand.Rand) ([]wpOp, error) {
	type state struct {
		rv     string
		labels map[string]string
		data   map[string]string
	}
	cur := map[string]*state{}
	var log []wpOp
	teams := []string{"red", "blue"}
	for i := range n {
		// Pauses spread the writes over the watchers' restarts.
		select {
		case <-ctx.Done():
			return log, ctx.Err()
		case <-time.After(time.Duration(rng.IntN(50)) * time.Millisecond):
		}
		ns := namespaces[rng.IntN(len(namespaces))]
		name := fmt.Sprintf("w%d-%d", id, rng.IntN(3))
		key := ns + "/" + name
		s := cur[key]
		data := map[string]string{"v": strconv.Itoa(i)}
		switch {
		case s == nil:
			lbl := map[string]string{"team": teams[rng.IntN(2)], "writer": strconv.Itoa(id)}
			obj := wpConfigMap(ns, name, "", lbl, data)
			var out wpObject
			if err := c.do(ctx, http.MethodPost, "/api/v1/namespaces/"+ns+"/configmaps", "", obj, http.StatusCreated, &out); err != nil {
				return log, err
			}
			cur[key] = &state{rv: out.Metadata.ResourceVersion, labels: lbl, data: data}
			log = append(log, wpOp{key: key, typ: "ADDED", rv: wpAtoi(out.Metadata.ResourceVersion), labels: lbl, data: data})
		case rng.Float64() < 0.65:
			lbl := s.labels
			if rng.Float64() < 0.4 {
				lbl = map[string]string{"team": teams[rng.IntN(2)], "writer": strconv.Itoa(id)}
			}
			obj := wpConfigMap(ns, name, s.rv, lbl, data)
			var out wpObject
			if err := c.do(ctx, http.MethodPut, "/api/v1/namespaces/"+ns+"/configmaps/"+name, "", obj, http.StatusOK, &out); err != nil {
				return log, err
			}
			cur[key] = &state{rv: out.Metadata.ResourceVersion, labels: lbl, data: data}
			log = append(log, wpOp{key: key, typ: "MODIFIED", rv: wpAtoi(out.Metadata.ResourceVersion), labels: lbl, data: data})
		default:
			var st wpObject
			if err := c.do(ctx, http.MethodDelete, "/api/v1/namespaces/"+ns+"/configmaps/"+name, "", nil, http.StatusOK, &st); err != nil {
				return log, err
			}
			delete(cur, key)
			log = append(log, wpOp{key: key, typ: "DELETED", labels: s.labels, data: s.data})
		}
	}
	return log, nil
}

func wpConfigMap(ns, name, rv string, lbl, data map[string]string) map[string]any {
	md := map[string]any{"name": name, "namespace": ns, "labels": lbl}
	if rv != "" {
		md["resourceVersion"] = rv
	}
	return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data}
}

// wpCheckTruth checks that the reference stream is exactly what the writers
// did: per key the same changes in the same order, nothing else.
func wpCheckTruth(t *testing.T, truth []wpEvent, logs [][]wpOp) {
	t.Helper()
	want := map[string][]string{}
	for _, log := range logs {
		for _, op := range log {
			want[op.key] = append(want[op.key], fmt.Sprintf("%s rv=%d labels=%v data=%v", op.typ, op.rv, op.labels, op.data))
		}
	}
	got := map[string][]string{}
	for _, e := range truth {
		rv := e.RV
		if e.Type == "DELETED" {
			rv = 0
		}
		got[e.key()] = append(got[e.key()], fmt.Sprintf("%s rv=%d labels=%v data=%v", e.Type, rv, e.Obj.Metadata.Labels, e.Obj.Data))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("reference watch differs from the writers' history (-writers +watch):\n%s", diff)
	}
}

// wpExpected is the history as a watch on namespace ns (empty: all) with
// label selector sel must report it: an object entering the selection is
// ADDED, one leaving it DELETED with its last matching state and the
// change's resourceVersion.
func wpExpected(truth []wpEvent, ns string, sel labels.Selector) []wpEvent {
	match := func(o *wpObject) bool {
		return o != nil && (ns == "" || o.Metadata.Namespace == ns) && sel.Matches(labels.Set(o.Metadata.Labels))
	}
	prev := map[string]*wpObject{}
	var out []wpEvent
	for _, e := range truth {
		p := prev[e.key()]
		cur := &e.Obj
		switch e.Type {
		case "ADDED":
			if match(cur) {
				out = append(out, e)
			}
		case "MODIFIED":
			switch now, before := match(cur), match(p); {
			case now && before:
				out = append(out, e)
			case now:
				out = append(out, wpEvent{Type: "ADDED", RV: e.RV, Obj: e.Obj})
			case before:
				out = append(out, wpEvent{Type: "DELETED", RV: e.RV, Obj: *p})
			}
		case "DELETED":
			if match(cur) {
				out = append(out, e)
			}
		}
		if e.Type == "DELETED" {
			delete(prev, e.key())
		} else {
			prev[e.key()] = cur
		}
	}
	return out
}

// wpCheckStream checks one watcher's recorded segments.
func wpCheckStream(t *testing.T, w *wpWatcher, truth []wpEvent, from int64) {
	expected := wpExpected(truth, w.spec.ns, w.sel)
	between := func(lo, hi int64) []string {
		var out []string
		for _, e := range expected {
			if e.RV > lo && e.RV <= hi {
				out = append(out, e.String())
			}
		}
		return out
	}
	var all []string
	var lastEvent, lastBookmark int64
	bookmarks := 0
	end := from
	for i, seg := range w.segments {
		segEnd := seg.start
		var got []string
		for _, e := range seg.events {
			segEnd = max(segEnd, e.RV)
			switch e.Type {
			case "BOOKMARK":
				if !w.spec.bookmarks {
					t.Errorf("segment %d: BOOKMARK at %d without allowWatchBookmarks", i, e.RV)
				}
				if e.RV < lastBookmark || e.RV < lastEvent {
					t.Errorf("segment %d: bookmarkable: BOOKMARK at %d after bookmark %d and event %d", i, e.RV, lastBookmark, lastEvent)
				}
				if err := wpCheckBookmark(e, false); err != nil {
					t.Errorf("segment %d: %v", i, err)
				}
				lastBookmark = e.RV
				bookmarks++
			case "ADDED", "MODIFIED", "DELETED":
				if e.RV <= lastEvent {
					t.Errorf("segment %d: ordered/unique: %s after an event at %d", i, e, lastEvent)
				}
				if e.RV <= lastBookmark {
					t.Errorf("segment %d: bookmarkable: %s after a bookmark at %d", i, e, lastBookmark)
				}
				if (w.spec.ns != "" && e.Obj.Metadata.Namespace != w.spec.ns) || !w.sel.Matches(labels.Set(e.Obj.Metadata.Labels)) {
					t.Errorf("segment %d: filter: %s does not match namespace %q, labels %q", i, e, w.spec.ns, w.spec.label)
				}
				if e.Obj.Kind != "ConfigMap" || e.Obj.APIVersion != "v1" {
					t.Errorf("segment %d: %s has kind %q apiVersion %q, want ConfigMap v1", i, e, e.Obj.Kind, e.Obj.APIVersion)
				}
				lastEvent = e.RV
				got = append(got, e.String())
			default:
				t.Errorf("segment %d: unexpected event %s", i, e)
			}
		}
		want := between(seg.start, segEnd)
		if len(want) > 0 && (len(got) == 0 || got[0] != want[0]) {
			t.Errorf("segment %d: resumable: watch from %d began with %v, want %s", i, seg.start, got[:min(1, len(got))], want[0])
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("segment %d: reliable: watch from %d through %d (-want +got):\n%s", i, seg.start, segEnd, diff)
		}
		all = append(all, got...)
		end = max(end, segEnd)
	}
	if diff := cmp.Diff(between(from, end), all); diff != "" {
		t.Errorf("reliable: whole stream from %d through %d (-want +got):\n%s", from, end, diff)
	}
	restarts := len(w.segments) - 1
	if (w.spec.restartEvents > 0 && restarts < 2) || ((w.spec.restartAfter[1] > 0 || w.spec.timeoutSeconds > 0) && restarts < 1) {
		t.Errorf("watcher restarted %d times, want more", restarts)
	}
	if w.spec.wantBookmarks && bookmarks == 0 {
		t.Errorf("no BOOKMARK events, want some")
	}
	t.Logf("%d segments, %d events, %d bookmarks, covered (%d, %d]", len(w.segments), len(all), bookmarks, from, end)
}

// wpCheckBookmark checks that a bookmark carries only kind, apiVersion and
// metadata.resourceVersion (and, ending initial events, the annotation).
func wpCheckBookmark(e wpEvent, initialEnd bool) error {
	var obj map[string]any
	if err := json.Unmarshal(e.Raw, &obj); err != nil {
		return err
	}
	md, _ := obj["metadata"].(map[string]any)
	wantMeta := map[string]any{"resourceVersion": strconv.FormatInt(e.RV, 10)}
	if initialEnd {
		wantMeta["annotations"] = map[string]any{"k8s.io/initial-events-end": "true"}
	}
	want := map[string]any{"kind": e.Obj.Kind, "apiVersion": e.Obj.APIVersion, "metadata": wantMeta}
	if e.Obj.Kind == "" || e.Obj.APIVersion == "" || md == nil || !cmp.Equal(obj, want) {
		return fmt.Errorf("BOOKMARK object = %s, want only kind, apiVersion and metadata %v", e.Raw, wantMeta)
	}
	return nil
}

// wpSpec describes a watcher of ConfigMaps.
type wpSpec struct {
	name          string
	ns            string // empty: all namespaces
	label         string
	bookmarks     bool
	wantBookmarks bool
	// Close and resume after at most restartEvents events (0: no limit) or
	// a random time in restartAfter (zero: never).
	restartEvents  int
	restartAfter   [2]time.Duration
	timeoutSeconds int // the server ends each watch; the watcher resumes
}

// wpWatcher records one watcher's segments (one per HTTP watch request).
// run owns segments and errs; read them after run returns.
type wpWatcher struct {
	spec     wpSpec
	sel      labels.Selector
	segments []wpSegment
	errs     []string
	last     atomic.Int64  // resourceVersion it would resume from
	done     chan struct{} // closed when run returns
}

type wpSegment struct {
	start  int64
	events []wpEvent
}

// run watches from resourceVersion from until ctx ends, resuming from the
// last seen resourceVersion whenever a watch ends.
func (w *wpWatcher) run(ctx context.Context, c *wpClient, from int64, rng *rand.Rand) {
	defer close(w.done)
	last := from
	for ctx.Err() == nil {
		var segCtx context.Context
		var cancel context.CancelFunc
		if lo, hi := w.spec.restartAfter[0], w.spec.restartAfter[1]; hi > 0 {
			segCtx, cancel = context.WithTimeout(ctx, lo+time.Duration(rng.Int64N(int64(hi-lo))))
		} else {
			segCtx, cancel = context.WithCancel(ctx)
		}
		limit := -1
		if w.spec.restartEvents > 0 {
			limit = 1 + rng.IntN(w.spec.restartEvents)
		}
		q := url.Values{"watch": {"1"}, "resourceVersion": {strconv.FormatInt(last, 10)}}
		if w.spec.label != "" {
			q.Set("labelSelector", w.spec.label)
		}
		if w.spec.bookmarks {
			q.Set("allowWatchBookmarks", "true")
		}
		if w.spec.timeoutSeconds > 0 {
			q.Set("timeoutSeconds", strconv.Itoa(w.spec.timeoutSeconds))
		}
		seg := wpSegment{start: last}
		err := c.stream(segCtx, wpPath(w.spec.ns), q, func(e wpEvent) bool {
			seg.events = append(seg.events, e)
			if e.Type == "ERROR" {
				w.errs = append(w.errs, fmt.Sprintf("watch from %d: ERROR event %s", seg.start, e.Raw))
				return false
			}
			last = e.RV
			w.last.Store(last)
			limit--
			return limit != 0
		})
		if err != nil && segCtx.Err() == nil {
			w.errs = append(w.errs, fmt.Sprintf("watch from %d: %v", seg.start, err))
		}
		cancel()
		if len(seg.events) > 0 || err == nil {
			w.segments = append(w.segments, seg)
		}
		if err != nil && segCtx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

func wpPath(ns string) string {
	if ns == "" {
		return "/api/v1/configmaps"
	}
	return "/api/v1/namespaces/" + ns + "/configmaps"
}

func wpSelector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatalf("labels.Parse(%q) = %v", s, err)
	}
	return sel
}

func wpWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func wpAtoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// wpObject is the part of a watched object (or Status) the tests read.
type wpObject struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Metadata   struct {
		Name            string            `json:"name"`
		Namespace       string            `json:"namespace"`
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]string `json:"labels"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
	// Status fields, in ERROR events.
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// wpEvent is one received watch event.
type wpEvent struct {
	Type string
	RV   int64
	Obj  wpObject
	Raw  json.RawMessage
}

func (e wpEvent) key() string { return e.Obj.Metadata.Namespace + "/" + e.Obj.Metadata.Name }

func (e wpEvent) String() string {
	return fmt.Sprintf("%s %d %s labels=%v data=%v", e.Type, e.RV, e.key(), e.Obj.Metadata.Labels, e.Obj.Data)
}

// wpClient talks HTTP to a test server.
type wpClient struct {
	c    *http.Client
	host string
}

func wpNewClient(t *testing.T, env *testenv.Env) *wpClient {
	c := env.HTTPClient()
	t.Cleanup(c.CloseIdleConnections)
	return &wpClient{c: c, host: env.Config.Host}
}

// do sends a request with a JSON body (nil: none) and decodes the answer
// into out unless it is not wantCode.
func (c *wpClient) do(ctx context.Context, method, path, contentType string, body any, wantCode int, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.host+path, r)
	if err != nil {
		return err
	}
	if contentType == "" {
		contentType = "application/json"
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := c.c.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode != wantCode {
		return fmt.Errorf("%s %s = %d %s, want %d", method, path, resp.StatusCode, b, wantCode)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode: %w", method, path, err)
		}
	}
	return nil
}

func (c *wpClient) createNamespace(t *testing.T, ns string) {
	t.Helper()
	body := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}
	if err := c.do(t.Context(), http.MethodPost, "/api/v1/namespaces", "", body, http.StatusCreated, nil); err != nil {
		t.Fatal(err)
	}
}

// listRV lists path and returns the list's resourceVersion.
func (c *wpClient) listRV(t *testing.T, path string) int64 {
	t.Helper()
	var l struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := c.do(t.Context(), http.MethodGet, path, "", nil, http.StatusOK, &l); err != nil {
		t.Fatal(err)
	}
	return wpAtoi(l.Metadata.ResourceVersion)
}

// createCM creates a ConfigMap and returns its resourceVersion.
func (c *wpClient) createCM(t *testing.T, ns, name string, lbl map[string]string) int64 {
	t.Helper()
	var out wpObject
	if err := c.do(t.Context(), http.MethodPost, wpPath(ns), "", wpConfigMap(ns, name, "", lbl, map[string]string{"k": "v"}), http.StatusCreated, &out); err != nil {
		t.Fatal(err)
	}
	return wpAtoi(out.Metadata.ResourceVersion)
}

// patchCM merge-patches a ConfigMap and returns its resourceVersion.
func (c *wpClient) patchCM(t *testing.T, ns, name, patch string) int64 {
	t.Helper()
	var out wpObject
	if err := c.do(t.Context(), http.MethodPatch, wpPath(ns)+"/"+name, "application/merge-patch+json", json.RawMessage(patch), http.StatusOK, &out); err != nil {
		t.Fatal(err)
	}
	return wpAtoi(out.Metadata.ResourceVersion)
}

func (c *wpClient) deleteCM(t *testing.T, ns, name string) {
	t.Helper()
	if err := c.do(t.Context(), http.MethodDelete, wpPath(ns)+"/"+name, "", nil, http.StatusOK, nil); err != nil {
		t.Fatal(err)
	}
}

// stream opens a watch and calls f for each event until f returns false,
// the stream ends (nil error) or fails.
func (c *wpClient) stream(ctx context.Context, path string, q url.Values, f func(wpEvent) bool) error {
	resp, err := c.open(ctx, path, q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("watch %s?%s = %d %s", path, q.Encode(), resp.StatusCode, b)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		e, err := wpDecode(dec)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !f(e) {
			return nil
		}
	}
}

func (c *wpClient) open(ctx context.Context, path string, q url.Values) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.host+path+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	return c.c.Do(req)
}

func wpDecode(dec *json.Decoder) (wpEvent, error) {
	var raw struct {
		Type   string          `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := dec.Decode(&raw); err != nil {
		return wpEvent{}, err
	}
	e := wpEvent{Type: raw.Type, Raw: raw.Object}
	if err := json.Unmarshal(raw.Object, &e.Obj); err != nil {
		return e, fmt.Errorf("decode %s object: %w", raw.Type, err)
	}
	if raw.Type != "ERROR" {
		rv, err := strconv.ParseInt(e.Obj.Metadata.ResourceVersion, 10, 64)
		if err != nil {
			return e, fmt.Errorf("%s event with resourceVersion %q: %w", raw.Type, e.Obj.Metadata.ResourceVersion, err)
		}
		e.RV = rv
	}
	return e, nil
}

// wpStream is a watch read in the background, for tests that expect
// specific events. close must be called (Cleanup does).
type wpStream struct {
	cancel context.CancelFunc
	events chan wpEvent // closed when the stream ends
	err    error        // why it ended; set before events is closed
}

// watch opens a watch, fails the test unless it answers 200, and reads it
// in the background.
func (c *wpClient) watch(t *testing.T, path string, q url.Values) *wpStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	resp, err := c.open(ctx, path, q)
	if err != nil {
		cancel()
		t.Fatalf("watch %s?%s: %v", path, q.Encode(), err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("watch %s?%s = %d %s, want 200", path, q.Encode(), resp.StatusCode, b)
	}
	s := &wpStream{cancel: cancel, events: make(chan wpEvent)}
	go func() {
		defer close(s.events)
		defer resp.Body.Close()
		dec := json.NewDecoder(resp.Body)
		for {
			e, err := wpDecode(dec)
			if err != nil {
				if err != io.EOF && ctx.Err() == nil {
					s.err = err
				}
				return
			}
			select {
			case s.events <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

// next returns the next event, failing the test if none comes in time.
func (s *wpStream) next(t *testing.T) wpEvent {
	t.Helper()
	select {
	case e, ok := <-s.events:
		if !ok {
			t.Fatalf("watch ended (err %v), want another event", s.err)
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatalf("no watch event within 10s")
	}
	return wpEvent{}
}

// nothing checks that no event arrives for d.
func (s *wpStream) nothing(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case e, ok := <-s.events:
		if ok {
			t.Errorf("unexpected watch event %s", e)
		}
	case <-time.After(d):
	}
}

func (s *wpStream) close() {
	s.cancel()
	for range s.events {
	}
}

// TestWatchSelectorTransitions: an object leaving a watch's selection
// arrives as DELETED (last matching state, the change's resourceVersion),
// entering it as ADDED; objects that never match produce nothing.
func TestWatchSelectorTransitions(t *testing.T) {
	wpPaths(t, func(t *testing.T, path testenv.Option) {
		env := testenv.Start(t, path)
		c := wpNewClient(t, env)
		const ns = "wp-sel"
		c.createNamespace(t, ns)
		rv := c.listRV(t, wpPath(ns))
		q := url.Values{"watch": {"1"}, "resourceVersion": {strconv.FormatInt(rv, 10)}}
		red := c.watch(t, wpPath(ns), wpWith(q, "labelSelector", "team=red"))
		byName := c.watch(t, wpPath(""), wpWith(q, "fieldSelector", "metadata.name=x"))

		steps := []struct {
			name string
			do   func() int64
			red  string // type and labels the red watch reports, "" for none
		}{
			{"create x red", func() int64 { return c.createCM(t, ns, "x", map[string]string{"team": "red"}) }, "ADDED x map[team:red]"},
			{"create y blue", func() int64 { return c.createCM(t, ns, "y", map[string]string{"team": "blue"}) }, ""},
			{"x leaves", func() int64 { return c.patchCM(t, ns, "x", `{"metadata":{"labels":{"team":"blue"}}}`) }, "DELETED x map[team:red]"},
			{"y enters", func() int64 { return c.patchCM(t, ns, "y", `{"metadata":{"labels":{"team":"red"}}}`) }, "ADDED y map[team:red]"},
			{"y changes", func() int64 { return c.patchCM(t, ns, "y", `{"data":{"k":"w"}}`) }, "MODIFIED y map[team:red]"},
			{"x changes outside", func() int64 { return c.patchCM(t, ns, "x", `{"data":{"k":"w"}}`) }, ""},
			{"y deleted", func() int64 { c.deleteCM(t, ns, "y"); return 0 }, "DELETED y map[team:red]"},
			{"x deleted outside", func() int64 { c.deleteCM(t, ns, "x"); return 0 }, ""},
			{"z created red", func() int64 { return c.createCM(t, ns, "z", map[string]string{"team": "red"}) }, "ADDED z map[team:red]"},
		}
		var last int64
		for _, s := range steps {
			rv := s.do()
			if s.red == "" {
				continue
			}
			e := red.next(t)
			if got := fmt.Sprintf("%s %s %v", e.Type, e.Obj.Metadata.Name, e.Obj.Metadata.Labels); got != s.red {
				t.Errorf("%s: labelSelector=team=red watch got %s, want %s", s.name, got, s.red)
			}
			if rv != 0 && e.RV != rv {
				t.Errorf("%s: event resourceVersion %d, want the write's %d", s.name, e.RV, rv)
			}
			if e.RV <= last {
				t.Errorf("%s: event resourceVersion %d after %d", s.name, e.RV, last)
			}
			last = e.RV
		}
		red.nothing(t, 200*time.Millisecond)

		var got []string
		for range 4 {
			e := byName.next(t)
			got = append(got, e.Type+" "+e.Obj.Metadata.Name)
		}
		if want := []string{"ADDED x", "MODIFIED x", "MODIFIED x", "DELETED x"}; !slices.Equal(got, want) {
			t.Errorf("fieldSelector=metadata.name=x watch got %v, want %v", got, want)
		}
		byName.nothing(t, 100*time.Millisecond)
	})
}

func wpWith(q url.Values, k, v string) url.Values {
	out := url.Values{}
	for key, vs := range q {
		out[key] = slices.Clone(vs)
	}
	out.Set(k, v)
	return out
}

// TestWatchCompactedResourceVersion: resuming from a compacted
// resourceVersion is accepted (200) and then ends with an ERROR event
// carrying a 410 Expired Status.
func TestWatchCompactedResourceVersion(t *testing.T) {
	wpPaths(t, func(t *testing.T, path testenv.Option) {
		// Both etcd and the watch cache must forget old: etcd by compaction,
		// the cache by a window shorter than the test.
		env := testenv.Start(t, path, testenv.WithCompaction(200*time.Millisecond),
			testenv.WithServerConfig(func(c *server.Config) { c.WatchCacheWindow = 100 * time.Millisecond }))
		c := wpNewClient(t, env)
		const ns = "wp-compact"
		c.createNamespace(t, ns)
		c.listRV(t, wpPath(ns)) // the watch cache starts before old
		old := c.createCM(t, ns, "cm", nil)
		written := time.Now()
		// Compaction keeps one interval of history, the cache trims once a
		// second: keep writing until both have dropped old.
		deadline := written.Add(15 * time.Second)
		for i := 0; ; i++ {
			c.patchCM(t, ns, "cm", fmt.Sprintf(`{"data":{"k":"%d"}}`, i))
			err := c.do(t.Context(), http.MethodGet, wpPath(ns)+"?resourceVersion="+strconv.FormatInt(old+1, 10)+"&resourceVersionMatch=Exact", "", nil, http.StatusGone, nil)
			if err == nil && time.Since(written) > 1500*time.Millisecond {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("resourceVersion %d not compacted after 15s: %v", old+1, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		s := c.watch(t, wpPath(ns), url.Values{"watch": {"1"}, "resourceVersion": {strconv.FormatInt(old, 10)}})
		e := s.next(t)
		if e.Type != "ERROR" || e.Obj.Kind != "Status" || e.Obj.APIVersion != "v1" || e.Obj.Code != http.StatusGone || e.Obj.Reason != "Expired" {
			t.Fatalf("first event of a watch from compacted %d = %s %s, want ERROR with a Status 410 Expired", old, e.Type, e.Raw)
		}
		select {
		case e, ok := <-s.events:
			if ok {
				t.Errorf("event after the ERROR: %s %s", e.Type, e.Raw)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("watch did not end after the ERROR event")
		}
	})
}

// TestWatchSendInitialEvents: a streaming list sends the current objects
// as ADDED, ends them with a bookmark annotated initial-events-end, then
// follows changes.
func TestWatchSendInitialEvents(t *testing.T) {
	wpPaths(t, func(t *testing.T, path testenv.Option) {
		env := testenv.Start(t, path)
		c := wpNewClient(t, env)
		const ns = "wp-initial"
		c.createNamespace(t, ns)
		rvs := map[string]int64{}
		for _, n := range []string{"a", "b", "c"} {
			rvs[n] = c.createCM(t, ns, n, nil)
		}
		for _, tc := range []struct{ name, rv string }{
			{"resourceVersion unset", ""},
			{"resourceVersion 0", "0"},
			{"resourceVersion of b", strconv.FormatInt(rvs["b"], 10)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				q := url.Values{"watch": {"1"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"}, "allowWatchBookmarks": {"true"}}
				if tc.rv != "" {
					q.Set("resourceVersion", tc.rv)
				}
				s := c.watch(t, wpPath(ns), q)
				got := map[string]int64{}
				var e wpEvent
				for {
					e = s.next(t)
					if e.Type != "ADDED" {
						break
					}
					got[e.Obj.Metadata.Name] = e.RV
				}
				if diff := cmp.Diff(rvs, got); diff != "" {
					t.Errorf("initial ADDED events (-want +got):\n%s", diff)
				}
				var maxRV int64
				for _, v := range got {
					maxRV = max(maxRV, v)
				}
				if e.Type != "BOOKMARK" || e.Obj.Metadata.Annotations["k8s.io/initial-events-end"] != "true" || e.RV < maxRV {
					t.Fatalf("after the initial events got %s %s, want a BOOKMARK annotated k8s.io/initial-events-end at >= %d", e.Type, e.Raw, maxRV)
				}
				if err := wpCheckBookmark(e, true); err != nil {
					t.Error(err)
				}
				name := "live-" + strings.ReplaceAll(strings.ToLower(tc.name), " ", "-")
				rv := c.createCM(t, ns, name, nil)
				live := s.next(t)
				if live.Type != "ADDED" || live.Obj.Metadata.Name != name || live.RV != rv || live.RV <= e.RV {
					t.Errorf("live event = %s, want ADDED %s at %d after the bookmark at %d", live, name, rv, e.RV)
				}
				rvs[name] = rv
			})
		}
	})
}

// TestWatchTimeoutSeconds: the server ends a watch after timeoutSeconds.
func TestWatchTimeoutSeconds(t *testing.T) {
	wpPaths(t, func(t *testing.T, path testenv.Option) {
		env := testenv.Start(t, path)
		c := wpNewClient(t, env)
		rv := c.listRV(t, wpPath("default"))
		start := time.Now()
		q := url.Values{"watch": {"1"}, "resourceVersion": {strconv.FormatInt(rv, 10)}, "timeoutSeconds": {"1"}, "allowWatchBookmarks": {"true"}}
		var events []string
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := c.stream(ctx, wpPath("default"), q, func(e wpEvent) bool {
			events = append(events, e.Type)
			return true
		}); err != nil {
			t.Fatalf("watch with timeoutSeconds=1: %v", err)
		}
		if d := time.Since(start); d < 900*time.Millisecond || d > 5*time.Second {
			t.Errorf("watch with timeoutSeconds=1 ended after %v, want about 1s", d)
		}
		for _, typ := range events {
			if typ != "BOOKMARK" {
				t.Errorf("watch with nothing changing got a %s event", typ)
			}
		}
	})
}

// TestWatchInitialState: a watch from resourceVersion 0 or unset begins
// with ADDED for every existing object, then follows changes; from a given
// resourceVersion it sends only later changes.
func TestWatchInitialState(t *testing.T) {
	wpPaths(t, func(t *testing.T, path testenv.Option) {
		env := testenv.Start(t, path)
		c := wpNewClient(t, env)
		const ns = "wp-state"
		c.createNamespace(t, ns)
		rvs := map[string]int64{}
		for _, n := range []string{"a", "b", "c"} {
			rvs[n] = c.createCM(t, ns, n, map[string]string{"team": "red"})
		}
		c.deleteCM(t, ns, "c")
		delete(rvs, "c")
		rvs["a"] = c.patchCM(t, ns, "a", `{"data":{"k":"w"}}`)

		for _, tc := range []struct {
			name    string
			rv      string
			initial bool
		}{
			{"unset", "", true},
			{"0", "0", true},
			{"current", "current", false},
		} {
			t.Run("resourceVersion "+tc.name, func(t *testing.T) {
				q := url.Values{"watch": {"1"}}
				if tc.rv == "current" {
					q.Set("resourceVersion", strconv.FormatInt(c.listRV(t, wpPath(ns)), 10))
				} else if tc.rv != "" {
					q.Set("resourceVersion", tc.rv)
				}
				s := c.watch(t, wpPath(ns), q)
				if tc.initial {
					got := map[string]int64{}
					for range len(rvs) {
						e := s.next(t)
						if e.Type != "ADDED" {
							t.Fatalf("initial event %s, want ADDED", e)
						}
						got[e.Obj.Metadata.Name] = e.RV
					}
					if diff := cmp.Diff(rvs, got); diff != "" {
						t.Errorf("initial ADDED events (-want +got):\n%s", diff)
					}
				}
				rv := c.patchCM(t, ns, "b", fmt.Sprintf(`{"data":{"k":%q}}`, tc.name))
				e := s.next(t)
				if e.Type != "MODIFIED" || e.Obj.Metadata.Name != "b" || e.RV != rv {
					t.Errorf("live event = %s, want MODIFIED b at %d", e, rv)
				}
				rvs["b"] = rv
			})
		}
	})
}
