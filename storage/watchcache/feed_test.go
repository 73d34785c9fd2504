package watchcache_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// cuttable is a store whose watches can be ended with an error (their
// context cancelled with it as the cause) and refused while it is cut.
type cuttable struct {
	storage.Interface
	mu      sync.Mutex
	cut     error
	cancels []context.CancelCauseFunc
	watches int
}

func (c *cuttable) Watch(ctx context.Context, prefix string, from int64) (storage.Watcher, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut != nil {
		return nil, c.cut
	}
	c.watches++
	ctx, cancel := context.WithCancelCause(ctx)
	c.cancels = append(c.cancels, cancel)
	return c.Interface.Watch(ctx, prefix, from)
}

func (c *cuttable) set(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = err
	for _, cancel := range c.cancels {
		if err != nil {
			cancel(err)
		}
	}
	if err != nil {
		c.cancels = nil
	}
}

// TestFeedFailureKeepsHistory: when the store's watch fails, the cache
// ends its watchers with the error, refuses new ones, and once the store
// is back watches again from its revision instead of relisting: a watch
// from before the outage is served from its history with every change
// made meanwhile.
func TestFeedFailureKeepsHistory(t *testing.T) {
	e := setup(t)
	store := &cuttable{Interface: e.store}
	c := watchcache.New(watchcache.Config{Store: store, Prefix: prefix, Decode: decode, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	c.Start()
	defer c.Stop()
	before := e.put("ns", "a", "1", nil)
	if err := c.WaitFor(e.ctx, before); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(e.ctx, watchcache.WatchOptions{From: before, Deadline: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	gone := fmt.Errorf("%w: test cut", storage.ErrUnavailable)
	store.set(gone)
	if _, err := w.Next(e.ctx); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("watcher after the feed failed: %v, want ErrUnavailable", err)
	}
	var revs []int64
	for i := range 3 {
		revs = append(revs, e.put("ns", fmt.Sprint("b", i), "x", nil))
	}
	if _, err := c.Watch(e.ctx, watchcache.WatchOptions{From: before, Deadline: time.Now().Add(time.Minute)}); !errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("new watch while the feed is down: %v, want ErrUnavailable", err)
	}
	wctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	if err := c.WaitFor(wctx, revs[2]); !errors.Is(err, watchcache.ErrNotReady) {
		t.Errorf("WaitFor(newer) while the feed is down: %v, want ErrNotReady", err)
	}
	cancel()
	if objs, _, _, err := c.List(watchcache.Filter{}, "", 0); err != nil || len(objs) != 1 {
		t.Errorf("List while the feed is down = %d objects, %v; want the cached one", len(objs), err)
	}

	store.set(nil)
	// Until the cache watches again, it says it cannot catch up.
	for err := c.WaitFor(e.ctx, revs[2]); err != nil; err = c.WaitFor(e.ctx, revs[2]) {
		if !errors.Is(err, watchcache.ErrNotReady) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	w2, err := c.Watch(e.ctx, watchcache.WatchOptions{From: before, Deadline: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatalf("watch from before the outage: %v; want it served from the kept history", err)
	}
	defer w2.Stop()
	for _, rev := range revs {
		it, err := w2.Next(e.ctx)
		if err != nil || it.Rev != rev {
			t.Fatalf("resumed watch: %v %v, want the event at %d", it, err, rev)
		}
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.watches != 2 {
		t.Errorf("%d store watches, want 2 (one resumed)", store.watches)
	}
}

// TestFeedCutInsideARevision: a feed cut while the cache is in the middle
// of a revision of many keys (a transaction, as a CRD's deletion or
// another etcd writer makes) still gives the cache every key of it: the
// cache resumes from the revision after the last it applied, so the
// store's watch must end between revisions (storage.Watcher). The cut
// lands while the cache decodes the revision's first event; before
// storage/etcd delivered the rest first, the cache lost most of the keys
// (as a 1M-object run lost 12).
func TestFeedCutInsideARevision(t *testing.T) {
	e := setup(t)
	store := &cuttable{Interface: e.store}
	const keys = 100 // etcd's default --max-txn-ops is 128
	var once sync.Once
	decoding, cutDone := make(chan struct{}), make(chan struct{})
	dec := func(kv storage.KeyValue) (*watchcache.Object, error) {
		if strings.HasPrefix(kv.Key, prefix+"multi/") {
			once.Do(func() { close(decoding); <-cutDone })
		}
		return decode(kv)
	}
	c := watchcache.New(watchcache.Config{Store: store, Prefix: prefix, Decode: dec, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	c.Start()
	defer c.Stop()
	if err := c.WaitFor(e.ctx, e.put("ns", "before", "1", nil)); err != nil {
		t.Fatal(err)
	}
	ops := make([]clientv3.Op, keys)
	for i := range ops {
		b, _ := json.Marshal(value{Data: fmt.Sprint(i)})
		ops[i] = clientv3.OpPut(fmt.Sprintf("%smulti/k%03d", prefix, i), string(b))
	}
	resp, err := e.store.Client().Txn(e.ctx).Then(ops...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-decoding:
	case <-e.ctx.Done():
		t.Fatal("the cache never decoded the transaction's first key")
	}
	store.set(fmt.Errorf("%w: test cut", storage.ErrUnavailable))
	store.set(nil)
	close(cutDone)

	after := e.put("ns", "after", "2", nil)
	// Until the cache watches again, it says it cannot catch up.
	for err := c.WaitFor(e.ctx, after); err != nil; err = c.WaitFor(e.ctx, after) {
		if !errors.Is(err, watchcache.ErrNotReady) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	objs, _, _, err := c.List(watchcache.Filter{Namespace: "multi"}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != keys {
		t.Fatalf("the cache holds %d of the %d keys written at revision %d", len(objs), keys, resp.Header.Revision)
	}
}
