package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
	"github.com/objwatch/objwatch/storage/storagetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, etcdIgnores()...)
}

func etcdIgnores() []goleak.Option {
	// Goroutines that etcd's client libraries keep for the process lifetime.
	return []goleak.Option{
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	}
}

func startStore(t *testing.T) *etcd.Store { return etcdtest.Start(t) }

func TestConformance(t *testing.T) {
	s := startStore(t)
	storagetest.Run(t, func(*testing.T) storage.Interface { return s })
}

func TestCompactorKeepsOneInterval(t *testing.T) {
	s := startStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.RunCompactor(ctx, 50*time.Millisecond, discardLogger(), nil)
	}()
	defer func() { cancel(); <-done }()
	first, err := s.Create(ctx, "/c/a", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := s.Create(ctx, "/c/"+time.Now().String(), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.List(ctx, "/c/", storage.ListOptions{Revision: first.ModRevision}); err != nil {
			if !isCompacted(err) {
				t.Fatalf("List: %v", err)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("revision %d never compacted", first.ModRevision)
}

// TestCompactedByAnotherStore: a store learns etcd's compaction revision
// exactly when another client (another server's compactor) compacted,
// which it has not seen itself; revisions from it on are not compacted.
func TestCompactedByAnotherStore(t *testing.T) {
	s := startStore(t)
	cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: s.Client().Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	other, err := etcd.New(cli, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var revs []int64
	for i := range 5 {
		kv, err := s.Create(ctx, fmt.Sprintf("/x/%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, kv.ModRevision)
	}
	if err := other.Compact(ctx, revs[3]); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ rev, want int64 }{{revs[0], revs[3]}, {revs[2], revs[3]}, {revs[3], 0}, {revs[4], 0}, {revs[4] + 100, 0}} {
		if got, err := s.Compacted(ctx, tc.rev); err != nil || got != tc.want {
			t.Fatalf("Compacted(%d) = %d, %v; want %d", tc.rev, got, err, tc.want)
		}
	}
}

// TestWatchEndsBetweenRevisions: a watch whose context is cancelled (as
// the health guard cancels it) while its owner has read only part of a
// revision of many keys still delivers the rest of that revision before
// it ends, so that an owner resuming from the last revision it saw plus
// one misses nothing. (The watch cache resumed that way and lost 12 of
// 1,000,000 objects written 100 to a transaction when the guard cut its
// watch.)
func TestWatchEndsBetweenRevisions(t *testing.T) {
	s := startStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const keys = 100 // etcd's default --max-txn-ops is 128
	ops := make([]clientv3.Op, keys)
	for i := range ops {
		ops[i] = clientv3.OpPut(fmt.Sprintf("/multi/%03d", i), "v")
	}
	resp, err := s.Client().Txn(ctx).Then(ops...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision
	for round := range 20 {
		wctx, stop := context.WithCancelCause(ctx)
		w, err := s.Watch(wctx, "/multi/", start+1)
		if err != nil {
			t.Fatal(err)
		}
		ev := <-w.Events()
		if ev.Type != storage.Put || ev.Revision != rev {
			t.Fatalf("first event %+v, want a put at %d", ev, rev)
		}
		if !ev.More {
			t.Fatalf("round %d: the first of %d events of a revision is not marked More", round, keys)
		}
		stop(errors.New("cut by the test"))
		seen := 1
		var end storage.Event
		for e := range w.Events() {
			if e.Type == storage.Error {
				end = e
				break
			}
			seen++
			// Every event of the revision but its last says more follow.
			if e.More != (seen < keys) {
				t.Fatalf("round %d: event %d of %d has More %v", round, seen, keys, e.More)
			}
		}
		w.Stop()
		if seen != keys {
			t.Fatalf("round %d: %d of the revision's %d events before the watch ended (%v)", round, seen, keys, end.Err)
		}
		if end.Err == nil || !strings.Contains(end.Err.Error(), "cut by the test") {
			t.Fatalf("round %d: the watch ended with %+v, want the cause", round, end)
		}
	}
}
