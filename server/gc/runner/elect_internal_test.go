package runner

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
)

// gatedGets is a real etcd store whose Gets, while gated, begin and then
// wait for the gate to open: a read that waits out an etcd election.
type gatedGets struct {
	storage.Interface
	began chan struct{} // receives when a gated Get begins
	gate  chan struct{} // closed: the Get goes on
}

func (g *gatedGets) Get(ctx context.Context, key string) (storage.KeyValue, error) {
	if g.gate != nil {
		g.began <- struct{}{}
		<-g.gate
	}
	return g.Interface.Get(ctx, key)
}

// A lease record that a read returns counts from when the read returned,
// not from when it began: a renewal written while another server's read
// waited must not look older than it is, or that server takes the lease
// over while the holder still runs the task (the robustness harness saw
// two collectors for 10 ms after an etcd leader's pause).
func TestLeaseCountsFromTheReadsReturn(t *testing.T) {
	st := etcdtest.Start(t)
	reg := registry.New()
	const lease = time.Second
	elector := func(s storage.Interface) *elector {
		return newElector(Config{Storage: s, Registry: reg, Log: slog.New(slog.DiscardHandler)}, "test-lease", lease)
	}
	holder := elector(st)
	slow := &gatedGets{Interface: st}
	taker := elector(slow)
	ctx := t.Context()

	if ok, err := holder.tryAcquireOrRenew(ctx); !ok || err != nil {
		t.Fatalf("holder's first attempt: %v %v", ok, err)
	}
	if ok, err := taker.tryAcquireOrRenew(ctx); ok || err != nil {
		t.Fatalf("the other took a live lease: %v %v", ok, err)
	}

	// The taker's read begins, the holder renews while it waits, and the
	// read returns the renewal.
	slow.began, slow.gate = make(chan struct{}), make(chan struct{})
	type result struct {
		ok  bool
		err error
	}
	res := make(chan result, 1)
	go func() {
		ok, err := taker.tryAcquireOrRenew(ctx)
		res <- result{ok, err}
	}()
	<-slow.began
	time.Sleep(600 * time.Millisecond)
	if ok, err := holder.tryAcquireOrRenew(ctx); !ok || err != nil {
		t.Fatalf("holder's renewal: %v %v", ok, err)
	}
	renewed := time.Now()
	close(slow.gate)
	if r := <-res; r.ok || r.err != nil {
		t.Fatalf("the other took the lease just renewed: %v %v", r.ok, r.err)
	}
	slow.gate = nil

	// More than a lease after the read began, less than one after the
	// renewal: still the holder's.
	time.Sleep(time.Until(renewed.Add(lease * 7 / 10)))
	ok, err := taker.tryAcquireOrRenew(ctx)
	if time.Since(renewed) >= lease {
		t.Skipf("the machine was too slow to check within the lease (%v)", time.Since(renewed))
	}
	if ok || err != nil {
		t.Fatalf("the other took the lease %v after its renewal (a %v lease): %v %v", time.Since(renewed), lease, ok, err)
	}
	// And a lease after the renewal, it expires.
	time.Sleep(time.Until(renewed.Add(lease + 100*time.Millisecond)))
	if ok, err := taker.tryAcquireOrRenew(ctx); !ok || err != nil {
		t.Fatalf("the other did not take the expired lease: %v %v", ok, err)
	}
}
