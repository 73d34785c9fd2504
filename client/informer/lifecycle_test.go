package informer_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

func createN(t *testing.T, ctx context.Context, w *writer, n int) {
	t.Helper()
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: fmt.Sprintf("key-%d", i), Labels: map[string]string{"gen": "0"}},
			Data: map[string]string{"v": "0"}}
		out, err := w.c.Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w.live[out.Name] = out
		w.hist.add(informer.KeyOf(out), stateOf(out))
	}
}

// blocker is a handler whose every call waits until release is closed.
type blocker struct {
	*recorder
	release chan struct{}
	calls   atomic.Int64
}

func (b *blocker) wait() { b.calls.Add(1); <-b.release }

func (b *blocker) OnAdd(obj CM, initial bool) { b.wait(); b.recorder.OnAdd(obj, initial) }
func (b *blocker) OnUpdate(old, new CM)       { b.wait(); b.recorder.OnUpdate(old, new) }
func (b *blocker) OnDelete(obj CM, unknown bool) {
	b.wait()
	b.recorder.OnDelete(obj, unknown)
}

// TestSlowHandlerIsolation blocks one handler completely and checks that
// another still sees every change promptly, that the blocked handler's
// backlog stays bounded and is visible as a metric, and that it catches up
// once released.
func TestSlowHandlerIsolation(t *testing.T) {
	e := startEnv(t)
	ctx := testContext(t, 60*time.Second)
	hist := newHistory()
	w := newWriter(e.writer, hist, "default", 20, 3)
	createN(t, ctx, w, 20)
	reg := prometheus.NewRegistry()
	inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{Metrics: reg, Name: "cms"})
	if err != nil {
		t.Fatal(err)
	}
	blocked := &blocker{recorder: newRecorder(), release: make(chan struct{})}
	fast := newRecorder()
	const bound = 10
	blockedReg, err := inf.AddHandler(blocked, informer.HandlerOptions{Name: "blocked", Bound: bound})
	if err != nil {
		t.Fatal(err)
	}
	fastReg, err := inf.AddHandler(fast, informer.HandlerOptions{Name: "fast"})
	if err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	if err := informer.WaitForSync(ctx, fastReg.HasSynced); err != nil {
		t.Fatal(err)
	}
	for range 400 {
		if err := w.step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitConsistent(t, e.writer, "default", map[string]func() map[informer.Key]string{"fast": fast.rvs})
	fast.check(t, "fast", hist, true)

	if blockedReg.HasSynced() {
		t.Errorf("blocked handler HasSynced() = true, want false")
	}
	if n := blocked.calls.Load(); n != 1 {
		t.Errorf("blocked handler calls = %d, want 1 (stuck in the first)", n)
	}
	backlog := gauge(t, reg, "objwatch_informer_handler_backlog", "blocked")
	if backlog != float64(blockedReg.Backlog()) || backlog == 0 || backlog > bound+2*20 {
		t.Errorf("blocked backlog gauge = %v (Backlog() %d), want in (0, %d]", backlog, blockedReg.Backlog(), bound+2*20)
	}
	if got := gauge(t, reg, "objwatch_informer_handler_backlog", "fast"); got != 0 {
		t.Errorf("fast backlog gauge = %v, want 0", got)
	}

	close(blocked.release)
	waitConsistent(t, e.writer, "default", map[string]func() map[informer.Key]string{"blocked": blocked.rvs})
	blocked.check(t, "blocked", hist, false)
	if err := informer.WaitForSync(ctx, blockedReg.HasSynced); err != nil {
		t.Errorf("blocked handler never synced after release: %v", err)
	}
	t.Logf("blocked handler: backlog %v while blocked, then %d adds %d updates %d deletes, %v coalesced",
		backlog, blocked.adds, blocked.updates, blocked.deletes, gauge(t, reg, "objwatch_informer_handler_coalesced_total", "blocked"))
}

// TestLateHandlerAndStop adds a handler after sync (it gets the cached
// objects as initial adds), stops the informer while a handler is busy
// (Run waits for it), and adds a handler after the stop.
func TestLateHandlerAndStop(t *testing.T) { bothModes(t, testLateHandlerAndStop) }

func testLateHandlerAndStop(t *testing.T, compact bool) {
	e := startEnv(t)
	ctx := testContext(t, 60*time.Second)
	hist := newHistory()
	w := newWriter(e.writer, hist, "default", 30, 4)
	createN(t, ctx, w, 30)
	inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{Compact: compact})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, inf)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	var initial, other atomic.Int64
	late, err := inf.AddHandler(informer.HandlerFuncs[CM]{Add: func(_ CM, init bool) {
		if init {
			initial.Add(1)
		} else {
			other.Add(1)
		}
	}}, informer.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := informer.WaitForSync(ctx, late.HasSynced); err != nil {
		t.Fatal(err)
	}
	if initial.Load() != 30 || other.Load() != 0 {
		t.Errorf("late handler got %d initial and %d other adds, want 30 and 0", initial.Load(), other.Load())
	}
	if _, err := inf.AddHandler(informer.HandlerFuncs[CM]{}, informer.HandlerOptions{Name: late.Name()}); err == nil {
		t.Errorf("AddHandler(duplicate name) error = nil, want an error")
	}

	var busy sync.WaitGroup
	busy.Add(1)
	var finished atomic.Bool
	slow, err := inf.AddHandler(informer.HandlerFuncs[CM]{Add: func(CM, bool) {
		if finished.Load() {
			return
		}
		busy.Done()
		time.Sleep(300 * time.Millisecond)
		finished.Store(true)
	}}, informer.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	busy.Wait()
	stop()
	if !finished.Load() {
		t.Errorf("Run returned while a handler call was in progress")
	}
	for _, r := range []*informer.Registration[CM]{late, slow} {
		select {
		case <-r.Done():
		default:
			t.Errorf("handler %s not Done after Run returned", r.Name())
		}
	}
	after, err := inf.AddHandler(informer.HandlerFuncs[CM]{}, informer.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-after.Done():
	case <-time.After(time.Second):
		t.Errorf("handler added after stop is not Done")
	}
	if n := inf.Lister().Len(); n != 30 {
		t.Errorf("cache after stop has %d objects, want 30 (it stays readable)", n)
	}
}

// TestRemoveHandlerFromItself removes a handler from inside its own call.
func TestRemoveHandlerFromItself(t *testing.T) {
	e := startEnv(t)
	ctx := testContext(t, 30*time.Second)
	w := newWriter(e.writer, newHistory(), "default", 5, 5)
	createN(t, ctx, w, 5)
	inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	var self *informer.Registration[CM]
	ready := make(chan struct{})
	self, err = inf.AddHandler(informer.HandlerFuncs[CM]{Add: func(CM, bool) {
		<-ready
		calls.Add(1)
		self.Remove()
	}}, informer.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	close(ready)
	run(t, inf)
	select {
	case <-self.Done():
	case <-ctx.Done():
		t.Fatal("handler that removed itself never Done")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("calls = %d, want 1", n)
	}
}
