package lifecycle_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/objwatch/objwatch/server/lifecycle"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
	"github.com/objwatch/objwatch/storage/watchcache"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

// gated is a store whose lists wait until gate is closed: a watch cache
// over it does not load until then.
type gated struct {
	storage.Interface
	gate chan struct{}
}

func (g *gated) List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListResult, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return storage.ListResult{}, ctx.Err()
	}
	return g.Interface.List(ctx, prefix, opts)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// slowCache starts a watch cache over a real etcd that loads once the
// returned gate is closed.
func slowCache(t *testing.T) (*watchcache.Cache, chan struct{}) {
	gate := make(chan struct{})
	c := watchcache.New(watchcache.Config{
		Store: &gated{Interface: etcdtest.Start(t), gate: gate}, Prefix: "/registry/things/", Log: quiet,
		Decode: func(kv storage.KeyValue) (*watchcache.Object, error) {
			return &watchcache.Object{Key: kv.Key, Rev: kv.ModRevision, JSON: kv.Value}, nil
		},
	})
	c.Start()
	t.Cleanup(c.Stop)
	return c, gate
}

func pendingOf(name string, c *watchcache.Cache) func() []string {
	return func() []string {
		if c.Ready() {
			return nil
		}
		return []string{name}
	}
}

// TestStorageReadiness: not ready while a cache loads (naming it), nor
// before the CRDs were read (Known), ready once both are done, and
// staying ready.
func TestStorageReadiness(t *testing.T) {
	c, gate := slowCache(t)
	r := &lifecycle.StorageReadiness{Pending: pendingOf("v1/things", c), Timeout: time.Minute, Log: quiet}
	if err := r.Check(); err == nil {
		t.Fatal("ready before the caches started")
	}
	r.Start()
	time.Sleep(100 * time.Millisecond)
	if err := r.Check(); err == nil || !strings.Contains(err.Error(), "v1/things") {
		t.Fatalf("Check while the cache loads = %v, want an error naming it", err)
	}
	close(gate)
	if err := c.WaitFor(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Check(); err == nil || !strings.Contains(err.Error(), "custom resource definitions") {
		t.Fatalf("Check before the CRDs were read = %v, want an error naming them", err)
	}
	r.Known()
	deadline := time.Now().Add(10 * time.Second)
	for r.Check() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready 10 s after the cache could load: %v", r.Check())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !c.Ready() {
		t.Fatal("ready before the cache loaded")
	}
}

// TestStorageReadinessTimeout: a cache that never loads keeps the server
// unready only until the timeout (Kubernetes' storage-initialization
// timeout), after which the check passes for good.
func TestStorageReadinessTimeout(t *testing.T) {
	c, _ := slowCache(t)
	r := &lifecycle.StorageReadiness{Pending: pendingOf("v1/things", c), Timeout: 300 * time.Millisecond, Log: quiet}
	r.Start()
	r.Known()
	if err := r.Check(); err == nil {
		t.Fatal("ready at once while the cache cannot load")
	}
	time.Sleep(400 * time.Millisecond)
	if err := r.Check(); err != nil {
		t.Fatalf("Check after the timeout = %v, want ready", err)
	}
	if c.Ready() {
		t.Fatal("the cache loaded: the test shows nothing")
	}
}
