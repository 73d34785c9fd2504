package etcd_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"


	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd"
	"github.com/objwatch/objwatch/storage/storagetest"
)

// runFeed shares s's watches under "/" and runs the feed until the test
// ends; it returns once the shared watch is live.
func runFeed(t testing.TB, s *etcd.Store, tune func(*etcd.Feed)) *etcd.Feed {
	t.Helper()
	f := s.ShareWatches("/", nil)
	if tune != nil {
		tune(f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	waitFor(t, "the shared watch live", func() bool { return f.Stats().Live })
	return f
}

func waitFor(t testing.TB, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func noPrev(ctx context.Context) context.Context { return storage.WithoutPrev(ctx) }

// noPrevStore is a store whose watches do not want previous values and
// start from a revision (a watch from now starts after the current one),
// which a running feed serves.
type noPrevStore struct {
	storage.Interface
	feed   *etcd.Feed
	served *int // watches the feed took (from the ring or catching up)
}

func (s noPrevStore) Watch(ctx context.Context, prefix string, from int64) (storage.Watcher, error) {
	if from == 0 {
		rev, err := s.Revision(ctx)
		if err != nil {
			return nil, err
		}
		from = rev + 1
	}
	w, err := s.Interface.Watch(noPrev(ctx), prefix, from)
	if st := s.feed.Stats(); err == nil && st.Subscribers+st.CatchingUp > 0 {
		*s.served++
	}
	return w, err
}

// TestFeedConformance: the contract holds for watches a feed serves,
// except what it says of previous values (the two subtests that check a
// delete's last value are skipped here: TestFeedWatchFromRevision checks
// the same without it).
func TestFeedConformance(t *testing.T) {
	s := startStore(t)
	f := runFeed(t, s, nil)
	var subtests, served int
	storagetest.Run(t, func(t *testing.T) storage.Interface {
		switch {
		case strings.HasSuffix(t.Name(), "/WatchFromRevision"), strings.HasSuffix(t.Name(), "/WatchAtomicTransactions"):
			t.Skip("checks previous values, which a feed's watches do not have")
		}
		subtests++
		return noPrevStore{s, f, &served}
	})
	if subtests < 7 || served < 2 {
		t.Fatalf("%d subtests ran, the feed took %d watches; want 7 and at least 2 (WatchProgress, Compaction)", subtests, served)
	}
	if st := f.Stats(); !st.Live {
		t.Fatalf("feed not live after the suite: %+v", st)
	}
}

type ev struct {
	typ storage.EventType
	key string
	val string
	rev int64
}

func (e ev) String() string { return fmt.Sprintf("%v %s=%q@%d", e.typ, e.key, e.val, e.rev) }

// nextChange reads w's next non-progress event.
func nextChange(t testing.TB, w storage.Watcher) storage.Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-w.Events():
			if !ok {
				t.Fatal("watch closed")
			}
			if e.Type != storage.Progress {
				return e
			}
		case <-timeout:
			t.Fatal("timed out waiting for an event")
		}
	}
}

// TestFeedWatchFromRevision: WatchFromRevision of the conformance suite
// without previous values, and a DeletePrefix's revision delivered
// whole, from a watch the feed serves.
func TestFeedWatchFromRevision(t *testing.T) {
	s := startStore(t)
	f := runFeed(t, s, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := must(s.Create(ctx, "/w/a", []byte("a1")))
	a2 := must(s.Update(ctx, "/w/a", []byte("a2"), a.ModRevision))
	must(s.Create(ctx, "/w-outside", []byte("no")))
	del := must(s.Delete(ctx, "/w/a", a2.ModRevision))
	b := must(s.Create(ctx, "/w/b", []byte("b")))
	c := must(s.Create(ctx, "/w/c", []byte("c")))
	dp := must(s.DeletePrefix(ctx, "/w/"))

	w := must(s.Watch(noPrev(ctx), "/w/", a.ModRevision))
	defer w.Stop()
	if st := f.Stats(); st.Subscribers != 1 || st.CatchingUp != 0 {
		t.Fatalf("feed stats %+v, want the watch served from the ring", st)
	}
	want := []ev{
		{storage.Put, "/w/a", "a1", a.ModRevision},
		{storage.Put, "/w/a", "a2", a2.ModRevision},
		{storage.Delete, "/w/a", "", del.ModRevision},
		{storage.Put, "/w/b", "b", b.ModRevision},
		{storage.Put, "/w/c", "c", c.ModRevision},
		{storage.Delete, "/w/b", "", dp},
		{storage.Delete, "/w/c", "", dp},
	}
	for i, wnt := range want {
		e := nextChange(t, w)
		got := ev{e.Type, e.KV.Key, string(e.KV.Value), e.Revision}
		if got != wnt || e.KV.ModRevision != e.Revision || e.PrevKV != nil {
			t.Fatalf("event %d = %v (kv %+v, prev %v), want %v without prev", i, got, e.KV, e.PrevKV, wnt)
		}
	}
}

// must is v, or a panic with err (which fails the test).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
