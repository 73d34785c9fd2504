package watchcache_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
	"github.com/objwatch/objwatch/storage/watchcache"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

const prefix = "/registry/things/"

// value is the test's stored object: namespace/name come from the key.
type value struct {
	Labels map[string]string `json:"labels,omitempty"`
	Data   string            `json:"data"`
}

func decode(kv storage.KeyValue) (*watchcache.Object, error) {
	var v value
	if err := json.Unmarshal(kv.Value, &v); err != nil {
		return nil, err
	}
	ns, name, _ := strings.Cut(strings.TrimPrefix(kv.Key, prefix), "/")
	j, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": name, "namespace": ns, "resourceVersion": fmt.Sprint(kv.ModRevision)}, "data": v.Data})
	return &watchcache.Object{
		Key: kv.Key, Namespace: ns, Name: name, Labels: v.Labels, Rev: kv.ModRevision, JSON: j,
		Fields: fields.Set{"metadata.name": name, "metadata.namespace": ns},
	}, nil
}

type env struct {
	t     testing.TB
	store *etcd.Store
	ctx   context.Context
}

func setup(t testing.TB) *env {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return &env{t: t, store: etcdtest.Start(t), ctx: ctx}
}

func (e *env) cache(cfg watchcache.Config) *watchcache.Cache {
	cfg.Store, cfg.Prefix, cfg.Decode = e.store, prefix, decode
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	c := watchcache.New(cfg)
	c.Start()
	e.t.Cleanup(c.Stop)
	return c
}

