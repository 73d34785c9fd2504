package watchcache_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// upper is the tests' encoding: as long as the JSON.
func upper(b []byte) ([]byte, error) { return bytes.ToUpper(b), nil }

// TestEncodedKeptOnlyInCache: an object no cache has taken in, or one
// that has left its cache, keeps no encoding (each call makes it anew);
// an object that leaves twice gives its bytes back once.
func TestEncodedKeptOnlyInCache(t *testing.T) {
	var made atomic.Int64
	count := func(b []byte) ([]byte, error) { made.Add(1); return upper(b) }
	loose := &watchcache.Object{Key: "/loose", JSON: []byte(`{"a":1}`)}
	for range 2 {
		if b, err := loose.Encoded("upper", count); err != nil || string(b) != `{"A":1}` {
			t.Fatalf("Encoded = %q, %v", b, err)
		}
	}
	if made.Load() != 2 || loose.EncodedSize() != 0 {
		t.Fatalf("an object in no cache: made %d times, keeps %d bytes; want 2 and none", made.Load(), loose.EncodedSize())
	}

	budget := watchcache.NewBudget(1 << 20)
	a := &watchcache.Object{Key: "/a", JSON: []byte(`{"a":1}`)}
	b := &watchcache.Object{Key: "/b", JSON: []byte(`{"b":22}`)}
	for _, o := range []*watchcache.Object{a, b} {
		budget.Hold(o)
		if _, err := o.Encoded("upper", upper); err != nil {
			t.Fatal(err)
		}
	}
	if want := int64(len(a.JSON) + len(b.JSON)); budget.Used() != want {
		t.Fatalf("budget used %d, want %d", budget.Used(), want)
	}
	watchcache.Retire(a)
	watchcache.Retire(a)
	if want := int64(len(b.JSON)); budget.Used() != want {
		t.Fatalf("after a left (twice): budget used %d, want b's %d", budget.Used(), want)
	}
	made.Store(0)
	for range 2 {
		if got, _ := a.Encoded("upper", count); string(got) != `{"A":1}` {
			t.Fatalf("retired object's encoding %q", got)
		}
	}
	if made.Load() != 2 || a.EncodedSize() != 0 || budget.Used() != int64(len(b.JSON)) {
		t.Fatalf("a retired object: made %d times, keeps %d, budget %d; want made each time, nothing kept", made.Load(), a.EncodedSize(), budget.Used())
	}
	budget.Hold(a) // a retired object is not taken in again
	if _, _ = a.Encoded("upper", upper); a.EncodedSize() != 0 {
		t.Fatalf("a retired object adopted again keeps %d bytes", a.EncodedSize())
	}
}

// TestEncodedBudgetBound: encodings are kept while they fit in the
// budget, others are made and returned without being kept (counted as
// refused); room given back is used again. A budget of 0 keeps nothing.
func TestEncodedBudgetBound(t *testing.T) {
	objs := make([]*watchcache.Object, 5)
	budget := watchcache.NewBudget(3 * 10)
	for i := range objs {
		objs[i] = &watchcache.Object{Key: fmt.Sprint("/", i), JSON: fmt.Appendf(nil, `{"n":"%03d"}`, i)} // 11 bytes
		budget.Hold(objs[i])
	}
	for _, o := range objs {
		if b, err := o.Encoded("upper", upper); err != nil || !bytes.Equal(b, bytes.ToUpper(o.JSON)) {
			t.Fatalf("%s: %q, %v", o.Key, b, err)
		}
	}
	kept := func() (n int) {
		for _, o := range objs {
			if o.EncodedSize() > 0 {
				n++
			}
		}
		return n
	}
	if kept() != 2 || budget.Used() != 22 || budget.Refused() != 3 {
		t.Fatalf("kept %d, used %d, refused %d; want 2 kept (22 of 30 bytes), 3 refused", kept(), budget.Used(), budget.Refused())
	}
	watchcache.Retire(objs[0])
	if _, err := objs[4].Encoded("upper", upper); err != nil || objs[4].EncodedSize() != 11 || budget.Used() != 22 {
		t.Fatalf("after one left: object 4 keeps %d, used %d; want 11 and 22", objs[4].EncodedSize(), budget.Used())
	}

	none := watchcache.NewBudget(0)
	o := &watchcache.Object{Key: "/x", JSON: []byte(`{}`)}
	none.Hold(o)
	if _, _ = o.Encoded("upper", upper); o.EncodedSize() != 0 || none.Used() != 0 || none.Refused() != 1 {
		t.Fatalf("budget 0: keeps %d, used %d, refused %d", o.EncodedSize(), none.Used(), none.Refused())
	}
}

