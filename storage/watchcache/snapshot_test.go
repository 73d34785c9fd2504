package watchcache_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// names is "name@rev" of each object.
func names(objs []*watchcache.Object) string {
	var s []string
	for _, o := range objs {
		s = append(s, fmt.Sprintf("%s@%d", o.Name, o.Rev))
	}
	return strings.Join(s, ",")
}

// storeNames is names of a store page's keys.
func storeNames(kvs []storage.KeyValue) string {
	var s []string
	for _, kv := range kvs {
		s = append(s, fmt.Sprintf("%s@%d", kv.Key[strings.LastIndex(kv.Key, "/")+1:], kv.ModRevision))
	}
	return strings.Join(s, ",")
}

// TestListAtServesEachRevision: a page at a past revision is the state
// etcd has at that revision, whatever changed since.
func TestListAtServesEachRevision(t *testing.T) {
	e := setup(t)
	c := e.cache(watchcache.Config{})
	if err := c.WaitFor(e.ctx, 0); err != nil {
		t.Fatal(err)
	}
	var revs []int64
	for i := range 6 {
		revs = append(revs, e.put("a", fmt.Sprintf("o%d", i), "v", nil))
	}
	revs = append(revs, e.put("a", "o2", "changed", nil), e.del("a", "o4"), e.put("b", "o9", "v", nil))
	if err := c.WaitFor(e.ctx, revs[len(revs)-1]); err != nil {
		t.Fatal(err)
	}
	for _, rev := range append(revs, 0) {
		for _, ns := range []string{"", "a"} {
			for _, limit := range []int{0, 1, 2, 4} {
				walkAgrees(t, e, c, ns, rev, limit)
			}
		}
	}
	// Newer than the cache: the caller must wait first.
	if _, err := c.ListAt(watchcache.Filter{}, revs[len(revs)-1]+100, "", 1); !errors.Is(err, watchcache.ErrNoSnapshot) {
		t.Fatalf("ListAt(future) = %v, want ErrNoSnapshot", err)
	}
}

// walkAgrees walks namespace ns (all: "") at rev (0: the cache's) page by
// page in the cache and in etcd, and fails where they differ.
func walkAgrees(t *testing.T, e *env, c *watchcache.Cache, ns string, rev int64, limit int) {
	t.Helper()
	start, pfx := "", prefix
	if ns != "" {
		pfx += ns + "/"
	}
	if rev == 0 {
		rev = c.Revision()
	}
	for page := 0; ; page++ {
		p, err := c.ListAt(watchcache.Filter{Namespace: ns}, rev, start, limit)
		if err != nil {
			t.Fatalf("ListAt(%d, %q, %d): %v", rev, start, limit, err)
		}
		lr, err := e.store.List(e.ctx, pfx, storage.ListOptions{Revision: rev, Limit: int64(limit), StartKey: start})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := names(p.Objects), storeNames(lr.KVs); got != want || p.More != lr.More || p.Rev != rev {
			t.Fatalf("rev %d limit %d page %d: cache %s more=%v rev=%d, etcd %s more=%v", rev, limit, page, got, p.More, p.Rev, want, lr.More)
		}
		if p.More && p.Remaining != lr.Remaining {
			t.Fatalf("rev %d limit %d page %d: remaining %d, etcd %d", rev, limit, page, p.Remaining, lr.Remaining)
		}
		if !p.More {
			break
		}
		start = p.Objects[len(p.Objects)-1].Key + "\x00"
	}
}

