package watchcache_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// otherStore is a store on e's etcd through a client of its own, as
// another server's: its compactions are nothing e.store has seen.
func (e *env) otherStore() *etcd.Store {
	e.t.Helper()
	cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: e.store.Client().Endpoints()})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cli.Close() })
	s, err := etcd.New(cli, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// compactPoll is the tests' CompactionPoll.
const compactPoll = 100 * time.Millisecond

// waitNoSnapshot waits, for at most 20 polls, until ListAt at rev is
// ErrNoSnapshot, and fails if it never is, or fails otherwise.
func waitNoSnapshot(t *testing.T, c *watchcache.Cache, rev int64) {
	t.Helper()
	deadline := time.Now().Add(20 * compactPoll)
	for {
		_, err := c.ListAt(watchcache.Filter{}, rev, "", 2)
		switch {
		case errors.Is(err, watchcache.ErrNoSnapshot):
			return
		case err != nil:
			t.Fatalf("ListAt(%d) = %v, want ErrNoSnapshot", rev, err)
		case time.Now().After(deadline):
			t.Fatalf("ListAt(%d) still served %v after the store compacted it", rev, 20*compactPoll)
		}
		time.Sleep(compactPoll / 5)
	}
}

// TestSnapshotsDroppedWhenCompacted: once etcd has compacted past a
// snapshot's revision, by the cache's own store or through another client
// (another server's compactor), ListAt at a compacted revision is
// ErrNoSnapshot within a few polls, and the snapshots only it needed are
// dropped; revisions from the compaction revision on, and the live state
// (even when its snapshot is older than the compaction), are still served
// as etcd serves them.
func TestSnapshotsDroppedWhenCompacted(t *testing.T) {
	e := setup(t)
	c := e.cache(watchcache.Config{CompactionPoll: compactPoll})
	if err := c.WaitFor(e.ctx, 0); err != nil {
		t.Fatal(err)
	}
	var revs []int64
	for i := range 6 {
		revs = append(revs, e.put("a", fmt.Sprintf("o%d", i), "v", nil))
	}
	if err := c.WaitFor(e.ctx, revs[5]); err != nil {
		t.Fatal(err)
	}
	// Polls that find nothing compacted drop nothing.
	time.Sleep(3 * compactPoll)
	for _, rev := range revs {
		walkAgrees(t, e, c, "", rev, 2)
	}

	// Compacted by the cache's own store.
	if err := e.store.Compact(e.ctx, revs[3]); err != nil {
		t.Fatal(err)
	}
	waitNoSnapshot(t, c, revs[0])
	for _, rev := range revs[:3] {
		if _, err := c.ListAt(watchcache.Filter{}, rev, "", 2); !errors.Is(err, watchcache.ErrNoSnapshot) {
			t.Fatalf("ListAt(%d) after compaction to %d = %v, want ErrNoSnapshot", rev, revs[3], err)
		}
		if _, err := e.store.List(e.ctx, prefix, storage.ListOptions{Revision: rev, Limit: 2}); !errors.Is(err, storage.ErrCompacted) {
			t.Fatalf("etcd List(%d) = %v, want ErrCompacted", rev, err)
		}
	}
	for _, rev := range append(revs[3:], 0) {
		walkAgrees(t, e, c, "", rev, 2)
	}
	if n, oldest := c.Snapshots(); n != 3 || oldest != revs[3] {
		t.Fatalf("Snapshots() = %d from %d, want 3 from %d", n, oldest, revs[3])
	}

	// Compacted through another client, past the live state's snapshot:
	// writes elsewhere move etcd on, and the cache with them (progress).
	var other int64
	for i := range 3 {
		kv, err := e.store.Create(e.ctx, fmt.Sprintf("/elsewhere/%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		other = kv.ModRevision
	}
	if err := c.WaitFor(e.ctx, other); err != nil {
		t.Fatal(err)
	}
	walkAgrees(t, e, c, "", other-1, 2) // from the live snapshot at revs[5]
	if err := e.otherStore().Compact(e.ctx, other); err != nil {
		t.Fatal(err)
	}
	waitNoSnapshot(t, c, other-1)
	for _, rev := range []int64{revs[3], revs[5], other - 2} {
		if _, err := c.ListAt(watchcache.Filter{}, rev, "", 2); !errors.Is(err, watchcache.ErrNoSnapshot) {
			t.Fatalf("ListAt(%d) after compaction to %d = %v, want ErrNoSnapshot", rev, other, err)
		}
	}
	walkAgrees(t, e, c, "", other, 2)
	walkAgrees(t, e, c, "", 0, 2)
	if n, oldest := c.Snapshots(); n != 1 || oldest != other {
		t.Fatalf("Snapshots() = %d from %d, want the live state only, from %d", n, oldest, other)
	}
	// The live state still changes, and its snapshots serve again.
	last := e.put("a", "o9", "v", nil)
	if err := c.WaitFor(e.ctx, last); err != nil {
		t.Fatal(err)
	}
	walkAgrees(t, e, c, "", other, 2)
	walkAgrees(t, e, c, "", last, 2)
}