// TestEncodedRacesDeparture: readers making encodings of an object while
// it leaves its cache never leave bytes counted in the budget nor give
// back more than they took: once every object has left, the budget is
// exactly 0. A tight budget makes some readers fail to keep. Run with
// -race.
func TestEncodedRacesDeparture(t *testing.T) {
	budget := watchcache.NewBudget(2 * 16) // two of the three encodings
	keys := []string{"k0", "k1", "k2"}
	var kept atomic.Int64
	for i := range 500 {
		o := &watchcache.Object{Key: "/o", JSON: fmt.Appendf(nil, `{"n":%09d}`, i)} // 16 bytes
		budget.Hold(o)
		var wg sync.WaitGroup
		for r := range 6 {
			wg.Go(func() {
				b, err := o.Encoded(keys[r%len(keys)], upper)
				if err != nil || !bytes.Equal(b, bytes.ToUpper(o.JSON)) {
					t.Errorf("Encoded = %q, %v", b, err)
				}
				if o.EncodedSize() > 0 {
					kept.Add(1)
				}
			})
		}
		wg.Go(func() { watchcache.Retire(o) })
		wg.Wait()
		if o.EncodedSize() != 0 {
			t.Fatalf("round %d: a retired object keeps %d bytes", i, o.EncodedSize())
		}
		if u := budget.Used(); u != 0 {
			t.Fatalf("round %d: budget used %d once the object left, want 0", i, u)
		}
	}
	if kept.Load() == 0 || budget.Refused() == 0 {
		t.Logf("kept seen %d times, refused %d: the race had little to race with", kept.Load(), budget.Refused())
	}
}

