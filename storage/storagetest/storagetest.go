// Package storagetest is the conformance suite for storage.Interface. Every
// implementation, and every layer in front of one, runs it:
//
//	func TestConformance(t *testing.T) {
//		storagetest.Run(t, func(t *testing.T) storage.Interface { return newStore(t) })
//	}
//
// Each subtest gets a fresh key prefix, so one store may serve all of them.
package storagetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/objwatch/objwatch/storage"
)

// Run runs the whole suite against the stores newStore returns.
func Run(t *testing.T, newStore func(t *testing.T) storage.Interface) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s storage.Interface, prefix string)
	}{
		{"CRUD", testCRUD},
		{"OptimisticConcurrency", testConflicts},
		{"ListAtRevision", testListAtRevision},
		{"Pagination", testPagination},
		{"WatchFromRevision", testWatchFromRevision},
		{"WatchAtomicTransactions", testWatchDeletePrefix},
		{"WatchProgress", testWatchProgress},
		{"Compaction", testCompaction},
		{"CompactedRevision", testCompacted},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					f, ok := r.(failure)
					if !ok {
						panic(r)
					}
					t.Fatalf("unexpected error: %v", f.err)
				}
			}()
			tc.fn(t, newStore(t), fmt.Sprintf("/storagetest/%d-%d/", time.Now().UnixNano(), i))
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// failure carries an unexpected error from must to the subtest's recover.
type failure struct{ err error }

// must returns v, or fails the running subtest if err is not nil. It may
// only be called from the subtest's own goroutine.
func must[T any](v T, err error) T {
	if err != nil {
		panic(failure{err})
	}
	return v
}

func wantErr(t *testing.T, op string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s error = %v, want %v", op, err, want)
	}
}

func testCRUD(t *testing.T, s storage.Interface, p string) {
	c := ctx(t)
	_, err := s.Get(c, p+"a")
	wantErr(t, "Get(missing)", err, storage.ErrNotFound)

	created := must(s.Create(c, p+"a", []byte("one")))
	if created.CreateRevision != created.ModRevision || created.ModRevision == 0 {
		t.Fatalf("Create revisions = %d/%d, want equal and > 0", created.CreateRevision, created.ModRevision)
	}
	_, err = s.Create(c, p+"a", []byte("again"))
	wantErr(t, "Create(existing)", err, storage.ErrExists)

	got := must(s.Get(c, p+"a"))
	if string(got.Value) != "one" || got.ModRevision != created.ModRevision {
		t.Fatalf("Get = %q@%d, want %q@%d", got.Value, got.ModRevision, "one", created.ModRevision)
	}
	updated := must(s.Update(c, p+"a", []byte("two"), got.ModRevision))
	if updated.ModRevision <= created.ModRevision || updated.CreateRevision != created.CreateRevision {
		t.Fatalf("Update revisions = %d/%d after create %d", updated.CreateRevision, updated.ModRevision, created.ModRevision)
	}
	if n := must(s.Count(c, p)); n != 1 {
		t.Fatalf("Count = %d, want 1", n)
	}
	deleted := must(s.Delete(c, p+"a", updated.ModRevision))
	if string(deleted.Value) != "two" || deleted.ModRevision <= updated.ModRevision {
		t.Fatalf("Delete = %q@%d, want %q after %d", deleted.Value, deleted.ModRevision, "two", updated.ModRevision)
	}
	_, err = s.Get(c, p+"a")
	wantErr(t, "Get(deleted)", err, storage.ErrNotFound)
	_, err = s.Delete(c, p+"a", 0)
	wantErr(t, "Delete(deleted)", err, storage.ErrNotFound)
	_, err = s.Update(c, p+"a", []byte("x"), updated.ModRevision)
	wantErr(t, "Update(deleted)", err, storage.ErrNotFound)
}

