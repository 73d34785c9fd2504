package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestKeyLocks(t *testing.T) {
	k := newKeyLocks()
	ctx := context.Background()

	t.Run("one holder per key", func(t *testing.T) {
		var inside, overlaps atomic.Int32
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				unlock, err := k.lock(ctx, "a")
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				unlock()
			})
		}
		wg.Wait()
		if n := overlaps.Load(); n != 0 {
			t.Errorf("%d times a second holder of a held key, want 0", n)
		}
	})

	t.Run("other keys do not wait", func(t *testing.T) {
		unlockA, err := k.lock(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		defer unlockA()
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		unlockB, err := k.lock(wctx, "b")
		if err != nil {
			t.Fatalf("lock of another key while %q is held: %v", "a", err)
		}
		unlockB()
	})

	t.Run("a waiter gives up with its context", func(t *testing.T) {
		unlock, err := k.lock(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if _, err := k.lock(wctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("lock of a held key until the deadline: %v, want DeadlineExceeded", err)
		}
		unlock()
		unlock2, err := k.lock(ctx, "a")
		if err != nil {
			t.Fatalf("lock after the waiter gave up: %v", err)
		}
		unlock2()
	})

	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.locks) != 0 {
		t.Errorf("%d locks left with no holder, want 0 (the map must not grow with keys)", len(k.locks))
	}
}
