package watchcache_test

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/objwatch/objwatch/storage/watchcache"
)

// TestObjectEncoded: an encoding is made once per object and key, kept
// and shared by concurrent readers; other keys are separate; an error is
// returned and not kept. The bytes kept are the budget's in use.
func TestObjectEncoded(t *testing.T) {
	o := &watchcache.Object{Key: "/a", JSON: []byte(`{"a":1}`)}
	budget := watchcache.NewBudget(1 << 20)
	budget.Hold(o)
	var made atomic.Int64
	upper := func(b []byte) ([]byte, error) {
		made.Add(1)
		return bytes.ToUpper(b), nil
	}
	var wg sync.WaitGroup
	got := make([][]byte, 8)
	for i := range got {
		wg.Go(func() {
			b, err := o.Encoded("upper", upper)
			if err != nil {
				t.Error(err)
			}
			got[i] = b
		})
	}
	wg.Wait()
	for i, b := range got {
		if string(b) != `{"A":1}` {
			t.Fatalf("reader %d got %q", i, b)
		}
		if &b[0] != &got[0][0] {
			t.Errorf("reader %d got a copy of its own, not the kept encoding", i)
		}
	}
	if n := made.Load(); n < 1 || n > int64(len(got)) {
		t.Fatalf("made %d times", n)
	}
	before := made.Load()
	if b, _ := o.Encoded("upper", upper); string(b) != `{"A":1}` || made.Load() != before {
		t.Fatalf("second ask: %q, made %d more", b, made.Load()-before)
	}

	boom := errors.New("boom")
	if _, err := o.Encoded("fails", func([]byte) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("error: %v", err)
	}
	b, err := o.Encoded("fails", func(b []byte) ([]byte, error) { return []byte("ok"), nil })
	if err != nil || string(b) != "ok" {
		t.Fatalf("after an error the encoding is made again: %q %v", b, err)
	}
	if b, _ := o.Encoded("upper", upper); string(b) != `{"A":1}` {
		t.Fatalf("keys mixed up: %q", b)
	}
	if n := o.EncodedSize(); n != len(`{"A":1}`)+len("ok") {
		t.Fatalf("EncodedSize %d", n)
	}
	if used := budget.Used(); used != int64(o.EncodedSize()) {
		t.Fatalf("budget used %d, want the %d bytes kept", used, o.EncodedSize())
	}
	watchcache.Retire(o)
	if used := budget.Used(); used != 0 {
		t.Fatalf("budget used %d after the object left its cache, want 0", used)
	}
}