// wantCurrent checks that a conflict carries the key's current state.
func wantCurrent(t *testing.T, what string, err error, want storage.KeyValue) {
	t.Helper()
	var ce *storage.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("%s: %v is not a *storage.ConflictError", what, err)
	}
	if got := ce.Current; got.Key != want.Key || string(got.Value) != string(want.Value) || got.ModRevision != want.ModRevision || got.CreateRevision != want.CreateRevision {
		t.Fatalf("%s: current %q@%d (created %d), want %q@%d (created %d)", what, got.Value, got.ModRevision, got.CreateRevision, want.Value, want.ModRevision, want.CreateRevision)
	}
}

func testConflicts(t *testing.T, s storage.Interface, p string) {
	c := ctx(t)
	v1 := must(s.Create(c, p+"a", []byte("1")))
	v2 := must(s.Update(c, p+"a", []byte("2"), v1.ModRevision))
	_, err := s.Update(c, p+"a", []byte("stale"), v1.ModRevision)
	wantErr(t, "Update(stale)", err, storage.ErrConflict)
	wantCurrent(t, "Update(stale)", err, v2)
	_, err = s.Delete(c, p+"a", v1.ModRevision)
	wantErr(t, "Delete(stale)", err, storage.ErrConflict)
	wantCurrent(t, "Delete(stale)", err, v2)
	if got := must(s.Get(c, p+"a")); string(got.Value) != "2" || got.ModRevision != v2.ModRevision {
		t.Fatalf("after failed writes Get = %q@%d, want %q@%d", got.Value, got.ModRevision, "2", v2.ModRevision)
	}

	// Concurrent read-modify-write loops never lose an increment.
	const workers, each = 4, 10
	must(s.Create(c, p+"counter", []byte("0")))
	errs := make(chan error, workers)
	for range workers {
		go func() {
			for range each {
				for {
					cur, err := s.Get(c, p+"counter")
					if err != nil {
						errs <- err
						return
					}
					var n int
					fmt.Sscan(string(cur.Value), &n)
					_, err = s.Update(c, p+"counter", []byte(fmt.Sprint(n+1)), cur.ModRevision)
					if err == nil {
						break
					}
					if !errors.Is(err, storage.ErrConflict) {
						errs <- err
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatalf("counter worker: %v", err)
		}
	}
	if got := must(s.Get(c, p+"counter")); string(got.Value) != fmt.Sprint(workers*each) {
		t.Fatalf("counter = %s, want %d", got.Value, workers*each)
	}
}

func testListAtRevision(t *testing.T, s storage.Interface, p string) {
	c := ctx(t)
	a := must(s.Create(c, p+"a", []byte("a1")))
	must(s.Create(c, p+"b", []byte("b1")))
	mid := must(s.List(c, p, storage.ListOptions{}))
	must(s.Update(c, p+"a", []byte("a2"), a.ModRevision))
	must(s.Create(c, p+"c", []byte("c1")))
	must(s.Create(c, p+"other/", []byte("x"))) // same prefix, listed too
	must(s.Create(c, p[:len(p)-1]+"x", []byte("outside")))

	old := must(s.List(c, p, storage.ListOptions{Revision: mid.Revision}))
	if got := values(old.KVs); got != "a1,b1" || old.Revision != mid.Revision {
		t.Fatalf("List@%d = %s@%d, want a1,b1@%d", mid.Revision, got, old.Revision, mid.Revision)
	}
	now := must(s.List(c, p, storage.ListOptions{}))
	if got := values(now.KVs); got != "a2,b1,c1,x" || now.Revision <= mid.Revision {
		t.Fatalf("List = %s@%d, want a2,b1,c1,x after %d", got, now.Revision, mid.Revision)
	}
	_, err := s.List(c, p, storage.ListOptions{Revision: now.Revision + 1000})
	wantErr(t, "List(future)", err, storage.ErrFutureRevision)
}

func values(kvs []storage.KeyValue) string {
	out := ""
	for i, kv := range kvs {
		if i > 0 {
			out += ","
		}
		out += string(kv.Value)
	}
	return out
}

func testPagination(t *testing.T, s storage.Interface, p string) {
	c := ctx(t)
	for i := range 7 {
		must(s.Create(c, fmt.Sprintf("%s%02d", p, i), []byte(fmt.Sprint(i))))
	}
	first := must(s.List(c, p, storage.ListOptions{Limit: 3}))
	if got := values(first.KVs); got != "0,1,2" || !first.More || first.Remaining != 4 {
		t.Fatalf("page 1 = %s more=%v remaining=%d, want 0,1,2 true 4", got, first.More, first.Remaining)
	}
	// A write between pages must not show up when reading at the first page's revision.
	must(s.Create(c, p+"03a", []byte("new")))
	var all []storage.KeyValue
	all = append(all, first.KVs...)
	next := first.KVs[len(first.KVs)-1].Key + "\x00"
	for {
		page := must(s.List(c, p, storage.ListOptions{Limit: 3, StartKey: next, Revision: first.Revision}))
		all = append(all, page.KVs...)
		if !page.More {
			break
		}
		next = page.KVs[len(page.KVs)-1].Key + "\x00"
	}
	if got := values(all); got != "0,1,2,3,4,5,6" {
		t.Fatalf("paginated list = %s, want 0,1,2,3,4,5,6", got)
	}
}

// recv reads n events or fails.
func recv(t *testing.T, w storage.Watcher, n int) []storage.Event {
	t.Helper()
	var out []storage.Event
	timeout := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case e, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch closed after %d of %d events", len(out), n)
			}
			if e.Type == storage.Progress {
				continue
			}
			out = append(out, e)
		case <-timeout:
			t.Fatalf("timed out after %d of %d events", len(out), n)
		}
	}
	return out
}

