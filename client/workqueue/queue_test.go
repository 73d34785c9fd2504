package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/objwatch/objwatch/client/workqueue"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newQueue[K comparable](t *testing.T, opts workqueue.Options) *workqueue.Queue[K] {
	t.Helper()
	q, err := workqueue.New[K](opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.ShutDown)
	return q
}

// eventually polls cond until it holds or 10 s passed.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// getAll gets and Dones every ready key, in order.
func getAll[K comparable](q *workqueue.Queue[K]) []K {
	var got []K
	for q.Len() > 0 {
		k, _ := q.Get()
		got = append(got, k)
		q.Done(k)
	}
	return got
}

func TestDeduplicates(t *testing.T) {
	q := newQueue[string](t, workqueue.Options{})
	q.Add("a", "b", "a")
	q.Add("a")
	if n := q.Len(); n != 2 {
		t.Fatalf("Len() = %d, want 2", n)
	}
	if got := fmt.Sprint(getAll(q)); got != "[a b]" {
		t.Errorf("Get order = %s, want [a b]", got)
	}
}

func TestPriority(t *testing.T) {
	type add struct {
		key      string
		priority int
	}
	tests := []struct {
		name string
		adds []add
		want string
	}{
		{"fifo", []add{{"a", 0}, {"b", 0}, {"c", 0}}, "[a b c]"},
		{"higher first", []add{{"low", workqueue.LowPriority}, {"a", 0}, {"hi", 10}, {"b", 0}}, "[hi a b low]"},
		{"raised", []add{{"a", workqueue.LowPriority}, {"b", workqueue.LowPriority}, {"c", 1}, {"b", 2}}, "[b c a]"},
		{"raise keeps first-add order", []add{{"a", -1}, {"b", 0}, {"a", 0}}, "[a b]"},
		{"never lowered", []add{{"a", 5}, {"b", 1}, {"a", -5}}, "[a b]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := newQueue[string](t, workqueue.Options{})
			for _, a := range tt.adds {
				q.AddWithOpts(workqueue.AddOpts{Priority: a.priority}, a.key)
			}
			if got := fmt.Sprint(getAll(q)); got != tt.want {
				t.Errorf("Get order = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestDirtyWhileProcessing(t *testing.T) {
	q := newQueue[string](t, workqueue.Options{})
	q.Add("a")
	k, _ := q.Get()
	q.Add("a")
	q.AddWithOpts(workqueue.AddOpts{Priority: 3}, "a")
	if n := q.Len(); n != 0 {
		t.Fatalf("Len() while a is in flight = %d, want 0", n)
	}
	q.Add("b")
	q.Done(k)
	k2, p, _ := q.GetWithPriority()
	if k2 != "a" || p != 3 {
		t.Errorf("GetWithPriority() after Done = %s, %d; want a, 3", k2, p)
	}
	q.Done(k2)
	if got := fmt.Sprint(getAll(q)); got != "[b]" {
		t.Errorf("rest = %s, want [b]", got)
	}
}

// TestConcurrent is a property test: producers add random keys (some
// delayed, some rate-limited, at random priorities) while workers process
// them. No key may be processed by two workers at once, and every key
// added after it was last handed out must be handed out again.
func TestConcurrent(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			testConcurrent(t, seed)
		})
	}
}

func testConcurrent(t *testing.T, seed uint64) {
	q := newQueue[int](t, workqueue.Options{BaseDelay: 50 * time.Microsecond, MaxDelay: time.Millisecond, QPS: -1})
	const keys, producers, workers, addsPer = 50, 4, 4, 2000

	var (
		mu       sync.Mutex
		tick     int
		lastAdd  [keys]int
		lastGet  [keys]int
		inFlight [keys]bool
		overlap  atomic.Int32
	)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)+100))
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				mu.Lock()
				if inFlight[k] {
					overlap.Add(1)
				}
				inFlight[k] = true
				tick++
				lastGet[k] = tick
				mu.Unlock()
				if r.IntN(4) == 0 {
					time.Sleep(time.Duration(r.IntN(50)) * time.Microsecond)
				}
				mu.Lock()
				inFlight[k] = false
				mu.Unlock()
				q.Done(k)
			}
		})
	}
	var pwg sync.WaitGroup
	for p := range producers {
		pwg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(p)))
			for range addsPer {
				k := r.IntN(keys)
				// Record before adding: a Get between the two then
				// only makes the check stricter.
				mu.Lock()
				tick++
				lastAdd[k] = tick
				mu.Unlock()
				switch r.IntN(10) {
				case 0:
					q.AddAfter(k, time.Duration(r.IntN(200))*time.Microsecond)
				case 1:
					q.AddRateLimited(k)
				case 2:
					q.Forget(k)
					q.Add(k)
				default:
					q.AddWithOpts(workqueue.AddOpts{Priority: r.IntN(3) - 1}, k)
				}
			}
		})
	}
	pwg.Wait()
	eventually(t, "every add to be delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for k := range keys {
			if lastAdd[k] > 0 && lastGet[k] < lastAdd[k] {
				return false
			}
		}
		return true
	})
	q.ShutDown()
	wg.Wait()
	if n := overlap.Load(); n > 0 {
		t.Errorf("a key was processed by two workers at once %d times", n)
	}
}

