package watchcache_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// TestInitialListStreamedOrPaged: a cache loads the same objects whether
// its store streams the list (etcd's RangeStream) or pages it, across
// many chunks, leaving out a value that does not decode; it is
// Initializing until then and not after.
func TestInitialListStreamedOrPaged(t *testing.T) {
	e := setup(t)
	const n = 2500
	for i := range n {
		e.put(fmt.Sprintf("ns%d", i%3), fmt.Sprintf("obj-%05d", i), strings.Repeat("x", 700), nil)
	}
	if _, err := e.store.Create(e.ctx, prefix+"ns0/bad", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"stream", "paged"} {
		t.Run(mode, func(t *testing.T) {
			var store storage.Interface = e.store
			if mode == "paged" {
				store = paged{e.store}
			}
			c := watchcache.New(watchcache.Config{Store: store, Prefix: prefix, Decode: decode, Log: quietLog})
			c.Start()
			t.Cleanup(c.Stop)
			if err := c.WaitFor(e.ctx, 1); err != nil {
				t.Fatal(err)
			}
			if _, init := c.Initializing(); init {
				t.Error("Initializing after the list loaded")
			}
			objs, _, _, err := c.List(watchcache.Filter{}, "", 0)
			if err != nil || len(objs) != n {
				t.Fatalf("List = %d objects, %v; want %d", len(objs), err, n)
			}
			for i := 1; i < len(objs); i++ {
				if objs[i-1].Key >= objs[i].Key {
					t.Fatalf("List out of order at %d: %s, %s", i, objs[i-1].Key, objs[i].Key)
				}
			}
		})
	}
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestInitialListRetry: a value to retry (ErrRetry) fails the initial list
// (even decoded among others on several goroutines): the cache stays
// Initializing, not ready, until a list decodes; then it loads.
func TestInitialListRetry(t *testing.T) {
	e := setup(t)
	for i := range 300 {
		e.put("ns", fmt.Sprintf("obj-%03d", i), "v", nil)
	}
	var fail = make(chan struct{})
	failing := func(kv storage.KeyValue) (*watchcache.Object, error) {
		select {
		case <-fail:
		default:
			if strings.HasSuffix(kv.Key, "obj-150") {
				return nil, fmt.Errorf("%w: webhook down", watchcache.ErrRetry)
			}
		}
		return decode(kv)
	}
	c := watchcache.New(watchcache.Config{Store: e.store, Prefix: prefix, Decode: failing, Log: quietLog})
	if _, init := c.Initializing(); init {
		t.Error("Initializing before Start")
	}
	c.Start()
	t.Cleanup(c.Stop)
	time.Sleep(300 * time.Millisecond)
	if _, init := c.Initializing(); !init || c.Ready() {
		t.Fatalf("Initializing %v, Ready %v while a value must be retried; want loading", init, c.Ready())
	}
	close(fail)
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	if err := c.WaitFor(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if c.Len() != 300 {
		t.Fatalf("cache has %d objects, want 300", c.Len())
	}
	if _, _, _, err := c.List(watchcache.Filter{}, "", 0); errors.Is(err, watchcache.ErrNotReady) {
		t.Fatal(err)
	}
}