func testWatchFromRevision(t *testing.T, s storage.Interface, p string) {
	c := ctx(t)
	a := must(s.Create(c, p+"a", []byte("a1")))
	a2 := must(s.Update(c, p+"a", []byte("a2"), a.ModRevision))
	must(s.Create(c, p[:len(p)-1]+"-outside", []byte("no")))
	del := must(s.Delete(c, p+"a", a2.ModRevision))

	w := must(s.Watch(c, p, a.ModRevision))
	defer w.Stop()
	evs := recv(t, w, 3)
	want := []struct {
		typ  storage.EventType
		val  string
		rev  int64
		prev string
	}{
		{storage.Put, "a1", a.ModRevision, ""},
		{storage.Put, "a2", a2.ModRevision, "a1"},
		{storage.Delete, "a2", del.ModRevision, ""},
	}
	for i, w := range want {
		e := evs[i]
		prev := ""
		if e.PrevKV != nil {
			prev = string(e.PrevKV.Value)
		}
		if e.Type != w.typ || string(e.KV.Value) != w.val || e.Revision != w.rev || e.KV.ModRevision != w.rev || prev != w.prev {
			t.Fatalf("event %d = %v %q@%d prev %q, want %v %q@%d prev %q", i, e.Type, e.KV.Value, e.Revision, prev, w.typ, w.val, w.rev, w.prev)
		}
	}
	// A watch from "now" sees only later changes.
	w2 := must(s.Watch(c, p, 0))
	defer w2.Stop()
	b := must(s.Create(c, p+"b", []byte("b1")))
	if e := recv(t, w2, 1)[0]; e.Type != storage.Put || e.Revision != b.ModRevision {
		t.Fatalf("watch from now got %v@%d, want PUT@%d", e.Type, e.Revision, b.ModRevision)
	}
	w2.Stop()
	if _, ok := <-w2.Events(); ok {
		t.Fatalf("Events() still open after Stop")
	}
}

func testWatchDeletePrefix(t *testing.T, s storage.Interface, p string) {
	c := ctx(t)
	must(s.Create(c, p+"a", []byte("a")))
	must(s.Create(c, p+"b", []byte("b")))
	w := must(s.Watch(c, p, 0))
	defer w.Stop()
	rev := must(s.DeletePrefix(c, p))
	evs := recv(t, w, 2)
	for i, e := range evs {
		if e.Type != storage.Delete || e.Revision != rev {
			t.Fatalf("event %d = %v@%d, want DELETE@%d (one revision for the whole delete)", i, e.Type, e.Revision, rev)
		}
	}
	if evs[0].KV.Key != p+"a" || evs[1].KV.Key != p+"b" || string(evs[1].KV.Value) != "b" {
		t.Fatalf("deleted keys = %s,%s (%q), want %sa,%sb (\"b\")", evs[0].KV.Key, evs[1].KV.Key, evs[1].KV.Value, p, p)
	}
}