func TestAddAfter(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	fc := clocktesting.NewFakeClock(start)
	q := newQueue[string](t, workqueue.Options{Clock: fc})

	q.AddAfter("late", 10*time.Second)
	q.AddAfter("soon", 5*time.Second)
	q.AddAfter("late", 20*time.Second) // later than already asked: ignored
	q.AddAfter("now", 0)
	if got := fmt.Sprint(getAll(q)); got != "[now]" {
		t.Fatalf("ready at start = %s, want [now]", got)
	}
	step := func(d time.Duration, wantArmed time.Time, want string) {
		t.Helper()
		eventually(t, "timer armed for "+wantArmed.String(), func() bool { return q.ArmedAt().Equal(wantArmed) })
		fc.Step(d)
		if want == "[]" {
			time.Sleep(10 * time.Millisecond)
		} else {
			eventually(t, "keys ready", func() bool { return q.Len() > 0 })
		}
		if got := fmt.Sprint(getAll(q)); got != want {
			t.Fatalf("ready after %v = %s, want %s", fc.Since(start), got, want)
		}
	}
	step(5*time.Second-time.Nanosecond, start.Add(5*time.Second), "[]")
	step(time.Nanosecond, start.Add(5*time.Second), "[soon]")
	q.AddAfter("sooner", time.Second) // earlier than the timer: it is rearmed
	step(time.Second, start.Add(6*time.Second), "[sooner]")
	q.Add("late") // ready now, no longer waiting
	if got := fmt.Sprint(getAll(q)); got != "[late]" {
		t.Fatalf("after Add = %s, want [late]", got)
	}
	if n := q.Len(); n != 0 {
		t.Errorf("Len() = %d, want 0", n)
	}
}

// TestBackoff checks rate-limited delays against [base*2^n, max] with
// random bases and maxima, the token bucket off; then that the bucket
// delays a burst.
func TestBackoff(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		base := time.Duration(1+r.IntN(1000)) * time.Microsecond
		maxDelay := base * time.Duration(1+r.IntN(5000))
		t.Run(fmt.Sprintf("%d base=%v max=%v", i, base, maxDelay), func(t *testing.T) {
			start := time.Unix(1_000_000, 0)
			fc := clocktesting.NewFakeClock(start)
			q := newQueue[string](t, workqueue.Options{Clock: fc, BaseDelay: base, MaxDelay: maxDelay, QPS: -1})
			for n := range 40 {
				want := maxDelay
				if e := base << n; e > 0 && e < maxDelay {
					want = e
				}
				readyAt := fc.Now().Add(want)
				q.AddRateLimited("k")
				if got := q.NumRequeues("k"); got != n+1 {
					t.Fatalf("NumRequeues = %d, want %d", got, n+1)
				}
				eventually(t, "timer armed", func() bool { return q.ArmedAt().Equal(readyAt) })
				fc.SetTime(readyAt.Add(-time.Nanosecond))
				fc.Step(0) // nothing is due yet
				if q.Len() != 0 {
					t.Fatalf("retry %d ready before %v", n, want)
				}
				fc.Step(time.Nanosecond)
				eventually(t, "key ready", func() bool { return q.Len() == 1 })
				k, _ := q.Get()
				q.Done(k)
			}
			q.Forget("k")
			if got := q.NumRequeues("k"); got != 0 {
				t.Errorf("NumRequeues after Forget = %d, want 0", got)
			}
		})
	}

	t.Run("bucket", func(t *testing.T) {
		fc := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
		q := newQueue[int](t, workqueue.Options{Clock: fc, BaseDelay: time.Nanosecond, QPS: 10, Burst: 5})
		for k := range 5 {
			q.AddRateLimited(k)
		}
		q.AddRateLimited(5) // the bucket is empty: 100 ms
		readyAt := fc.Now().Add(100 * time.Millisecond)
		eventually(t, "timer armed for the burst", func() bool { return q.ArmedAt().Equal(fc.Now().Add(time.Nanosecond)) })
		fc.Step(time.Nanosecond)
		eventually(t, "burst ready", func() bool { return q.Len() == 5 })
		eventually(t, "timer armed for the bucket", func() bool { return q.ArmedAt().Equal(readyAt) })
		fc.Step(100*time.Millisecond - 2*time.Nanosecond)
		time.Sleep(10 * time.Millisecond)
		if q.Len() != 5 {
			t.Fatal("sixth ready before the bucket had a token")
		}
		fc.Step(time.Nanosecond)
		eventually(t, "sixth ready", func() bool { return q.Len() == 6 })
	})
}

