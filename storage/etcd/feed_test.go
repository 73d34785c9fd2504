package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd"
	"github.com/objwatch/objwatch/storage/storagetest"
)

// runFeed shares s's watches under "/" and runs the feed until the test
// ends; it returns once the shared watch is live.
func runFeed(t testing.TB, s *etcd.Store, tune func(*etcd.Feed)) *etcd.Feed {
	t.Helper()
	f, _ := runFeedStop(t, s, tune)
	return f
}

// runFeedStop is runFeed that also returns a function stopping the feed
// (and waiting for Run to return) before the test ends.
func runFeedStop(t testing.TB, s *etcd.Store, tune func(*etcd.Feed)) (*etcd.Feed, func()) {
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
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	waitFor(t, "the shared watch live", func() bool { return f.Stats().Live })
	return f, stop
}

// feedEnv is a store with a running feed (see runFeed), a context that
// ends with the test (a minute at most) and the store's revision.
func feedEnv(t *testing.T) (*etcd.Store, *etcd.Feed, context.Context, int64) {
	s := startStore(t)
	f := runFeed(t, s, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return s, f, ctx, must(s.Revision(ctx))
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

// collect reads w's changes until a Progress event at final or later,
// asking for progress every 50 ms. An Error event fails the test.
func collect(t testing.TB, w storage.Watcher, final int64) []ev {
	t.Helper()
	var out []ev
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case e, ok := <-w.Events():
			switch {
			case !ok:
				t.Fatalf("watch closed after %d events", len(out))
			case e.Type == storage.Error:
				t.Fatalf("watch failed after %d events: %v", len(out), e.Err)
			case e.Type == storage.Progress:
				if e.Revision >= final {
					return out
				}
			default:
				out = append(out, toEv(e))
			}
		case <-tick.C:
			if err := w.RequestProgress(context.Background()); err != nil {
				t.Fatalf("RequestProgress: %v", err)
			}
		case <-timeout:
			t.Fatalf("no progress to %d after %d events", final, len(out))
		}
	}
}

// toEv is e as compared: a delete's value is left out (a feed's watches
// have none).
func toEv(e storage.Event) ev {
	x := ev{e.Type, e.KV.Key, string(e.KV.Value), e.Revision}
	if e.Type == storage.Delete {
		x.val = ""
	}
	return x
}

func sameEvents(t testing.TB, what string, got, want []ev) {
	t.Helper()
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("%s: event %d = %v, want %v (%d events, want %d)", what, i, got[i], want[i], len(got), len(want))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
	}
}

func from(evs []ev, rev int64) []ev {
	for i, e := range evs {
		if e.rev >= rev {
			return evs[i:]
		}
	}
	return nil
}

