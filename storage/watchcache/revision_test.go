package watchcache_test

import (
	"encoding/json"
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

// A revision of several keys (another etcd writer's transaction) is
// applied whole: while the cache is still decoding it, it is not at that
// revision, so a waiter for it, a list and a watch from it see it whole
// or not at all — a watch from the revision gets none of its events, a
// list after it has all of its keys. (The cache used to advance with the
// revision's first event: a watch from it registered in between got the
// rest of it, as the fault harness found with multi-key transactions.)
func TestRevisionAppliedWhole(t *testing.T) {
	e := setup(t)
	blocked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	slow := func(kv storage.KeyValue) (*watchcache.Object, error) {
		if strings.HasSuffix(kv.Key, "/multi/k1") {
			once.Do(func() {
				close(blocked)
				<-release
			})
		}
		return decode(kv)
	}
	c := watchcache.New(watchcache.Config{Store: e.store, Prefix: prefix, Decode: slow, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	c.Start()
	defer c.Stop()
	if _, err := c.WaitFresh(e.ctx); err != nil {
		t.Fatal(err)
	}

	v, _ := json.Marshal(value{Data: "t"})
	var ops []clientv3.Op
	for _, k := range []string{"k0", "k1", "k2"} {
		ops = append(ops, clientv3.OpPut(prefix+"multi/"+k, string(v)))
	}
	resp, err := e.store.Client().Txn(e.ctx).Then(ops...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision
	select { // the cache is decoding k1 of the revision
	case <-blocked:
	case <-e.ctx.Done():
		t.Fatal("the cache never decoded the transaction")
	}

	type seen struct {
		listed []string
		first  watchcache.Item
		err    error
	}
	got := make(chan seen, 1)
	go func() {
		var s seen
		defer func() { got <- s }()
		if s.err = c.WaitFor(e.ctx, rev); s.err != nil {
			return
		}
		w, err := c.Watch(e.ctx, watchcache.WatchOptions{From: rev, Deadline: time.Now().Add(time.Minute)})
		if err != nil {
			s.err = err
			return
		}
		defer w.Stop()
		objs, _, _, err := c.List(watchcache.Filter{}, "", 0)
		if err != nil {
			s.err = err
			return
		}
		for _, o := range objs {
			s.listed = append(s.listed, o.Key)
		}
		s.first, s.err = w.Next(e.ctx)
	}()
	time.Sleep(100 * time.Millisecond) // the waiter waits (or, wrongly, has registered)
	close(release)
	after := e.put("ns", "after", "a", nil)

	s := <-got
	if s.err != nil {
		t.Fatal(s.err)
	}
	multi := 0
	for _, k := range s.listed {
		if strings.Contains(k, "/multi/") {
			multi++
		}
	}
	if multi != 3 {
		t.Errorf("list once the cache reached revision %d: %v, want the transaction's three keys", rev, s.listed)
	}
	if s.first.Object == nil || s.first.Rev != after {
		key := ""
		if s.first.Object != nil {
			key = s.first.Object.Key
		}
		t.Errorf("a watch from revision %d got %s %s at %d first, want the write after it (rev %d)", rev, s.first.Type, key, s.first.Rev, after)
	}
}
