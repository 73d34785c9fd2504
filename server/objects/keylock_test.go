package objects

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/objwatch/objwatch/storage"
)

func TestKeyLocks(t *testing.T) {
	k := newKeyLocks()
	ctx := context.Background()

	t.Run("one holder per key", func(t *testing.T) {
		var inside, overlaps atomic.Int32
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				turn, err := k.lock(ctx, "a")
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				turn.unlock()
			})
		}
		wg.Wait()
		if n := overlaps.Load(); n != 0 {
			t.Errorf("%d times a second holder of a held key, want 0", n)
		}
	})

	t.Run("other keys do not wait", func(t *testing.T) {
		turnA, err := k.lock(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		defer turnA.unlock()
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		turnB, err := k.lock(wctx, "b")
		if err != nil {
			t.Fatalf("lock of another key while %q is held: %v", "a", err)
		}
		turnB.unlock()
	})

	t.Run("a waiter gives up with its context", func(t *testing.T) {
		turn, err := k.lock(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if _, err := k.lock(wctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("lock of a held key until the deadline: %v, want DeadlineExceeded", err)
		}
		turn.unlock()
		turn2, err := k.lock(ctx, "a")
		if err != nil {
			t.Fatalf("lock after the waiter gave up: %v", err)
		}
		turn2.unlock()
	})

	t.Run("the last write passes to the next turn while turns queue", func(t *testing.T) {
		first, err := k.lock(ctx, "m")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := first.takeLast(); ok {
			t.Fatal("a first turn has a last write")
		}
		next := make(chan *keyTurn)
		go func() {
			turn, err := k.lock(ctx, "m")
			if err != nil {
				t.Error(err)
			}
			next <- turn
		}()
		for {
			k.mu.Lock()
			queued := k.locks["m"].refs == 2
			k.mu.Unlock()
			if queued {
				break
			}
			time.Sleep(time.Millisecond)
		}
		first.wrote(storage.KeyValue{Key: "m", Value: []byte("v"), ModRevision: 7})
		first.unlock()
		second := <-next
		if kv, ok := second.takeLast(); !ok || kv.ModRevision != 7 || string(kv.Value) != "v" {
			t.Fatalf("queued turn's last write = %+v, %v; want revision 7", kv, ok)
		}
		second.unlock() // wrote nothing
		third, err := k.lock(ctx, "m")
		if err != nil {
			t.Fatal(err)
		}
		defer third.unlock()
		if kv, ok := third.takeLast(); ok {
			t.Fatalf("a turn after one that wrote nothing (and no queue) has a last write: %+v", kv)
		}
	})

	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.locks) != 0 {
		t.Errorf("%d locks left with no holder, want 0 (the map must not grow with keys)", len(k.locks))
	}
}
