package mirror_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/mirror"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage/etcd"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
)

// TestMain checks that a mirror's goroutines end with Run.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

var quiet = slog.New(slog.DiscardHandler)

// env is an object service on an embedded etcd, with ConfigMaps in
// namespace "ns" to mirror.
type env struct {
	t     *testing.T
	store *etcd.Store
	s     *objects.Service
	res   *registry.Resource
}

func newEnv(t *testing.T, cfg objects.Config) *env {
	t.Helper()
	e := &env{t: t, store: etcdtest.Start(t)}
	cfg.Storage, cfg.Registry, cfg.Log, cfg.Verify = e.store, registry.New(), quiet, true
	s, err := objects.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	res, ok := cfg.Registry.Get(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	if !ok {
		t.Fatal("configmaps not served")
	}
	e.s, e.res = s, res
	return e
}

func (e *env) req(verb, name string) *objects.Request {
	return &objects.Request{Verb: verb, Resource: e.res, Namespace: "ns", Name: name}
}

func (e *env) create(name, v string) {
	e.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": map[string]any{"v": v}}}
	u.SetNamespace("ns")
	u.SetName(name)
	if _, err := e.s.Create(context.Background(), e.req("create", ""), u, objects.WriteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) update(name, v string) {
	e.t.Helper()
	_, err := e.s.Update(context.Background(), e.req("update", name), objects.WriteOptions{}, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		unstructured.SetNestedField(cur.Object, v, "data", "v")
		return cur, nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) delete(name string) {
	e.t.Helper()
	if _, err := e.s.Delete(context.Background(), e.req("delete", name), &metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// watcher is the service as a mirror sees it, counting the mirror's lists
// and resumed watches. gate, if set, holds the first watch until closed;
// beforeResume, if set, runs once before the first resumed watch.
type watcher struct {
	mirror.Watcher
	gate         chan struct{}
	beforeResume func()

	mu             sync.Mutex
	lists, resumes int
}

func (w *watcher) Watch(ctx context.Context, req *objects.Request, opts objects.WatchOptions) (objects.Source, error) {
	if w.gate != nil {
		<-w.gate
	}
	w.mu.Lock()
	resume := opts.List.ResourceVersion != ""
	if resume {
		w.resumes++
	} else {
		w.lists++
	}
	before := w.beforeResume
	if resume {
		w.beforeResume = nil
	}
	w.mu.Unlock()
	if resume && before != nil {
		before()
	}
	return w.Watcher.Watch(ctx, req, opts)
}

func (w *watcher) counts() (lists, resumes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lists, w.resumes
}

// batches receives what a mirror applies, one batch per Apply, each
// change as "Added name=v".
type batches chan []string

func (b batches) apply(changes []mirror.Change[*corev1.ConfigMap]) {
	out := []string{}
	for _, c := range changes {
		out = append(out, fmt.Sprintf("%s %s=%s", c.Type, c.Value.Name, c.Value.Data["v"]))
	}
	b <- out
}

func (b batches) next(t *testing.T) []string {
	t.Helper()
	select {
	case got := <-b:
		return got
	case <-time.After(10 * time.Second):
		t.Fatal("nothing applied in 10 s")
		return nil
	}
}

func (b batches) want(t *testing.T, want ...string) {
	t.Helper()
	if got := b.next(t); !slices.Equal(got, want) {
		t.Fatalf("applied %q, want %q", got, want)
	}
}

// start runs a mirror of e's ConfigMaps through w until the test ends.
func start(t *testing.T, e *env, w *watcher, timeout time.Duration) (*mirror.Mirror[*corev1.ConfigMap], batches) {
	w.Watcher = e.s
	b := make(batches, 100)
	m := mirror.New(w, mirror.Config[*corev1.ConfigMap]{Resource: e.res, Decode: mirror.Convert[corev1.ConfigMap], Apply: b.apply, Log: quiet, Timeout: timeout})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return 5 s after its context ended")
		}
	})
	return m, b
}

func names(m *mirror.Mirror[*corev1.ConfigMap]) []string {
	var out []string
	for _, c := range m.List() {
		out = append(out, c.Name)
	}
	return out
}

func waitSynced(t *testing.T, m mirror.Runner) {
	t.Helper()
	select {
	case <-m.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("not synced after 10 s")
	}
}

// TestMirror: the first list is applied as one batch, then Synced is
// closed; the watch's events follow one by one, a deletion with the value
// the mirror had.
func TestMirror(t *testing.T) {
	e := newEnv(t, objects.Config{})
	e.create("b", "1")
	e.create("a", "1")
	w := &watcher{gate: make(chan struct{})}
	m, b := start(t, e, w, 0)

	time.Sleep(50 * time.Millisecond)
	select {
	case <-m.Synced():
		t.Fatal("synced before listing")
	default:
	}
	close(w.gate)
	b.want(t, "ADDED a=1", "ADDED b=1")
	waitSynced(t, m)
	if got := names(m); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("List: %q", got)
	}

	e.create("c", "1")
	b.want(t, "ADDED c=1")
	e.update("a", "2")
	b.want(t, "MODIFIED a=2")
	e.delete("b")
	b.want(t, "DELETED b=1")
	if got := names(m); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("List: %q", got)
	}
	if lists, resumes := w.counts(); lists != 1 || resumes != 0 {
		t.Fatalf("%d lists, %d resumed watches; want 1, 0", lists, resumes)
	}
}

