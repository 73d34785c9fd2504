package etcd_test

import (
	"context"
	"testing"
	"time"

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
		s.RunCompactor(ctx, 50*time.Millisecond, discardLogger())
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
