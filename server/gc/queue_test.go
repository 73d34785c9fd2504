package gc

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		// grpc and etcd keep process-wide background goroutines.
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

func mustGet(t *testing.T, q *queue, want string) {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		k, _ := q.get()
		got <- k
	}()
	select {
	case k := <-got:
		if k != want {
			t.Fatalf("get = %q, want %q", k, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("get: nothing within 5 s, want %q", want)
	}
}

func TestQueueOnceAndInOrder(t *testing.T) {
	q := newQueue()
	defer q.close()
	for _, k := range []string{"a", "b", "a", "c", "b"} {
		q.add(k)
	}
	if n := q.len(); n != 3 {
		t.Fatalf("len = %d, want 3", n)
	}
	mustGet(t, q, "a")
	mustGet(t, q, "b")
	mustGet(t, q, "c")
}

// A key added while it is processed is not handed to a second worker; it
// comes back after done.
func TestQueueNotTwiceAtOnce(t *testing.T) {
	q := newQueue()
	defer q.close()
	q.add("a")
	mustGet(t, q, "a")
	q.add("a")
	q.add("b")
	mustGet(t, q, "b") // not a
	if n := q.len(); n != 0 {
		t.Fatalf("len = %d while a is processed, want 0", n)
	}
	q.done("a", false)
	mustGet(t, q, "a")
}

// A failed key comes back after a delay that doubles per failure.
func TestQueueRetryBackoff(t *testing.T) {
	q := newQueue()
	defer q.close()
	q.add("a")
	mustGet(t, q, "a")
	start := time.Now()
	q.done("a", true)
	mustGet(t, q, "a")
	first := time.Since(start)
	if first < retryBase {
		t.Fatalf("first retry after %v, want ≥ %v", first, retryBase)
	}
	start = time.Now()
	q.done("a", true)
	mustGet(t, q, "a")
	if second := time.Since(start); second < 2*retryBase {
		t.Fatalf("second retry after %v, want ≥ %v", second, 2*retryBase)
	}
	q.done("a", false) // success resets the count
	if n := q.failures["a"]; n != 0 {
		t.Fatalf("failures after success = %d", n)
	}
}

// close wakes waiting workers and stops pending retries.
func TestQueueClose(t *testing.T) {
	q := newQueue()
	q.add("a")
	mustGet(t, q, "a")
	q.done("a", true) // a retry pending
	done := make(chan bool)
	go func() {
		_, ok := q.get()
		done <- ok
	}()
	q.close()
	if ok := <-done; ok {
		t.Fatal("get after close: ok")
	}
	q.add("b")
	if q.len() != 0 {
		t.Fatal("add after close queued a key")
	}
}

func TestDecodeMeta(t *testing.T) {
	m, err := DecodeMeta([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d","namespace":"ns","uid":"u1",
	  "ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"o","uid":"u0","blockOwnerDeletion":true}],
	  "finalizers":["orphan"],"deletionTimestamp":"2026-11-30T00:00:00Z"},"data":{"ownerReferences":"x"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.UID != "u1" || m.Name != "d" || m.Namespace != "ns" || len(m.OwnerReferences) != 1 || m.OwnerReferences[0].UID != "u0" ||
		!m.Deleting() || !m.HasFinalizer(FinalizerOrphan) || m.HasFinalizer(FinalizerDeleteDependents) {
		t.Fatalf("DecodeMeta = %+v", m)
	}
	if _, err := DecodeMeta([]byte(`{"metadata":`)); err == nil {
		t.Fatal("DecodeMeta of a truncated object: no error")
	}
	if interesting([]byte(`{"metadata":{"name":"x","uid":"u"}}`)) {
		t.Fatal("an object without owners or deletion is interesting")
	}
}