// TestMirrorResumes: a watch that times out is resumed from the last
// revision it delivered, with no new list and no event lost or repeated.
func TestMirrorResumes(t *testing.T) {
	e := newEnv(t, objects.Config{})
	w := &watcher{}
	m, b := start(t, e, w, 300*time.Millisecond)
	b.want(t)
	waitSynced(t, m)
	const n = 12 // one every 100 ms: several watches time out meanwhile
	for i := range n {
		e.create(fmt.Sprint("cm-", i), "1")
		time.Sleep(100 * time.Millisecond)
	}
	for i := range n {
		b.want(t, fmt.Sprintf("ADDED cm-%d=1", i))
	}
	if lists, resumes := w.counts(); lists != 1 || resumes < 2 {
		t.Fatalf("%d lists, %d resumed watches; want 1, at least 2", lists, resumes)
	}
}

// TestMirrorRelistsAfterCompaction: a watch resumed at a compacted
// revision is refused (410), and the mirror lists again and applies what
// it missed: the difference between its copy and the new list.
func TestMirrorRelistsAfterCompaction(t *testing.T) {
	// Without the watch cache, whose history would serve the resumed
	// watch.
	e := newEnv(t, objects.Config{DisableWatchCache: true})
	e.create("a", "1")
	e.create("keep", "1")
	e.create("mod", "1")
	w := &watcher{}
	w.beforeResume = func() {
		e.delete("a")
		e.create("b", "1")
		e.update("mod", "2")
		ctx := context.Background()
		rev, err := e.store.Revision(ctx)
		if err == nil {
			err = e.store.Compact(ctx, rev)
		}
		if err != nil {
			t.Error(err)
		}
	}
	m, b := start(t, e, w, 300*time.Millisecond)
	b.want(t, "ADDED a=1", "ADDED keep=1", "ADDED mod=1")
	waitSynced(t, m)
	b.want(t, "DELETED a=1", "ADDED b=1", "MODIFIED mod=2") // keep is unchanged
	if got := names(m); !slices.Equal(got, []string{"b", "keep", "mod"}) {
		t.Fatalf("List: %q", got)
	}
	if lists, resumes := w.counts(); lists != 2 || resumes != 1 {
		t.Fatalf("%d lists, %d resumed watches; want 2, 1", lists, resumes)
	}
	// The relisted mirror watches on.
	e.create("c", "1")
	b.want(t, "ADDED c=1")
}

// failing refuses every watch.
type failing struct{}

func (failing) Watch(context.Context, *objects.Request, objects.WatchOptions) (objects.Source, error) {
	return nil, errors.New("no watch")
}