func testWatchProgress(t *testing.T, s storage.Interface, p string) {
	c := ctx(t)
	w := must(s.Watch(c, p, 0))
	defer w.Stop()
	// A change elsewhere advances the revision without an event here.
	other := must(s.Create(c, p[:len(p)-1]+"-elsewhere", []byte("x")))
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := w.RequestProgress(c); err != nil {
			t.Fatalf("RequestProgress: %v", err)
		}
		select {
		case <-tick.C:
		case e := <-w.Events():
			if e.Type != storage.Progress {
				t.Fatalf("got %v event, want PROGRESS", e.Type)
			}
			if e.Revision >= other.ModRevision {
				return
			}
		case <-deadline:
			t.Fatalf("no progress event reached revision %d", other.ModRevision)
		}
	}
}

func testCompaction(t *testing.T, s storage.Interface, p string) {
	c := ctx(t)
	a := must(s.Create(c, p+"a", []byte("1")))
	b := must(s.Update(c, p+"a", []byte("2"), a.ModRevision))
	if err := s.Compact(c, b.ModRevision); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if err := s.Compact(c, a.ModRevision); err != nil {
		t.Fatalf("Compact(older) = %v, want nil", err)
	}
	_, err := s.List(c, p, storage.ListOptions{Revision: a.ModRevision})
	wantErr(t, "List(compacted)", err, storage.ErrCompacted)

	w := must(s.Watch(c, p, a.ModRevision))
	defer w.Stop()
	select {
	case e := <-w.Events():
		if e.Type != storage.Error || !errors.Is(e.Err, storage.ErrCompacted) {
			t.Fatalf("watch from compacted revision got %v (%v), want ERROR wrapping ErrCompacted", e.Type, e.Err)
		}
		var ce *storage.CompactedError
		if !errors.As(e.Err, &ce) || ce.Compacted < b.ModRevision {
			t.Fatalf("compacted error = %v, want CompactedError with revision >= %d", e.Err, b.ModRevision)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("watch from compacted revision got nothing")
	}
	if _, ok := <-w.Events(); ok {
		t.Fatalf("watch still open after its error event")
	}
	// The latest state is still readable, and a watch at the compaction point works.
	if got := must(s.Get(c, p+"a")); string(got.Value) != "2" {
		t.Fatalf("Get after compaction = %q, want 2", got.Value)
	}
}

// testCompacted: Compacted says 0 for a revision the store still reads at
// and, once it is compacted, a revision after it that the store has
// compacted to (here the only compaction: not newer than it).
func testCompacted(t *testing.T, s storage.Interface, p string) {
	c := ctx(t)
	a := must(s.Create(c, p+"a", []byte("1")))
	b := must(s.Update(c, p+"a", []byte("2"), a.ModRevision))
	if got := must(s.Compacted(c, a.ModRevision)); got != 0 {
		t.Fatalf("Compacted(%d) before compaction = %d, want 0", a.ModRevision, got)
	}
	if err := s.Compact(c, b.ModRevision); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if got := must(s.Compacted(c, a.ModRevision)); got <= a.ModRevision || got > b.ModRevision {
		t.Fatalf("Compacted(%d) after Compact(%d) = %d, want in (%d, %d]", a.ModRevision, b.ModRevision, got, a.ModRevision, b.ModRevision)
	}
	if got := must(s.Compacted(c, b.ModRevision)); got != 0 {
		t.Fatalf("Compacted(%d) at the compaction revision = %d, want 0 (still readable)", b.ModRevision, got)
	}
	if _, err := s.List(c, p, storage.ListOptions{Revision: b.ModRevision}); err != nil {
		t.Fatalf("List at the compaction revision: %v", err)
	}
}