// TestListAtSelectorPages: with a selector, pages hold matching objects
// only, More says whether keys follow (matching or not, as etcd) and no
// remaining count is given; a namespace alone keeps the count.
func TestListAtSelectorPages(t *testing.T) {
	e := setup(t)
	c := e.cache(watchcache.Config{})
	var last int64
	for i := range 10 {
		app := "x"
		if i%3 == 0 {
			app = "y"
		}
		last = e.put(fmt.Sprintf("ns%d", i%2), fmt.Sprintf("o%d", i), "v", map[string]string{"app": app})
	}
	if err := c.WaitFor(e.ctx, last); err != nil {
		t.Fatal(err)
	}
	y := labels.SelectorFromSet(labels.Set{"app": "y"}) // o0, o3, o6, o9
	// The live state uses the label index; a past one scans the snapshot:
	// both give the same pages.
	for _, rev := range []int64{0, last} {
		p, err := c.ListAt(watchcache.Filter{Labels: y}, rev, "", 2)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(p.Objects); !strings.HasPrefix(got, "o0@") || len(p.Objects) != 2 || !p.More || p.Remaining != -1 {
			t.Fatalf("rev %d: page 1 = %s more=%v remaining=%d", rev, got, p.More, p.Remaining)
		}
		// ns0 holds o0 o2 o4 o6 o8: y selects o0 o6, and o8 follows.
		p, _ = c.ListAt(watchcache.Filter{Namespace: "ns0", Labels: y}, rev, "", 2)
		if len(p.Objects) != 2 || p.Objects[1].Name != "o6" || !p.More {
			t.Fatalf("rev %d: ns0 page = %s more=%v, want o0,o6 with more (o8 follows)", rev, names(p.Objects), p.More)
		}
		p, _ = c.ListAt(watchcache.Filter{Namespace: "ns0"}, rev, "", 2)
		if len(p.Objects) != 2 || !p.More || p.Remaining != 3 {
			t.Fatalf("rev %d: ns0 page = %s more=%v remaining=%d, want 2 and 3 remaining", rev, names(p.Objects), p.More, p.Remaining)
		}
		p, _ = c.ListAt(watchcache.Filter{Namespace: "ns0"}, rev, p.Objects[1].Key+"\x00", 2)
		if len(p.Objects) != 2 || !p.More || p.Remaining != 1 {
			t.Fatalf("rev %d: ns0 page 2 = %s more=%v remaining=%d, want 2 and 1 remaining", rev, names(p.Objects), p.More, p.Remaining)
		}
	}
}

// TestSnapshotsPrunedWithHistory: snapshots go with the history that
// covers them, and MaxSnapshots bounds them.
func TestSnapshotsPrunedWithHistory(t *testing.T) {
	e := setup(t)
	c := e.cache(watchcache.Config{MaxHistory: 5, MaxSnapshots: 1000})
	if err := c.WaitFor(e.ctx, 0); err != nil {
		t.Fatal(err)
	}
	var revs []int64
	for i := range 20 {
		revs = append(revs, e.put("a", fmt.Sprintf("o%d", i), "v", nil))
		listAt(t, e, c, revs[i])
	}
	n, oldest := c.Snapshots()
	if n > 7 || oldest < revs[12] {
		t.Fatalf("Snapshots() = %d from %d; want at most 7 (5 events of history) from %d on", n, oldest, revs[12])
	}
	if _, err := c.ListAt(watchcache.Filter{}, revs[2], "", 1); !errors.Is(err, watchcache.ErrNoSnapshot) {
		t.Fatalf("ListAt(pruned revision) = %v, want ErrNoSnapshot", err)
	}
	p, err := c.ListAt(watchcache.Filter{}, oldest, "", 0)
	if err != nil || len(p.Objects) != int(oldest-revs[0]+1) {
		t.Fatalf("ListAt(oldest %d) = %s, %v", oldest, names(p.Objects), err)
	}

	_, c2, last := cacheAfterWrites(t, watchcache.Config{MaxSnapshots: 3}, 10)
	if n, oldest := c2.Snapshots(); n != 3 || oldest != last-2 {
		t.Fatalf("MaxSnapshots 3: Snapshots() = %d from %d, want 3 from %d", n, oldest, last-2)
	}
}

// TestSnapshotsPrunedWithWindow: history older than Window goes on the
// cache's tick, and its snapshots with it.
func TestSnapshotsPrunedWithWindow(t *testing.T) {
	_, c, last := cacheAfterWrites(t, watchcache.Config{Window: 10 * time.Millisecond}, 5)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, oldest := c.Snapshots()
		if n == 1 && oldest == last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Snapshots() = %d from %d; want only the live state %d", n, oldest, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The live state still serves every page.
	if p, err := c.ListAt(watchcache.Filter{}, last, "", 2); err != nil || len(p.Objects) != 2 || p.Remaining != 3 {
		t.Fatalf("ListAt(live) = %s remaining=%d, %v", names(p.Objects), p.Remaining, err)
	}
}