// TestRunAll: synced is called once every mirror is synced, and not at
// all when the context ends first; RunAll returns once its mirrors have
// stopped, a mirror waiting to retry a failed watch included.
func TestRunAll(t *testing.T) {
	e := newEnv(t, objects.Config{})
	run := func(ctx context.Context, ms ...mirror.Runner) (synced chan struct{}, done chan struct{}) {
		synced, done = make(chan struct{}, 2), make(chan struct{})
		go func() {
			defer close(done)
			mirror.RunAll(ctx, func() { synced <- struct{}{} }, ms...)
		}()
		return synced, done
	}
	newMirror := func(w mirror.Watcher) *mirror.Mirror[*corev1.ConfigMap] {
		return mirror.New(w, mirror.Config[*corev1.ConfigMap]{Resource: e.res, Decode: mirror.Convert[corev1.ConfigMap],
			Apply: func([]mirror.Change[*corev1.ConfigMap]) {}, Log: quiet})
	}

	gated := &watcher{Watcher: e.s, gate: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	synced, done := run(ctx, newMirror(e.s), newMirror(gated))
	select {
	case <-synced:
		t.Fatal("synced before every mirror was")
	case <-time.After(200 * time.Millisecond):
	}
	close(gated.gate)
	select {
	case <-synced:
	case <-time.After(10 * time.Second):
		t.Fatal("not synced after 10 s")
	}
	cancel()
	<-done
	if len(synced) != 0 {
		t.Fatal("synced called twice")
	}

	ctx, cancel = context.WithCancel(context.Background())
	synced, done = run(ctx, newMirror(e.s), newMirror(failing{}))
	time.Sleep(300 * time.Millisecond) // a few failed watches: in backoff
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("RunAll did not return 1 s after its context ended")
	}
	if len(synced) != 0 {
		t.Fatal("synced called though a mirror never listed")
	}
}

// A mirror whose watch times out inside a revision of several keys (a
// transaction of another etcd writer) applies the rest of that revision
// before it resumes after it: the resumed watch starts after the last
// revision delivered, and would never bring the rest.
func TestMirrorKeepsRevisionsWhole(t *testing.T) {
	// Watches of a few tens of milliseconds: many end while events come.
	// A watch served from etcd starts slower (under the race detector,
	// too slow for 20 ms to deliver anything).
	for _, c := range []struct {
		name    string
		cfg     objects.Config
		timeout time.Duration
	}{
		{"watch cache", objects.Config{}, 20 * time.Millisecond},
		{"etcd", objects.Config{DisableWatchCache: true}, 50 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) { mirrorRevisionsWhole(t, c.cfg, c.timeout) })
	}
}

func mirrorRevisionsWhole(t *testing.T, cfg objects.Config, timeout time.Duration) {
	e := newEnv(t, cfg)
	stopDrain := make(chan struct{})
	t.Cleanup(func() { close(stopDrain) }) // after the mirror's own cleanup has stopped it
	w := &watcher{}
	m, b := start(t, e, w, timeout)
	go func() {
		for {
			select {
			case <-b:
			case <-stopDrain:
				return
			}
		}
	}()
	waitSynced(t, m)
	const rounds, keys = 120, 20
	ctx := t.Context()
	for r := range rounds {
		var ops []clientv3.Op
		for k := range keys {
			name := fmt.Sprintf("r%02d-k%02d", r, k)
			// As the server encodes it (the service verifies that).
			v := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"creationTimestamp":"2026-12-05T00:00:00Z","name":%q,"namespace":"ns","uid":"u-%s"}}`, name, name)
			ops = append(ops, clientv3.OpPut(e.res.Key("ns", name), v))
		}
		if _, err := e.store.Client().Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(5+r%15) * time.Millisecond)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(m.List()) < rounds*keys && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(m.List()); n != rounds*keys {
		_, resumes := w.counts()
		t.Fatalf("the mirror holds %d of the %d objects 10 s after the last write (%d resumed watches)", n, rounds*keys, resumes)
	}
}