// encodeAll lists c and asks every object for its encoding key; it
// returns the objects and how many were encoded (not found kept).
func encodeAll(t *testing.T, c *watchcache.Cache, key string) ([]*watchcache.Object, int) {
	t.Helper()
	objs, _, _, err := c.List(watchcache.Filter{}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	made := 0
	count := func(b []byte) ([]byte, error) { made++; return upper(b) }
	for _, o := range objs {
		b, err := o.Encoded(key, count)
		if err != nil || !bytes.Equal(b, bytes.ToUpper(o.JSON)) {
			t.Fatalf("%s: %q, %v", o.Key, b, err)
		}
	}
	return objs, made
}

// keptBytes is the bytes kept with c's current objects.
func keptBytes(t *testing.T, c *watchcache.Cache) int64 {
	t.Helper()
	objs, _, _, err := c.List(watchcache.Filter{}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, o := range objs {
		n += int64(o.EncodedSize())
	}
	return n
}

// usedBecomes waits (5 s at most) until budget holds want bytes.
func usedBecomes(t *testing.T, budget *watchcache.Budget, want int64, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for budget.Used() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: budget used %d, want %d", what, budget.Used(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCacheEncodingsBounded: a cache's objects keep their encodings
// while the budget has room: listing more than fits keeps the first that
// fit, the rest are encoded anew at every list (same bytes), and two
// caches share one budget.
func TestCacheEncodingsBounded(t *testing.T) {
	e := setup(t)
	const n = 20
	var rev int64
	for i := range n {
		rev = e.put("ns", fmt.Sprintf("o%02d", i), "v", nil)
	}
	c := e.cache(watchcache.Config{})
	if err := c.WaitFor(e.ctx, rev); err != nil {
		t.Fatal(err)
	}
	objs, _, _, _ := c.List(watchcache.Filter{}, "", 0)
	size := int64(len(objs[n-1].JSON))
	budget := watchcache.NewBudget(8*size + size/2)
	// A list keeps, in key order, each encoding that still fits.
	var fit, fits int64
	for _, o := range objs {
		if l := int64(len(o.JSON)); fit+l <= budget.Max() {
			fit += l
			fits++
		}
	}
	if fits < 8 || fits == n {
		t.Fatalf("%d of %d objects fit: the test wants some, not all", fits, n)
	}
	c1, c2 := e.cache(watchcache.Config{Encodings: budget}), e.cache(watchcache.Config{Encodings: budget})
	for _, c := range []*watchcache.Cache{c1, c2} {
		if err := c.WaitFor(e.ctx, rev); err != nil {
			t.Fatal(err)
		}
	}
	if _, made := encodeAll(t, c1, "upper"); made != n {
		t.Fatalf("first list encoded %d, want %d", made, n)
	}
	if budget.Used() != fit || keptBytes(t, c1) != fit || budget.Refused() != n-fits {
		t.Fatalf("used %d, kept %d, refused %d; want %d objects' %d bytes kept, %d refused", budget.Used(), keptBytes(t, c1), budget.Refused(), fits, fit, n-fits)
	}
	if _, made := encodeAll(t, c1, "upper"); made != int(n-fits) {
		t.Fatalf("second list encoded %d, want the %d not kept", made, n-fits)
	}
	if _, made := encodeAll(t, c2, "upper"); made != n || keptBytes(t, c2) != 0 {
		t.Fatalf("the other cache's list encoded %d, kept %d bytes; want %d encoded, none kept (the shared budget is full)", made, keptBytes(t, c2), n)
	}
	c1.Stop()
	usedBecomes(t, budget, 0, "after the first cache stopped")
	if _, made := encodeAll(t, c2, "upper"); made != n || keptBytes(t, c2) != fit {
		t.Fatalf("the other cache, once room is back: encoded %d, kept %d bytes; want %d encoded, %d kept", made, keptBytes(t, c2), n, fit)
	}
}

// TestCacheGivesBackEncodings: the bytes an object's kept encodings hold
// go back to the budget when it leaves the cache: replaced by a newer
// revision, deleted (with or without its last value), dropped by a
// relist, or the cache stopped. At each step the budget holds exactly
// what the cache's objects keep.
func TestCacheGivesBackEncodings(t *testing.T) {
	e := setup(t)
	budget := watchcache.NewBudget(1 << 20)
	store := &cuttable{Interface: e.store}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := watchcache.New(watchcache.Config{Store: store, Prefix: prefix, Decode: decode, Log: log, Encodings: budget})
	c.Start()
	t.Cleanup(c.Stop)
	// bare deletes the same objects' deletions without their last values
	// (see TestDeletionWithoutItsLastValue), sharing the budget.
	bare := watchcache.New(watchcache.Config{Store: bareDeletes{e.store}, Prefix: prefix, Decode: decode, Log: log, Encodings: budget})
	bare.Start()
	t.Cleanup(bare.Stop)
	var rev int64
	for i := range 10 {
		rev = e.put("ns", fmt.Sprintf("o%d", i), fmt.Sprint(i), nil)
	}
	caches := []*watchcache.Cache{c, bare}
	// check waits for both caches to reach rev and checks the budget
	// holds what their objects keep, and that it is want.
	check := func(what string, want int64) {
		t.Helper()
		for _, c := range caches {
			if err := c.WaitFor(e.ctx, rev); err != nil {
				t.Fatal(err)
			}
		}
		usedBecomes(t, budget, want, what)
		if kept := keptBytes(t, c) + keptBytes(t, bare); kept != want {
			t.Fatalf("%s: the objects keep %d bytes, the budget says %d", what, kept, want)
		}
	}
	check("before any list", 0)
	all := func() int64 {
		t.Helper()
		var n int64
		for _, c := range caches {
			for _, key := range []string{"upper", "again"} {
				objs, _ := encodeAll(t, c, key)
				for _, o := range objs {
					n += int64(len(o.JSON))
				}
			}
		}
		return n
	}
	// Each object is kept in two encodings in each cache: 4 copies.
	size := func(name string) int64 {
		t.Helper()
		o, _, ok := c.Get(prefix + "ns/" + name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		return int64(len(o.JSON))
	}
	total := all()
	check("every object encoded twice in each cache", total)
	total -= 4 * size("o1")
	rev = e.put("ns", "o1", "updated", nil)
	check("after an update", total)
	check("every object encoded again", all())
	total = all() - 4*size("o2")
	rev = e.del("ns", "o2")
	check("after a deletion (in one cache without its last value)", total)
	check("every object encoded again", all())

	// A relist (the store's watch says it compacted the cache's revision)
	// drops every object the cache had; its new ones keep nothing yet.
	w, err := c.Watch(e.ctx, watchcache.WatchOptions{From: rev, Deadline: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	before := keptBytes(t, bare)
	store.set(fmt.Errorf("%w: test", storage.ErrCompacted))
	store.set(nil)
	if _, err := w.Next(e.ctx); !errors.Is(err, storage.ErrCompacted) {
		t.Fatalf("watcher across the relist: %v, want ErrCompacted", err)
	}
	check("after a relist", before)
	check("every object encoded again", all())

	for i := range 10 {
		if i != 2 {
			rev = e.del("ns", fmt.Sprintf("o%d", i))
		}
	}

	check("after every object was deleted", 0)
	rev = e.put("ns", "last", "x", nil)
	check("a new object", 0)
	check("a new object encoded", all())
	c.Stop()
	bare.Stop()
	usedBecomes(t, budget, 0, "after the caches stopped")
}

// TestEncodingsConcurrentWithUpdates: lists asking for kept encodings,
// concurrent with updates of the same objects, keep the budget equal to
// what the cache's objects keep, and once every object is deleted it is
// exactly 0. Run with -race.
func TestEncodingsConcurrentWithUpdates(t *testing.T) {
	e := setup(t)
	budget := watchcache.NewBudget(6 * 60) // room for some, not all
	c := e.cache(watchcache.Config{Encodings: budget})
	const n = 10
	var rev int64
	for i := range n {
		rev = e.put("ns", fmt.Sprintf("o%d", i), "0", nil)
	}
	if err := c.WaitFor(e.ctx, rev); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			key := []string{"upper", "again"}[r%2]
			for {
				select {
				case <-stop:
					return
				default:
				}
				objs, _, _, err := c.List(watchcache.Filter{}, "", 0)
				if err != nil {
					t.Error(err)
					return
				}
				for _, o := range objs {
					if b, err := o.Encoded(key, upper); err != nil || !bytes.Equal(b, bytes.ToUpper(o.JSON)) {
						t.Errorf("%s: %q, %v", o.Key, b, err)
						return
					}
				}
				time.Sleep(time.Millisecond) // leave etcd some CPU
			}
		})
	}
	for i := range 100 {
		rev = e.put("ns", fmt.Sprintf("o%d", i%n), fmt.Sprint(i), nil)
	}
	close(stop)
	wg.Wait()
	if err := c.WaitFor(e.ctx, rev); err != nil {
		t.Fatal(err)
	}
	if used, kept := budget.Used(), keptBytes(t, c); used != kept {
		t.Fatalf("after the updates the budget says %d, the objects keep %d", used, kept)
	}
	encodeAll(t, c, "upper")
	if used, kept := budget.Used(), keptBytes(t, c); used != kept || used == 0 {
		t.Fatalf("after one more list the budget says %d, the objects keep %d (want equal, not 0)", used, kept)
	}
	if budget.Used() > budget.Max() {
		t.Fatalf("budget used %d over its %d", budget.Used(), budget.Max())
	}
	for i := range n {
		rev = e.del("ns", fmt.Sprintf("o%d", i))
	}
	if err := c.WaitFor(e.ctx, rev); err != nil {
		t.Fatal(err)
	}
	if used := budget.Used(); used != 0 {
		t.Fatalf("budget used %d once every object was deleted, want 0", used)
	}
}