func TestShutDown(t *testing.T) {
	q := newQueue[string](t, workqueue.Options{})
	done := make(chan bool)
	for range 3 {
		go func() {
			_, shutdown := q.Get()
			done <- shutdown
		}()
	}
	time.Sleep(10 * time.Millisecond)
	q.AddAfter("x", time.Hour) // starts the timer goroutine, which ShutDown must stop
	q.ShutDown()
	for range 3 {
		if !<-done {
			t.Error("Get() after ShutDown: shutdown = false, want true")
		}
	}
	q.Add("a")
	if _, shutdown := q.Get(); !shutdown || q.Len() != 0 {
		t.Errorf("Add after ShutDown was queued")
	}
	q.ShutDown() // again: nothing
}

func TestShutDownWithDrain(t *testing.T) {
	q := newQueue[string](t, workqueue.Options{})
	q.Add("a", "b", "c")
	a, _ := q.Get()
	b, _ := q.Get()
	drained := make(chan error, 1)
	go func() { drained <- q.ShutDownWithDrain(context.Background()) }()
	eventually(t, "shutdown", q.ShuttingDown)
	q.Done(a)
	select {
	case err := <-drained:
		t.Fatalf("ShutDownWithDrain returned %v with b in flight", err)
	case <-time.After(20 * time.Millisecond):
	}
	if _, shutdown := q.Get(); !shutdown {
		t.Error("Get() during drain handed out c")
	}
	q.Done(b)
	if err := <-drained; err != nil {
		t.Errorf("ShutDownWithDrain() = %v", err)
	}

	t.Run("timeout", func(t *testing.T) {
		q := newQueue[string](t, workqueue.Options{})
		q.Add("a")
		a, _ := q.Get()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if err := q.ShutDownWithDrain(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("ShutDownWithDrain() = %v, want DeadlineExceeded", err)
		}
		q.Done(a)
	})
}

func TestMetrics(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	fc := clocktesting.NewFakeClock(start)
	reg := prometheus.NewPedanticRegistry()
	q := newQueue[string](t, workqueue.Options{Name: "test", Metrics: reg, Clock: fc, QPS: -1})

	q.Add("a", "b", "a") // 2 adds
	q.AddAfter("c", time.Second)
	q.AddRateLimited("d")
	fc.Step(2 * time.Second) // a and b waited 2 s
	eventually(t, "c and d ready", func() bool { return q.Len() == 4 })
	a, _ := q.Get()
	b, _ := q.Get()
	q.Add(a) // dirty: an add
	fc.Step(3 * time.Second)
	q.Done(b)

	want := `
# HELP workqueue_adds_total Total number of adds handled by workqueue
# TYPE workqueue_adds_total counter
workqueue_adds_total{name="test"} 5
# HELP workqueue_depth Current depth of workqueue
# TYPE workqueue_depth gauge
workqueue_depth{name="test"} 2
# HELP workqueue_longest_running_processor_seconds How many seconds has the longest running processor for workqueue been running.
# TYPE workqueue_longest_running_processor_seconds gauge
workqueue_longest_running_processor_seconds{name="test"} 3
# HELP workqueue_retries_total Total number of items added to the workqueue with a non-zero delay (rate-limited requeues, explicit RequeueAfter or AddAfter calls)
# TYPE workqueue_retries_total counter
workqueue_retries_total{name="test"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"workqueue_adds_total", "workqueue_depth", "workqueue_longest_running_processor_seconds", "workqueue_retries_total"); err != nil {
		t.Error(err)
	}
	q.Add("e")
	fc.Step(time.Second)
	if got := metric(t, reg, "workqueue_unfinished_work_seconds").GetGauge().GetValue(); got != 4 {
		t.Errorf("unfinished_work_seconds = %v, want 4", got)
	}
	if n := testutil.CollectAndCount(reg, "workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"); n != 2 {
		t.Errorf("histograms: %d series, want 2", n)
	}
	h := metric(t, reg, "workqueue_queue_duration_seconds").GetHistogram()
	if h.GetSampleCount() != 2 || h.GetSampleSum() != 4 { // a and b, 2 s each
		t.Errorf("queue_duration: count %d sum %v, want 2 and 4", h.GetSampleCount(), h.GetSampleSum())
	}
	if h := metric(t, reg, "workqueue_work_duration_seconds").GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 3 {
		t.Errorf("work_duration: count %d sum %v, want 1 and 3", h.GetSampleCount(), h.GetSampleSum())
	}
	q.Done(a)

	if _, err := workqueue.New[string](workqueue.Options{Name: "test", Metrics: reg}); !errors.Is(err, workqueue.ErrDuplicateName) {
		t.Errorf("New with a duplicate name = %v, want ErrDuplicateName", err)
	}
	q.ShutDown()
	q2, err := workqueue.New[string](workqueue.Options{Name: "test", Metrics: reg})
	if err != nil {
		t.Errorf("New after ShutDown unregistered the name = %v", err)
	} else {
		q2.ShutDown()
	}
}

// metric returns the one series of the named family in reg.
func metric(t *testing.T, reg prometheus.Gatherer, name string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0]
		}
	}
	t.Fatalf("no single series %s", name)
	return nil
}
