package watchcache_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
	"github.com/objwatch/objwatch/storage/watchcache/cachefile"
)

// savedEnv is a store with objects, a file to save a cache in, and the
// number of values decoded since the last restart.
type savedEnv struct {
	*env
	file    *cachefile.File
	decoded atomic.Int64
}

func newSavedEnv(t *testing.T, n int) *savedEnv {
	e := &savedEnv{env: setup(t)}
	e.file = &cachefile.File{Path: filepath.Join(t.TempDir(), "things.cache"), Prefix: prefix, Fingerprint: "test"}
	for i := range n {
		e.put(fmt.Sprintf("ns%d", i%3), fmt.Sprintf("obj-%04d", i), fmt.Sprint(i), map[string]string{"app": fmt.Sprint(i % 2)})
	}
	return e
}

// start starts a cache saving to e's file and waits until it is fresh.
func (e *savedEnv) start(t *testing.T) *watchcache.Cache {
	t.Helper()
	e.decoded.Store(0)
	c := watchcache.New(watchcache.Config{Store: e.store, Prefix: prefix, Log: quietLog, Saved: e.file,
		Decode: func(kv storage.KeyValue) (*watchcache.Object, error) { e.decoded.Add(1); return decode(kv) }})
	c.Start()
	t.Cleanup(c.Stop)
	if _, err := c.WaitFresh(e.ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// stop stops c and saves its state, as a server does when it stops.
func (e *savedEnv) stop(t *testing.T, c *watchcache.Cache) int64 {
	t.Helper()
	c.Stop()
	if err := c.Save(); err != nil {
		t.Fatal(err)
	}
	return c.Revision()
}

// same fails unless c lists what a cache freshly listed from the store
// lists, byte for byte.
func (e *savedEnv) same(t *testing.T, c *watchcache.Cache) {
	t.Helper()
	fresh := e.cache(watchcache.Config{})
	rev, err := fresh.WaitFresh(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitFor(e.ctx, rev); err != nil {
		t.Fatal(err)
	}
	want, _, _, _ := fresh.List(watchcache.Filter{}, "", 0)
	got, _, _, err := c.List(watchcache.Filter{}, "", 0)
	if err != nil || len(got) != len(want) {
		t.Fatalf("List = %d objects, %v; want %d", len(got), err, len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Key != w.Key || g.Rev != w.Rev || !bytes.Equal(g.JSON, w.JSON) || g.Namespace != w.Namespace || g.Name != w.Name ||
			!g.Labels.AsSelector().Matches(w.Labels) || len(g.Labels) != len(w.Labels) || !g.Fields.AsSelector().Matches(w.Fields) {
			t.Fatalf("object %d = %+v, want %+v", i, g, w)
		}
	}
}

// TestStartFromSavedState: a cache stopped and saved starts again from
// its file, decoding only the events written meanwhile (none of the
// saved objects), is then the same as a fresh list, follows later writes,
// and serves a watch from the saved revision with exactly the events
// after it.
func TestStartFromSavedState(t *testing.T) {
	const n = 300
	e := newSavedEnv(t, n)
	saved := e.stop(t, e.start(t))

	upd := e.put("ns0", "obj-0000", "changed", map[string]string{"app": "z"})
	add := e.put("ns1", "new", "new", nil)
	del := e.del("ns2", "obj-0002")

	c := e.start(t)
	from, events, ok := c.Resumed()
	if !ok || from != saved || events != 3 {
		t.Fatalf("Resumed = %d, %d events, %v; want from %d with 3 events", from, events, ok, saved)
	}
	if got := e.decoded.Load(); got != 2 {
		t.Errorf("decoded %d values at start, want 2 (the puts written while stopped; the deletion comes without a value), none of the saved objects", got)
	}
	later := e.put("ns1", "later", "later", nil)
	e.same(t, c)

	w, err := c.Watch(e.ctx, watchcache.WatchOptions{From: saved})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, want := range []struct {
		typ string
		rev int64
	}{{"MODIFIED", upd}, {"ADDED", add}, {"DELETED", del}, {"ADDED", later}} {
		if it := next(t, w); it.Type != want.typ || it.Rev != want.rev {
			t.Fatalf("watch from %d: %s at %d, want %s at %d", saved, it.Type, it.Rev, want.typ, want.rev)
		}
	}
}

// TestSavedStateNotUsable: the cache lists the store, and ends up the
// same as a fresh list, when the file cannot be used: the store compacted
// past its revision (the file is then removed), it is damaged, made for
// another fingerprint, or newer than the store (another store's).
func TestSavedStateNotUsable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spoil   func(t *testing.T, e *savedEnv)
		removed bool
	}{
		{"compacted", func(t *testing.T, e *savedEnv) {
			rev := e.put("ns0", "obj-0001", "changed", nil)
			e.put("ns0", "obj-0001", "changed again", nil)
			if err := e.store.Compact(e.ctx, rev+1); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"damaged", func(t *testing.T, e *savedEnv) {
			b, err := os.ReadFile(e.file.Path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 1
			if err := os.WriteFile(e.file.Path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			e.put("ns1", "new", "new", nil)
		}, false},
		{"fingerprint", func(t *testing.T, e *savedEnv) {
			e.file.Fingerprint = "another binary"
		}, false},
		{"newer than the store", func(t *testing.T, e *savedEnv) {
			c := watchcache.New(watchcache.Config{Store: e.store, Prefix: prefix, Decode: decode, Log: quietLog})
			c.Start()
			defer c.Stop()
			if _, err := c.WaitFresh(e.ctx); err != nil {
				t.Fatal(err)
			}
			objs, rev, _, _ := c.List(watchcache.Filter{}, "", 0)
			if _, err := e.file.Save(rev+1000, slices.Values(objs[1:])); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSavedEnv(t, 50)
			e.stop(t, e.start(t))
			tc.spoil(t, e)
			c := e.start(t)
			if from, _, ok := c.Resumed(); ok {
				t.Fatalf("started from the saved state at %d", from)
			}
			if got := e.decoded.Load(); got < 50 {
				t.Errorf("decoded %d values, want every object's (listed)", got)
			}
			e.same(t, c)
			if _, err := os.Stat(e.file.Path); errors.Is(err, os.ErrNotExist) != tc.removed {
				t.Errorf("file after start: %v; want removed %v", err, tc.removed)
			}
		})
	}
}

// TestSaveSkipsUnchanged: a save when nothing changed since the last one
// writes nothing; when only the revision moved (writes elsewhere in the
// store), it advances the saved revision without rewriting the objects,
// and the next start resumes from that revision.
func TestSaveSkipsUnchanged(t *testing.T) {
	e := newSavedEnv(t, 10)
	c := e.start(t)
	if err := c.Save(); err != nil {
		t.Fatal(err)
	}
	st1, err := os.Stat(e.file.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.file.Path, 0o400); err != nil { // a rewrite would replace it
		t.Fatal(err)
	}
	unchanged := func(what string) {
		t.Helper()
		if st2, err := os.Stat(e.file.Path); err != nil || st2.Mode() != 0o400 || st2.ModTime() != st1.ModTime() {
			t.Fatalf("objects rewritten by a save %s: %v %v", what, st2.Mode(), err)
		}
	}
	if err := c.Save(); err != nil {
		t.Fatal(err)
	}
	unchanged("with nothing changed")

	other, err := e.store.Create(e.ctx, "/registry/others/x", []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitFor(e.ctx, other.ModRevision); err != nil { // a progress notification
		t.Fatal(err)
	}
	if err := c.Save(); err != nil {
		t.Fatal(err)
	}
	unchanged("with only the revision moved")
	c.Stop()
	c = e.start(t)
	if from, events, ok := c.Resumed(); !ok || from < other.ModRevision || events != 0 {
		t.Fatalf("Resumed = %d, %d events, %v; want from %d or later, no event", from, events, ok, other.ModRevision)
	}
}

// busyStore is a store whose Revision fails until a moment, as a guarded
// store refuses while etcd is too busy to answer its probes.
type busyStore struct {
	storage.Interface
	until time.Time
	fails atomic.Int32
}

func (s *busyStore) Revision(ctx context.Context) (int64, error) {
	if time.Now().Before(s.until) {
		s.fails.Add(1)
		return 0, fmt.Errorf("%w: no answer for 4s", storage.ErrUnavailable)
	}
	return s.Interface.Revision(ctx)
}

// TestSavedStateKeptWhileStoreBusy: a store that cannot tell its revision
// just after the saved state is loaded is asked again; the cache starts
// from the state instead of listing every object (decoding none of them).
func TestSavedStateKeptWhileStoreBusy(t *testing.T) {
	e := newSavedEnv(t, 50)
	saved := e.stop(t, e.start(t))
	flaky := &busyStore{Interface: e.store, until: time.Now().Add(500 * time.Millisecond)}
	e.decoded.Store(0)
	c := watchcache.New(watchcache.Config{Store: flaky, Prefix: prefix, Log: quietLog, Saved: e.file,
		Decode: func(kv storage.KeyValue) (*watchcache.Object, error) { e.decoded.Add(1); return decode(kv) }})
	c.Start()
	t.Cleanup(c.Stop)
	for { // WaitFresh reads the store's revision too: it fails while the store does
		_, err := c.WaitFresh(e.ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, storage.ErrUnavailable) {
			t.Fatal(err)
		}
	}
	if from, _, ok := c.Resumed(); !ok || from != saved {
		t.Fatalf("Resumed = %d, %v; want from the saved state at %d", from, ok, saved)
	}
	if flaky.fails.Load() == 0 {
		t.Fatal("the store's Revision never failed")
	}
	if got := e.decoded.Load(); got != 0 {
		t.Errorf("decoded %d values, want none (the saved state used)", got)
	}
	e.same(t, c)
}

// TestSavedStateObjectsKeepEncodings: the objects of a cache started
// from its saved state keep their encodings within its budget like
// listed ones, and give them back when it stops.
func TestSavedStateObjectsKeepEncodings(t *testing.T) {
	e := newSavedEnv(t, 30)
	e.stop(t, e.start(t))
	budget := watchcache.NewBudget(1 << 20)
	c := watchcache.New(watchcache.Config{Store: e.store, Prefix: prefix, Log: quietLog, Saved: e.file, Decode: decode, Encodings: budget})
	c.Start()
	t.Cleanup(c.Stop)
	if _, err := c.WaitFresh(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := c.Resumed(); !ok {
		t.Fatal("the cache did not start from its saved state")
	}
	objs, made := encodeAll(t, c, "upper")
	if _, again := encodeAll(t, c, "upper"); made != len(objs) || again != 0 {
		t.Fatalf("encoded %d then %d of %d objects, want each once", made, again, len(objs))
	}
	if used, kept := budget.Used(), keptBytes(t, c); used == 0 || used != kept {
		t.Fatalf("budget used %d, objects keep %d: want equal, not 0", used, kept)
	}
	c.Stop()
	if used := budget.Used(); used != 0 {
		t.Fatalf("budget used %d after Stop, want 0", used)
	}
}