// TestFeedManyPrefixes: watches of many prefixes served by one feed,
// some from the start and some joining from the ring mid-way, under
// concurrent multi-key transactions and deletes, each see exactly what a
// dedicated etcd watch of their prefix sees.
func TestFeedManyPrefixes(t *testing.T) {
	s, f, ctx, start := feedEnv(t)
	const prefixes, writers, ops = 16, 4, 150
	prefix := func(i int) string { return fmt.Sprintf("/p%02d/", i) }
	feedW, refW := make([]storage.Watcher, prefixes), make([]storage.Watcher, prefixes)
	for i := range prefixes {
		feedW[i] = must(s.Watch(noPrev(ctx), prefix(i), start+1))
		defer feedW[i].Stop()
		refW[i] = must(s.Watch(ctx, prefix(i), start+1)) // with prev: dedicated
		defer refW[i].Stop()
	}
	if st := f.Stats(); st.Subscribers != prefixes || st.CatchingUp != 0 {
		t.Fatalf("stats %+v, want %d watches on the feed", st, prefixes)
	}
	var wg sync.WaitGroup
	half := make(chan struct{})
	var halfOnce sync.Once
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var mine []string
			for op := range ops {
				if op == ops/2 {
					halfOnce.Do(func() { close(half) })
				}
				if len(mine) > 0 && rng.IntN(4) == 0 {
					k := mine[rng.IntN(len(mine))]
					if _, err := s.Client().Delete(ctx, k); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				puts := make([]clientv3.Op, 1+rng.IntN(6))
				for j := range puts {
					k := fmt.Sprintf("%sw%d-%d", prefix(rng.IntN(prefixes)), w, rng.IntN(30))
					mine = append(mine, k)
					puts[j] = clientv3.OpPut(k, fmt.Sprintf("v%d-%d-%d", w, op, j))
				}
				if _, err := s.Client().Txn(ctx).Then(dedupOps(puts)...).Commit(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	<-half
	mid := must(s.Revision(ctx))
	lateW := make([]storage.Watcher, prefixes)
	for i := range prefixes {
		lateW[i] = must(s.Watch(noPrev(ctx), prefix(i), mid-5))
		defer lateW[i].Stop()
	}
	if st := f.Stats(); st.CatchingUp != 0 || st.Switches != 0 {
		t.Fatalf("stats %+v: the late watches should have joined from the ring", st)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	final := must(s.Revision(ctx))
	total := 0
	for i := range prefixes {
		want := collect(t, refW[i], final)
		sameEvents(t, "feed watch of "+prefix(i), collect(t, feedW[i], final), want)
		sameEvents(t, "late feed watch of "+prefix(i), collect(t, lateW[i], final), from(want, mid-5))
		total += len(want)
	}
	if total < writers*ops {
		t.Fatalf("only %d events in all", total)
	}
}

// dedupOps drops a transaction's repeated keys (etcd refuses them).
func dedupOps(ops []clientv3.Op) []clientv3.Op {
	seen := map[string]bool{}
	var out []clientv3.Op
	for _, op := range ops {
		if k := string(op.KeyBytes()); !seen[k] {
			seen[k] = true
			out = append(out, op)
		}
	}
	return out
}

// TestFeedLateJoinOlderThanRing: a watch from before the ring starts on
// its own etcd watch, then moves to the feed once it caught up, with no
// change lost or repeated across the move while writes go on; a watch of
// a prefix without changes moves too (by progress).
func TestFeedLateJoinOlderThanRing(t *testing.T) {
	s := startStore(t)
	f := runFeed(t, s, func(f *etcd.Feed) {
		etcd.SetFeedLimits(f, 4096, time.Minute, 50*time.Millisecond, 100*time.Millisecond)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	val := strings.Repeat("x", 300)
	var want []ev
	put := func(i int) {
		k := fmt.Sprintf("/old/%03d", i)
		kv := must(s.Create(ctx, k, []byte(val)))
		want = append(want, ev{storage.Put, k, val, kv.ModRevision})
	}
	for i := range 60 {
		put(i)
	}
	if st := f.Stats(); st.Start <= want[0].rev {
		t.Fatalf("ring starts at %d, want after %d", st.Start, want[0].rev)
	}
	w := must(s.Watch(noPrev(ctx), "/old/", want[0].rev))
	defer w.Stop()
	quiet := must(s.Watch(noPrev(ctx), "/quiet/", want[0].rev))
	defer quiet.Stop()
	if st := f.Stats(); st.CatchingUp != 2 {
		t.Fatalf("stats %+v, want both watches on their own etcd watch", st)
	}
	for i := 60; i < 200; i++ {
		put(i)
	}
	final := must(s.Revision(ctx))
	sameEvents(t, "caught-up watch", collect(t, w, final), want)
	waitFor(t, "both watches on the feed", func() bool {
		st := f.Stats()
		return st.Switches == 2 && st.CatchingUp == 0 && st.Subscribers == 2
	})
	q := must(s.Create(ctx, "/quiet/a", []byte("q")))
	if e := toEv(nextChange(t, quiet)); e != (ev{storage.Put, "/quiet/a", "q", q.ModRevision}) {
		t.Fatalf("quiet watch got %v, want its put at %d", e, q.ModRevision)
	}
	put(200)
	if e := toEv(nextChange(t, w)); e != want[200] {
		t.Fatalf("after the move: %v, want %v", e, want[200])
	}
}

// TestFeedSharedWatchFails: when the shared watch fails, every watch it
// serves ends with an Error event (not a compaction); watching again from
// the last revision seen plus one misses nothing, and the feed serves
// them again once restarted.
func TestFeedSharedWatchFails(t *testing.T) {
	s, f, ctx, start := feedEnv(t)
	const prefixes = 3
	var mu sync.Mutex
	written := make([][]ev, prefixes)
	stopWriting := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for i := 0; ; i++ {
			select {
			case <-stopWriting:
				return
			default:
			}
			k := fmt.Sprintf("/f%d/%d", i%prefixes, i)
			kv, err := s.Create(ctx, k, []byte("v"))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			written[i%prefixes] = append(written[i%prefixes], ev{storage.Put, k, "v", kv.ModRevision})
			mu.Unlock()
		}
	}()
	results := make([]resumed, prefixes)
	final := make(chan int64)
	var consumers sync.WaitGroup
	for p := range prefixes {
		consumers.Go(func() { results[p] = resumeWatch(ctx, t, s, fmt.Sprintf("/f%d/", p), start+1, final) })
	}
	for range 3 {
		time.Sleep(300 * time.Millisecond)
		etcd.BreakFeed(f, errors.New("injected failure"))
		waitFor(t, "the feed restarted", func() bool { return f.Stats().Live })
	}
	time.Sleep(300 * time.Millisecond)
	close(stopWriting)
	<-writerDone
	rev := must(s.Revision(ctx))
	for range prefixes {
		final <- rev
	}
	consumers.Wait()
	if t.Failed() {
		return
	}
	for p := range prefixes {
		r := results[p]
		if len(r.errs) < 3 {
			t.Errorf("/f%d/: %d errors (%v), want one per failure (3)", p, len(r.errs), r.errs)
		}
		for _, err := range r.errs {
			if !strings.Contains(err.Error(), "injected failure") || errors.Is(err, storage.ErrCompacted) {
				t.Errorf("/f%d/: error %v, want the injected failure, not a compaction", p, err)
			}
		}
		sameEvents(t, fmt.Sprintf("/f%d/", p), r.evs, written[p])
		if len(r.evs) < 20 {
			t.Errorf("/f%d/: only %d events", p, len(r.evs))
		}
	}
	if st := f.Stats(); !st.Live || st.Subscribers != 0 {
		t.Fatalf("stats %+v after the consumers stopped, want live without subscribers", st)
	}
}

// TestFeedRestartCompacted: a feed whose restart finds its revision
// compacted starts over at the current revision; a watch from before the
// compaction gets etcd's CompactedError, one after it is served by the
// feed.
func TestFeedRestartCompacted(t *testing.T) {
	s := startStore(t)
	f := runFeed(t, s, func(f *etcd.Feed) { etcd.SetFeedLimits(f, 8<<20, time.Minute, time.Second, time.Second) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := must(s.Create(ctx, "/rc/a", nil))
	w := must(s.Watch(noPrev(ctx), "/rc/", a.ModRevision))
	defer w.Stop()
	if e := nextChange(t, w); e.Revision != a.ModRevision {
		t.Fatalf("first event %+v", e)
	}
	etcd.BreakFeed(f, errors.New("injected failure"))
	if e := nextChange(t, w); e.Type != storage.Error || errors.Is(e.Err, storage.ErrCompacted) {
		t.Fatalf("after the failure: %v (%v), want an error that is no compaction", e.Type, e.Err)
	}
	must(s.Create(ctx, "/rc/b", nil))
	c := must(s.Create(ctx, "/rc/c", nil))
	if err := s.Compact(ctx, c.ModRevision); err != nil {
		t.Fatal(err)
	}
	if st := f.Stats(); st.Live {
		t.Fatalf("feed live again within its first backoff (%+v); the test needs the compaction first", st)
	}
	waitFor(t, "the feed started over", func() bool { st := f.Stats(); return st.Live && st.Start >= c.ModRevision })
	old := must(s.Watch(noPrev(ctx), "/rc/", a.ModRevision+1))
	defer old.Stop()
	var ce *storage.CompactedError
	if e := nextChange(t, old); e.Type != storage.Error || !errors.As(e.Err, &ce) || ce.Compacted != c.ModRevision {
		t.Fatalf("watch from before the compaction: %v (%v), want a CompactedError at %d", e.Type, e.Err, c.ModRevision)
	}
	after := must(s.Watch(noPrev(ctx), "/rc/", c.ModRevision+1))
	defer after.Stop()
	if st := f.Stats(); st.Subscribers != 1 || st.CatchingUp != 0 {
		t.Fatalf("stats %+v, want the watch after the compaction on the feed", st)
	}
	d := must(s.Create(ctx, "/rc/d", nil))
	if e := nextChange(t, after); e.Revision != d.ModRevision {
		t.Fatalf("got %+v, want the put at %d", e, d.ModRevision)
	}
}

// TestFeedTransformers: a store made by WithTransformers gets its
// watches' values transformed back from the shared watch's raw events,
// and a value it cannot read ends its watch with a TransformError, as a
// dedicated watch's.
func TestFeedTransformers(t *testing.T) {
	raw := startStore(t)
	f := runFeed(t, raw, nil)
	s := raw.WithTransformers(all(gcm(t, "k1", 1)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := must(s.Revision(ctx))
	w := must(s.Watch(noPrev(ctx), "/t/", start+1))
	defer w.Stop()
	rw := must(raw.Watch(noPrev(ctx), "/t/", start+1))
	defer rw.Stop()
	if st := f.Stats(); st.Subscribers != 2 {
		t.Fatalf("stats %+v, want both watches on the feed", st)
	}
	c := must(s.Create(ctx, "/t/a", []byte("plain-one")))
	if e := nextChange(t, w); string(e.KV.Value) != "plain-one" || e.Revision != c.ModRevision {
		t.Fatalf("transformed watch got %q@%d, want plain-one@%d", e.KV.Value, e.Revision, c.ModRevision)
	}
	if e := nextChange(t, rw); !strings.HasPrefix(string(e.KV.Value), "k8s:enc:aesgcm:v1:k1:") {
		t.Fatalf("raw watch got %q, want the stored ciphertext", e.KV.Value)
	}
	bad := must(raw.Create(ctx, "/t/bad", []byte("not ciphertext")))
	var te *storage.TransformError
	if e := nextChange(t, w); e.Type != storage.Error || !errors.As(e.Err, &te) || te.Key != "/t/bad" || te.Revision != bad.ModRevision {
		t.Fatalf("transformed watch got %v (%v), want a TransformError for /t/bad", e.Type, e.Err)
	}
	if _, ok := <-w.Events(); ok {
		t.Fatal("watch still open after its error")
	}
}

// TestFeedSlowSubscriber: a watch whose owner does not read holds up
// neither the shared watch nor another watch (which gets its changes and
// a requested Progress event); it later reads all of its own, in order.
func TestFeedSlowSubscriber(t *testing.T) {
	s, _, ctx, start := feedEnv(t)
	slow := must(s.Watch(noPrev(ctx), "/slow/", start+1))
	defer slow.Stop()
	fast := must(s.Watch(noPrev(ctx), "/fast/", start+1))
	defer fast.Stop()
	var wantSlow, wantFast []ev
	for i := range 20 {
		ops := make([]clientv3.Op, 100)
		for j := range ops {
			ops[j] = clientv3.OpPut(fmt.Sprintf("/slow/%02d-%03d", i, j), "s")
		}
		resp := must(s.Client().Txn(ctx).Then(ops...).Commit())
		for j := range ops {
			wantSlow = append(wantSlow, ev{storage.Put, fmt.Sprintf("/slow/%02d-%03d", i, j), "s", resp.Header.Revision})
		}
		kv := must(s.Create(ctx, fmt.Sprintf("/fast/%02d", i), []byte("f")))
		wantFast = append(wantFast, ev{storage.Put, kv.Key, "f", kv.ModRevision})
	}
	final := must(s.Revision(ctx))
	sameEvents(t, "fast watch", collect(t, fast, final), wantFast)
	sameEvents(t, "slow watch", collect(t, slow, final), wantSlow)
}

// TestFeedWatchEnds: a watch's context cancelled with a cause ends it
// with an Error event carrying the cause, and Stop ends another; neither
// disturbs the other watches. When the feed stops, its watches end with
// an Error event, and new watches are dedicated etcd watches again.
func TestFeedWatchEnds(t *testing.T) {
	s := startStore(t)
	f, stopFeed := runFeedStop(t, s, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := must(s.Revision(ctx))
	cctx, cut := context.WithCancelCause(noPrev(ctx))
	cutW := must(s.Watch(cctx, "/e/", start+1))
	defer cutW.Stop()
	stopped := must(s.Watch(noPrev(ctx), "/e/", start+1))
	stay := must(s.Watch(noPrev(ctx), "/e/", start+1))
	defer stay.Stop()
	cut(errors.New("cut by the test"))
	if e := nextChange(t, cutW); e.Type != storage.Error || !strings.Contains(e.Err.Error(), "cut by the test") {
		t.Fatalf("cut watch: %v (%v), want an error with the cause", e.Type, e.Err)
	}
	stopped.Stop()
	if _, ok := <-stopped.Events(); ok {
		t.Fatal("stopped watch still open")
	}
	a := must(s.Create(ctx, "/e/a", nil))
	if e := nextChange(t, stay); e.Revision != a.ModRevision {
		t.Fatalf("remaining watch got %+v, want the put at %d", e, a.ModRevision)
	}
	cutW.Stop()
	if st := f.Stats(); st.Subscribers != 1 {
		t.Fatalf("stats %+v, want the one remaining watch", st)
	}
	stopFeed()
	if e := nextChange(t, stay); e.Type != storage.Error {
		t.Fatalf("after the feed stopped: %v, want an error", e.Type)
	}
	after := must(s.Watch(noPrev(ctx), "/e/", a.ModRevision))
	defer after.Stop()
	if e := nextChange(t, after); e.Revision != a.ModRevision {
		t.Fatalf("dedicated watch after the feed: %+v", e)
	}
	if st := f.Stats(); st.Subscribers != 0 || st.CatchingUp != 0 {
		t.Fatalf("stats %+v, want nothing on a stopped feed", st)
	}
}

// resumed is what resumeWatch saw: the changes, and the errors that ended
// its watches.
type resumed struct {
	evs  []ev
	errs []error
}

// resumeWatch watches prefix from from without previous values as the
// watch cache does: after an Error event it watches again from the last
// revision it saw plus one. It returns once a Progress event reaches the
// revision final sends.
func resumeWatch(ctx context.Context, t testing.TB, s storage.Interface, prefix string, from int64, final <-chan int64) resumed {
	var r resumed
	next, last := from, int64(-1)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		w, err := s.Watch(noPrev(ctx), prefix, next)
		if err != nil {
			t.Error(err)
			return r
		}
	events:
		for {
			select {
			case last = <-final:
				final = nil
			case <-tick.C:
				_ = w.RequestProgress(ctx)
			case e, ok := <-w.Events():
				switch {
				case !ok:
					t.Error("watch closed without an error")
					w.Stop()
					return r
				case e.Type == storage.Error:
					r.errs = append(r.errs, e.Err)
					break events
				case e.Type == storage.Progress:
					if last >= 0 && e.Revision >= last {
						w.Stop()
						return r
					}
				default:
					r.evs = append(r.evs, toEv(e))
					next = e.Revision + 1
				}
			case <-ctx.Done():
				t.Error("timed out")
				w.Stop()
				return r
			}
		}
		w.Stop()
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// TestFeedEtcdRestart: etcd stops and starts again (same data, same
// address) under a running feed; watching as the watch cache does (again
// from the last revision seen plus one after an error), the feed's
// watches miss nothing and repeat nothing.
func TestFeedEtcdRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfg := etcd.EmbeddedConfig{Dir: dir, ClientURL: url, NoFsync: true}
	e := must(etcd.StartEmbedded(ctx, cfg))
	defer func() { e.Close() }()
	cli := must(etcd.NewClient(etcd.ClientConfig{Endpoints: []string{url}}))
	defer cli.Close()
	s := must(etcd.New(cli, nil))
	f := runFeed(t, s, nil)
	const prefixes = 2
	start := must(s.Revision(ctx))
	written := make([][]ev, prefixes)
	write := func(n int) {
		for i := range n {
			p := i % prefixes
			k := fmt.Sprintf("/er%d/%d-%d", p, len(written[p]), i)
			kv := must(s.Create(ctx, k, []byte("v")))
			written[p] = append(written[p], ev{storage.Put, k, "v", kv.ModRevision})
		}
	}
	results := make([]resumed, prefixes)
	final := make(chan int64)
	var consumers sync.WaitGroup
	for p := range prefixes {
		consumers.Go(func() { results[p] = resumeWatch(ctx, t, s, fmt.Sprintf("/er%d/", p), start+1, final) })
	}
	write(40)
	e.Close()
	e = must(etcd.StartEmbedded(ctx, cfg))
	write(40)
	rev := must(s.Revision(ctx))
	for range prefixes {
		final <- rev
	}
	consumers.Wait()
	for p := range prefixes {
		sameEvents(t, fmt.Sprintf("/er%d/", p), results[p].evs, written[p])
		t.Logf("/er%d/: %d events, watch errors %v", p, len(results[p].evs), results[p].errs)
	}
	if st := f.Stats(); !st.Live || st.Pos < rev {
		t.Fatalf("stats %+v, want the feed live at %d or later", st, rev)
	}
}

// TestFeedQuietPrefix: changes elsewhere reach a watch as nothing at all
// (no Progress event: nobody asked for one), not as empty responses.
func TestFeedQuietPrefix(t *testing.T) {
	s, _, ctx, start := feedEnv(t)
	w := must(s.Watch(noPrev(ctx), "/quiet/", start+1))
	defer w.Stop()
	noise := must(s.Watch(noPrev(ctx), "/noise/", start+1))
	defer noise.Stop()
	for i := range 20 {
		must(s.Create(ctx, fmt.Sprintf("/noise/%d", i), nil))
	}
	q := must(s.Create(ctx, "/quiet/a", nil))
	select {
	case e := <-w.Events():
		if e.Type != storage.Put || e.Revision != q.ModRevision {
			t.Fatalf("quiet watch got %v@%d first, want the put at %d", e.Type, e.Revision, q.ModRevision)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	if got := len(collect(t, noise, q.ModRevision)); got != 20 {
		t.Fatalf("noise watch got %d events, want 20", got)
	}
}

// TestFeedProgressForMany: many watches asking for progress at once, once
// each, each get a Progress event at a revision after the last change
// (the feed sends one request at a time and one more for those that
// asked meanwhile).
func TestFeedProgressForMany(t *testing.T) {
	s, _, ctx, start := feedEnv(t)
	const watches = 30
	ws := make([]storage.Watcher, watches)
	for i := range ws {
		ws[i] = must(s.Watch(noPrev(ctx), fmt.Sprintf("/pm%02d/", i), start+1))
		defer ws[i].Stop()
	}
	for round := range 5 {
		last := must(s.Create(ctx, fmt.Sprintf("/pm-elsewhere/%d", round), nil)).ModRevision
		var wg sync.WaitGroup
		for i, w := range ws {
			wg.Go(func() {
				if err := w.RequestProgress(ctx); err != nil {
					t.Error(err)
					return
				}
				timeout := time.After(10 * time.Second)
				for {
					select {
					case e := <-w.Events():
						if e.Type != storage.Progress {
							t.Errorf("watch %d: %v event, want PROGRESS", i, e.Type)
							return
						}
						if e.Revision >= last {
							return
						}
					case <-timeout:
						t.Errorf("round %d, watch %d: no progress to %d", round, i, last)
						return
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
}
