package health_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
	"github.com/objwatch/objwatch/storage/health"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

// failing is a store whose Revision probe fails while down is set.
type failing struct {
	*etcd.Store
	down chan bool
}

func (f *failing) Revision(ctx context.Context) (int64, error) {
	select {
	case d := <-f.down:
		f.down <- d
		if d {
			return 0, fmt.Errorf("probe: %w", context.DeadlineExceeded) // as a probe that timed out
		}
	default:
	}
	return f.Store.Revision(ctx)
}

// TestGuard: while the probes fail the guarded store refuses requests and
// ends its watches with an Error event wrapping storage.ErrUnavailable;
// once one succeeds it serves again.
func TestGuard(t *testing.T) {
	f := &failing{Store: etcdtest.Start(t), down: make(chan bool, 1)}
	m := health.New(f, health.Config{Interval: 20 * time.Millisecond, UnhealthyAfter: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	s := m.Store()
	if _, err := s.Create(ctx, "/k/a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	w, err := s.Watch(ctx, "/k/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	f.down <- true
	select {
	case ev := <-w.Events():
		if ev.Type != storage.Error || !errors.Is(ev.Err, storage.ErrUnavailable) {
			t.Fatalf("watch event after the store went = %v %v, want an Error wrapping ErrUnavailable", ev.Type, ev.Err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch not ended 5 s after the probes started failing")
	}
	if _, ok := <-w.Events(); ok {
		t.Error("events after the Error")
	}
	if m.Err() == nil || m.Outages() != 1 {
		t.Errorf("Err() = %v, Outages() = %d; want unavailable, 1", m.Err(), m.Outages())
	}
	if _, err := s.Get(ctx, "/k/a"); !errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("Get while unavailable = %v, want ErrUnavailable", err)
	}
	if _, err := s.Watch(ctx, "/k/", 0); !errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("Watch while unavailable = %v, want ErrUnavailable", err)
	}
	<-f.down
	f.down <- false
	deadline := time.Now().Add(5 * time.Second)
	for m.Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("still unavailable 5 s after the probes succeed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if kv, err := s.Get(ctx, "/k/a"); err != nil || string(kv.Value) != "1" {
		t.Errorf("Get after recovery = %v, %v", kv, err)
	}
	// A plain Stop ends a watch without an Error.
	w2, err := s.Watch(ctx, "/k/", 0)
	if err != nil {
		t.Fatal(err)
	}
	w2.Stop()
	for ev := range w2.Events() {
		t.Errorf("event after Stop: %v %v", ev.Type, ev.Err)
	}
}
