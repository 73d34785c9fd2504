package watchcache

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/objwatch/objwatch/storage"
)

// TestSettleWaitsForTheRestOfARevision: the cache queues a revision's
// events to a watcher one by one under its lock, so a watcher may take
// part of a revision while the cache is still inside it. Settle waits for
// the cache to finish the revision, after which the rest is there to
// take: a watch ending at its deadline sends a revision of several keys
// whole (server/endpoints, serveWatch's finish).
func TestSettleWaitsForTheRestOfARevision(t *testing.T) {
	c := New(Config{Prefix: "/p/", MaxHistory: 1000, MaxSnapshots: 1, Buffer: 100, Decode: func(kv storage.KeyValue) (*Object, error) {
		return &Object{Key: kv.Key, Namespace: "ns", Rev: kv.ModRevision}, nil
	}})
	c.mu.Lock()
	c.ready, c.perNamespace = true, map[string]int{}
	c.mu.Unlock()
	third, release := make(chan struct{}), make(chan struct{})
	w, err := c.Watch(t.Context(), WatchOptions{Hold: func(it Item) bool {
		if strings.HasSuffix(it.Object.Key, "/k2") {
			close(third) // the cache is inside the revision, its lock held
			<-release
		}
		return false
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free() // before Stop, which takes the lock the held revision has

	var evs []storage.Event
	for i, k := range []string{"k0", "k1", "k2"} {
		evs = append(evs, storage.Event{Type: storage.Put, Revision: 7, More: i < 2, KV: storage.KeyValue{Key: "/p/ns/" + k, ModRevision: 7}})
	}
	applied := make(chan error, 1)
	go func() { applied <- c.apply(t.Context(), evs...) }()
	<-third
	var got []string
	for it, ok := w.TryNext(); ok; it, ok = w.TryNext() {
		got = append(got, it.Object.Key)
	}
	if len(got) != 2 {
		t.Fatalf("taken inside the revision: %v, want its first two events", got)
	}
	settled := make(chan struct{})
	go func() {
		w.Settle()
		close(settled)
	}()
	select {
	case <-settled:
		t.Fatal("Settle returned while the cache was inside the revision")
	case <-time.After(100 * time.Millisecond):
	}
	free()
	<-settled
	if it, ok := w.TryNext(); !ok || it.Object.Key != "/p/ns/k2" {
		t.Errorf("after Settle: %v %v, want the revision's last event", it.Object, ok)
	}
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
}