func (e *env) put(ns, name, data string, lbls map[string]string) int64 {
	e.t.Helper()
	b, _ := json.Marshal(value{Labels: lbls, Data: data})
	key := prefix + ns + "/" + name
	cur, err := e.store.Get(e.ctx, key)
	var kv storage.KeyValue
	switch {
	case errors.Is(err, storage.ErrNotFound):
		kv, err = e.store.Create(e.ctx, key, b)
	case err == nil:
		kv, err = e.store.Update(e.ctx, key, b, cur.ModRevision)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return kv.ModRevision
}

func (e *env) del(ns, name string) int64 {
	e.t.Helper()
	kv, err := e.store.Delete(e.ctx, prefix+ns+"/"+name, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return kv.ModRevision
}

func next(t *testing.T, w *watchcache.Watcher) watchcache.Item {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	it, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return it
}

func TestListIsFreshAndFiltered(t *testing.T) {
	e := setup(t)
	e.put("a", "one", "1", map[string]string{"app": "x"})
	c := e.cache(watchcache.Config{})
	e.put("a", "two", "2", map[string]string{"app": "y"})
	rev := e.put("b", "three", "3", map[string]string{"app": "x"})
	fresh, err := c.WaitFresh(e.ctx)
	if err != nil || fresh < rev {
		t.Fatalf("WaitFresh = %d, %v; want >= %d", fresh, err, rev)
	}
	tests := []struct {
		name   string
		filter watchcache.Filter
		want   string
	}{
		{"all", watchcache.Filter{}, "one,two,three"},
		{"namespace", watchcache.Filter{Namespace: "a"}, "one,two"},
		{"label", watchcache.Filter{Labels: labels.SelectorFromSet(labels.Set{"app": "x"})}, "one,three"},
		{"field", watchcache.Filter{Fields: fields.OneTermEqualSelector("metadata.name", "two")}, "two"},
		{"nothing", watchcache.Filter{Labels: labels.SelectorFromSet(labels.Set{"app": "none"})}, ""},
	}
	for _, tc := range tests {
		objs, _, _, err := c.List(tc.filter, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, o := range objs {
			names = append(names, o.Name)
		}
		if got := strings.Join(names, ","); got != tc.want {
			t.Errorf("%s: List = %q, want %q", tc.name, got, tc.want)
		}
	}
	// Relabelling and deleting keep the label index exact.
	e.put("a", "one", "1b", map[string]string{"app": "y"})
	last := e.del("b", "three")
	if err := c.WaitFor(e.ctx, last); err != nil {
		t.Fatal(err)
	}
	for sel, want := range map[string]string{"app=x": "", "app=y": "one,two", "app in (x,y)": "one,two", "app=y,app!=z": "one,two", "!app": ""} {
		ls, err := labels.Parse(sel)
		if err != nil {
			t.Fatal(err)
		}
		objs, _, _, _ := c.List(watchcache.Filter{Labels: ls}, "", 0)
		var names []string
		for _, o := range objs {
			names = append(names, o.Name)
		}
		if got := strings.Join(names, ","); got != want {
			t.Errorf("after relabel: List(%s) = %q, want %q", sel, got, want)
		}
	}
	page, _, more, _ := c.List(watchcache.Filter{}, "", 1)
	if len(page) != 1 || !more {
		t.Fatalf("List(limit 1) = %d more=%v, want 1 true", len(page), more)
	}
}

func TestWatchReplaysFiltersAndFollows(t *testing.T) {
	e := setup(t)
	c := e.cache(watchcache.Config{})
	// The cache's history must start before the first write, which the
	// watch replays: let its initial list finish first.
	if err := c.WaitFor(e.ctx, 0); err != nil {
		t.Fatal(err)
	}
	r1 := e.put("a", "o", "1", map[string]string{"app": "x"})
	if err := c.WaitFor(e.ctx, r1); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(e.ctx, watchcache.WatchOptions{From: r1 - 1, Filter: watchcache.Filter{Labels: labels.SelectorFromSet(labels.Set{"app": "x"})}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	r2 := e.put("a", "o", "2", map[string]string{"app": "x"})
	r3 := e.put("a", "o", "3", map[string]string{"app": "y"}) // leaves the selection
	e.put("a", "o", "4", map[string]string{"app": "y"})       // outside: nothing
	r5 := e.put("a", "o", "5", map[string]string{"app": "x"}) // enters again
	r6 := e.del("a", "o")
	want := []struct {
		typ  string
		rev  int64
		data string
	}{
		{"ADDED", r1, "1"}, {"MODIFIED", r2, "2"}, {"DELETED", r3, "2"}, {"ADDED", r5, "5"}, {"DELETED", r6, "5"},
	}
	for i, wnt := range want {
		it := next(t, w)
		var got struct {
			Data     string
			Metadata struct{ ResourceVersion string }
		}
		frame := it.Frame()
		var ev struct {
			Type       string
			Object     json.RawMessage
			CommitTime time.Time
		}
		if err := json.Unmarshal(frame, &ev); err != nil {
			t.Fatalf("frame %q: %v", frame, err)
		}
		if time.Since(ev.CommitTime) > time.Minute {
			t.Fatalf("frame %s: commitTime %v, want a recent time", frame, ev.CommitTime)
		}
		json.Unmarshal(ev.Object, &got)
		if it.Type != wnt.typ || it.Rev != wnt.rev || ev.Type != wnt.typ || got.Data != wnt.data || got.Metadata.ResourceVersion != fmt.Sprint(wnt.rev) {
			t.Fatalf("event %d = %s@%d %s (rv %s), want %s@%d %s", i, it.Type, it.Rev, got.Data, got.Metadata.ResourceVersion, wnt.typ, wnt.rev, wnt.data)
		}
	}
}

func TestInitialEventsAndBookmarks(t *testing.T) {
	e := setup(t)
	e.put("a", "x", "1", nil)
	e.put("b", "y", "1", nil)
	c := e.cache(watchcache.Config{})
	if _, err := c.WaitFresh(e.ctx); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(e.ctx, watchcache.WatchOptions{Initial: true, InitialEnd: true, Filter: watchcache.Filter{Namespace: "a"}, BookmarkEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if it := next(t, w); it.Type != "ADDED" || it.Object.Name != "x" || strings.Contains(string(it.Frame()), "commitTime") {
		t.Fatalf("first = %s %s, want ADDED x without commitTime", it.Type, it.Frame())
	}
	end := next(t, w)
	if end.Type != "BOOKMARK" || !end.InitialEnd || end.Rev != c.Revision() {
		t.Fatalf("second = %+v, want the initial-events-end bookmark at %d", end, c.Revision())
	}
	r := e.put("a", "z", "1", nil)
	if it := next(t, w); it.Type != "ADDED" || it.Rev != r {
		t.Fatalf("live = %s@%d, want ADDED@%d", it.Type, it.Rev, r)
	}
	if it := next(t, w); it.Type != "BOOKMARK" || it.Rev < r {
		t.Fatalf("after a second = %s@%d, want BOOKMARK >= %d", it.Type, it.Rev, r)
	}
}

func TestSlowWatcherEndsWithoutBlockingOthers(t *testing.T) {
	e := setup(t)
	c := e.cache(watchcache.Config{Buffer: 4})
	if _, err := c.WaitFresh(e.ctx); err != nil {
		t.Fatal(err)
	}
	slow, _ := c.Watch(e.ctx, watchcache.WatchOptions{From: c.Revision()})
	defer slow.Stop()
	fast, _ := c.Watch(e.ctx, watchcache.WatchOptions{From: c.Revision()})
	defer fast.Stop()
	var last int64
	for i := range 10 {
		last = e.put("a", fmt.Sprint(i), "v", nil)
		if it := next(t, fast); it.Rev != last {
			t.Fatalf("fast watcher got %d, want %d", it.Rev, last)
		}
	}
	// The ended watcher's queue is dropped, not kept for a client that may
	// never read again: it delivers nothing more, only the reason.
	if n := slow.Pending(); n != 0 {
		t.Fatalf("slow watcher Pending() = %d after it ended, want 0", n)
	}
	if it, err := slow.Next(e.ctx); !errors.Is(err, watchcache.ErrTooSlow) {
		t.Fatalf("slow watcher Next() = %s@%d, %v, want ErrTooSlow", it.Type, it.Rev, err)
	}
}

// MaxQueued: four watchers that stop reading share 8 queued events; past
// that, each is ended once it holds its share (2), while the one that
// reads goes on, though each slow one alone is far below its Buffer.
func TestMaxQueuedEndsWatchersOverTheirShare(t *testing.T) {
	e := setup(t)
	c := e.cache(watchcache.Config{Buffer: 1000, MaxQueued: 8, MinShare: 1})
	if _, err := c.WaitFresh(e.ctx); err != nil {
		t.Fatal(err)
	}
	var slows []*watchcache.Watcher
	for range 4 {
		w, _ := c.Watch(e.ctx, watchcache.WatchOptions{From: c.Revision()})
		defer w.Stop()
		slows = append(slows, w)
	}
	fast, _ := c.Watch(e.ctx, watchcache.WatchOptions{From: c.Revision()})
	defer fast.Stop()
	for i := range 10 {
		last := e.put("a", fmt.Sprint(i), "v", nil)
		if it := next(t, fast); it.Rev != last {
			t.Fatalf("fast watcher got %d, want %d", it.Rev, last)
		}
	}
	for i, w := range slows {
		if n := w.Pending(); n != 0 {
			t.Errorf("slow watcher %d: Pending() = %d, want 0 (ended, queue dropped)", i, n)
		}
		if _, err := w.Next(e.ctx); !errors.Is(err, watchcache.ErrTooSlow) {
			t.Errorf("slow watcher %d: Next() error %v, want ErrTooSlow", i, err)
		}
	}
	// Without the bound, the same watchers would still be queued.
	c2 := e.cache(watchcache.Config{Buffer: 1000})
	if _, err := c2.WaitFresh(e.ctx); err != nil {
		t.Fatal(err)
	}
	w2, _ := c2.Watch(e.ctx, watchcache.WatchOptions{From: c2.Revision()})
	defer w2.Stop()
	var last int64
	for i := range 10 {
		last = e.put("a", fmt.Sprint(i), "w", nil)
	}
	if err := c2.WaitFor(e.ctx, last); err != nil {
		t.Fatal(err)
	}
	if n := w2.Pending(); n != 10 {
		t.Errorf("unbounded cache: slow watcher Pending() = %d, want 10", n)
	}
}

func TestHistoryWindow(t *testing.T) {
	e := setup(t)
	c := e.cache(watchcache.Config{MaxHistory: 3})
	// The window is counted from the initial list: let it finish before
	// the writes (it raced, failing under -count and load).
	if err := c.WaitFor(e.ctx, 0); err != nil {
		t.Fatal(err)
	}
	first := e.put("a", "o", "0", nil)
	var last int64
	for i := range 6 {
		last = e.put("a", "o", fmt.Sprint(i+1), nil)
	}
	if err := c.WaitFor(e.ctx, last); err != nil {
		t.Fatal(err)
	}
	_, err := c.Watch(e.ctx, watchcache.WatchOptions{From: first})
	var ce *storage.CompactedError
	if !errors.As(err, &ce) || !errors.Is(err, storage.ErrCompacted) {
		t.Fatalf("Watch(from evicted) = %v, want a CompactedError", err)
	}
	w, err := c.Watch(e.ctx, watchcache.WatchOptions{From: last - 2})
	if err != nil {
		t.Fatalf("Watch(within window) = %v", err)
	}
	defer w.Stop()
	if it := next(t, w); it.Rev != last-1 {
		t.Fatalf("resumed at %d, want %d", it.Rev, last-1)
	}
}

// Ready is false until the cache has loaded its initial list.
func TestReady(t *testing.T) {
	e := setup(t)
	e.put("a", "one", "1", nil)
	cfg := watchcache.Config{Store: e.store, Prefix: prefix, Decode: decode, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	c := watchcache.New(cfg)
	if c.Ready() {
		t.Fatal("Ready before Start")
	}
	c.Start()
	t.Cleanup(c.Stop)
	if err := c.WaitFor(e.ctx, 0); err != nil {
		t.Fatal(err)
	}
	if !c.Ready() {
		t.Fatal("not Ready after the initial list")
	}
}

// bareDeletes is the etcd store with deletions delivered as etcd sends
// them once it has compacted the deleted object's last value: the key and
// revision only (storage/etcd's watcher.event without a PrevKv).
type bareDeletes struct{ *etcd.Store }

func (b bareDeletes) Watch(ctx context.Context, prefix string, from int64) (storage.Watcher, error) {
	w, err := b.Store.Watch(ctx, prefix, from)
	if err != nil {
		return nil, err
	}
	out := make(chan storage.Event)
	bw := &bareWatcher{Watcher: w, out: out, done: make(chan struct{})}
	go func() { // ends with w's events (Stop)
		defer close(bw.done)
		defer close(out)
		for ev := range w.Events() {
			if ev.Type == storage.Delete {
				ev.KV = storage.KeyValue{Key: ev.KV.Key, ModRevision: ev.KV.ModRevision}
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return bw, nil
}

type bareWatcher struct {
	storage.Watcher
	out  chan storage.Event
	done chan struct{}
}

func (w *bareWatcher) Events() <-chan storage.Event { return w.out }
func (w *bareWatcher) Stop()                        { w.Watcher.Stop(); <-w.done }

// A deletion whose last value etcd no longer had reaches watchers as a
// DELETED of the cache's own copy at the deletion's revision, and leaves
// the cache (it was dropped as undecodable, and the object stayed).
func TestDeletionWithoutItsLastValue(t *testing.T) {
	e := setup(t)
	cfg := watchcache.Config{Store: bareDeletes{e.store}, Prefix: prefix, Decode: decode, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	c := watchcache.New(cfg)
	c.Start()
	t.Cleanup(c.Stop)
	created := e.put("a", "gone", "v", map[string]string{"app": "x"})
	if err := c.WaitFor(e.ctx, created); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(e.ctx, watchcache.WatchOptions{From: created, Filter: watchcache.Filter{Labels: labels.SelectorFromSet(labels.Set{"app": "x"})}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	kv, err := e.store.Delete(e.ctx, prefix+"a/gone", 0)
	if err != nil {
		t.Fatal(err)
	}
	it := next(t, w)
	if it.Type != "DELETED" || it.Rev != kv.ModRevision || it.Object == nil || it.Object.Name != "gone" {
		t.Fatalf("event = %s@%d %+v, want DELETED of gone at %d", it.Type, it.Rev, it.Object, kv.ModRevision)
	}
	if !bytes.Contains(it.Object.JSON, []byte(`"resourceVersion":"`+strconv.FormatInt(kv.ModRevision, 10)+`"`)) {
		t.Errorf("DELETED object %s, want resourceVersion %d", it.Object.JSON, kv.ModRevision)
	}
	if err := c.WaitFor(e.ctx, kv.ModRevision); err != nil {
		t.Fatal(err)
	}
	if n := c.Len(); n != 0 {
		t.Errorf("cache holds %d objects after the deletion, want 0", n)
	}
}

// TestWatchersByNamespace: with watchers indexed by namespace, an event
// reaches the watchers of its namespace and of all namespaces, and no
// other; a stopped watcher leaves the index.
func TestWatchersByNamespace(t *testing.T) {
	e := setup(t)
	c := e.cache(watchcache.Config{})
	if _, err := c.WaitFresh(e.ctx); err != nil {
		t.Fatal(err)
	}
	watch := func(ns string) *watchcache.Watcher {
		w, err := c.Watch(e.ctx, watchcache.WatchOptions{From: c.Revision(), Filter: watchcache.Filter{Namespace: ns}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		return w
	}
	a, b, all, a2 := watch("a"), watch("b"), watch(""), watch("a")
	if got := c.InterestedWatchers("a"); got != 3 {
		t.Errorf("interested in a: %d, want 3", got)
	}
	ra := e.put("a", "x", "1", nil)
	rb := e.put("b", "y", "1", nil)
	for _, w := range []*watchcache.Watcher{a, a2} {
		if it := next(t, w); it.Rev != ra || it.Object.Name != "x" {
			t.Errorf("a's watcher got %s@%d, want x@%d", it.Object.Name, it.Rev, ra)
		}
	}
	if it := next(t, b); it.Rev != rb || it.Object.Name != "y" {
		t.Errorf("b's watcher got %s@%d, want y@%d", it.Object.Name, it.Rev, rb)
	}
	for _, want := range []int64{ra, rb} {
		if it := next(t, all); it.Rev != want {
			t.Errorf("the all-namespaces watcher got @%d, want @%d", it.Rev, want)
		}
	}
	if err := c.WaitFor(e.ctx, rb); err != nil {
		t.Fatal(err)
	}
	for name, w := range map[string]*watchcache.Watcher{"a": a, "a2": a2, "b": b, "all": all} {
		if n := w.Pending(); n != 0 {
			t.Errorf("watcher %s has %d more items, want none", name, n)
		}
	}
	a2.Stop()
	b.Stop()
	if got, gotB := c.InterestedWatchers("a"), c.InterestedWatchers("b"); got != 2 || gotB != 1 {
		t.Errorf("after stops, interested in a: %d (want 2), in b: %d (want 1)", got, gotB)
	}
}