// cacheAfterWrites starts a cache with cfg, then creates n objects o0...
// in namespace a, each read by a list once the cache has it (so that each
// revision has its snapshot); last is the last write's revision.
func cacheAfterWrites(t *testing.T, cfg watchcache.Config, n int) (e *env, c *watchcache.Cache, last int64) {
	t.Helper()
	e = setup(t)
	c = e.cache(cfg)
	if err := c.WaitFor(e.ctx, 0); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		last = e.put("a", fmt.Sprintf("o%d", i), "v", nil)
		listAt(t, e, c, last)
	}
	return e, c, last
}

// listAt waits for the cache to reach rev and lists its first page, as a
// paginated client would.
func listAt(t *testing.T, e *env, c *watchcache.Cache, rev int64) {
	t.Helper()
	if err := c.WaitFor(e.ctx, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListAt(watchcache.Filter{}, 0, "", 1); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotsTakenByReads: writes take no snapshot; a read takes one of
// the state it reads, current or past, and the next read of that state
// shares it.
func TestSnapshotsTakenByReads(t *testing.T) {
	e := setup(t)
	c := e.cache(watchcache.Config{})
	if err := c.WaitFor(e.ctx, 0); err != nil {
		t.Fatal(err)
	}
	var revs []int64
	for i := range 5 {
		revs = append(revs, e.put("a", fmt.Sprintf("o%d", i), "v", nil))
	}
	if err := c.WaitFor(e.ctx, revs[4]); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Snapshots(); n != 0 {
		t.Fatalf("Snapshots() after writes = %d, want 0", n)
	}
	walkAgrees(t, e, c, "", revs[1], 2)
	walkAgrees(t, e, c, "a", revs[1], 1)
	if n, oldest := c.Snapshots(); n != 1 || oldest != revs[1] {
		t.Fatalf("Snapshots() after walks at %d = %d from %d, want 1 from %d", revs[1], n, oldest, revs[1])
	}
	walkAgrees(t, e, c, "", 0, 2)
	walkAgrees(t, e, c, "", revs[4], 3)
	if n, _ := c.Snapshots(); n != 2 {
		t.Fatalf("Snapshots() after walks of the live state = %d, want 2", n)
	}
	// A delete and a re-create after the snapshot's revision: both pasts
	// read right.
	e.del("a", "o0")
	last := e.put("a", "o0", "again", nil)
	listAt(t, e, c, last)
	for _, rev := range append(revs, last-1, last) {
		walkAgrees(t, e, c, "", rev, 2)
	}
}

// TestListAtDuringWrites: pages read from a snapshot while the cache
// applies writes stay the same (run with -race: a snapshot's tree is never
// written).
func TestListAtDuringWrites(t *testing.T) {
	e, c, last := cacheAfterWrites(t, watchcache.Config{}, 20)
	want, err := c.ListAt(watchcache.Filter{}, last, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 300 {
			p, err := c.ListAt(watchcache.Filter{Namespace: "a"}, last, "", 7)
			if err != nil || names(p.Objects) != names(want.Objects[:7]) || p.Remaining != 13 {
				t.Errorf("ListAt(%d) during writes = %s remaining %d, %v", last, names(p.Objects), p.Remaining, err)
				return
			}
		}
	}()
	for i := range 30 {
		if i%3 == 0 && i < 20 {
			e.del("a", fmt.Sprintf("o%d", i))
		} else {
			e.put("a", fmt.Sprintf("o%d", i), "changed", nil)
		}
	}
	<-done
	if p, err := c.ListAt(watchcache.Filter{}, last, "", 0); err != nil || names(p.Objects) != names(want.Objects) {
		t.Fatalf("ListAt(%d) after writes = %s, %v; want %s", last, names(p.Objects), err, names(want.Objects))
	}
}
