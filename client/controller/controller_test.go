package controller_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/controller"
	"github.com/objwatch/objwatch/client/informer"
	"github.com/objwatch/objwatch/client/workqueue"
)

// counter returns the value of the counter or gauge name{controller=c}
// (and result=result, if given) in reg.
func counter(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue metrics
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// TestController runs the controller's features against one server, each
// subtest in its own namespace.
func TestController(t *testing.T) {
	e := startEnv(t)
	nss := client.NewClient[*corev1.Namespace](e.rest, client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("namespaces"), Kind: "Namespace"})
	namespace := func(t *testing.T) string {
		ns := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
		if _, err := nss.Create(testContext(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return ns
	}
	// start builds and runs a controller of the ConfigMaps in ns.
	start := func(t *testing.T, ns string, r controller.Reconciler[controller.Request], opts controller.Options, preds ...change.Predicate) (*controller.Controller[controller.Request], *prometheus.Registry) {
		t.Helper()
		reg := prometheus.NewPedanticRegistry()
		opts.Metrics = reg
		c, err := controller.NewBuilder("test").For(controller.NewSource(e.configMapInformer(t, ns), preds...)).WithOptions(opts).Complete(r)
		if err != nil {
			t.Fatal(err)
		}
		run(t, c)
		return c, reg
	}

	t.Run("primary events", func(t *testing.T) {
		ns := namespace(t)
		existing := e.create(t, ns, "existing", nil)
		rec := newRecorder(nil)
		_, reg := start(t, ns, rec, controller.Options{})
		a := controller.Request{Namespace: ns, Name: "existing"}
		rec.waitFor(t, a, 1) // from the initial list
		b := controller.Request{Namespace: ns, Name: "new"}
		cm := e.create(t, ns, "new", nil)
		rec.waitFor(t, b, 1)
		cm.Data = map[string]string{"k": "v"}
		if _, err := e.cms.Update(testContext(t), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		rec.waitFor(t, b, 2)
		if err := e.cms.Delete(testContext(t), ns, existing.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		rec.waitFor(t, a, 2)
		// The recorder sees a reconcile when it starts, the metric
		// counts it once it returned.
		waitUntil(t, "reconcile_total{success} >= 4", func() bool {
			return counter(t, reg, "controller_runtime_reconcile_total", "result", "success") >= 4
		})
		if got := counter(t, reg, "controller_runtime_max_concurrent_reconciles"); got != 1 {
			t.Errorf("max_concurrent_reconciles = %v, want 1", got)
		}
	})

	// The initial list's objects are queued at low priority: a change
	// made while they wait is reconciled before them.
	t.Run("initial list at low priority", func(t *testing.T) {
		ns := namespace(t)
		const existing = 20
		for i := range existing {
			e.create(t, ns, fmt.Sprintf("old-%02d", i), nil)
		}
		first, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		rec := newRecorder(func(ctx context.Context, _ controller.Request, _ int) (controller.Result, error) {
			once.Do(func() {
				close(first)
				select { // the one worker is busy with the first object
				case <-release:
				case <-ctx.Done():
				}
			})
			return controller.Result{}, nil
		})
		_, reg := start(t, ns, rec, controller.Options{})
		<-first
		e.create(t, ns, "new", nil)
		// The new object's event reaches the queue through the watch,
		// while the initial list's keys are still queued behind the
		// worker.
		for deadline := time.Now().Add(15 * time.Second); counter(t, reg, "workqueue_adds_total") < existing+1; {
			if time.Now().After(deadline) {
				t.Fatalf("workqueue_adds_total = %v, want %d", counter(t, reg, "workqueue_adds_total"), existing+1)
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(release)
		newReq := controller.Request{Namespace: ns, Name: "new"}
		rec.waitFor(t, newReq, 1)
		rec.mu.Lock()
		calls := slices.Clone(rec.calls)
		rec.mu.Unlock()
		if i := slices.Index(calls, newReq); i != 1 {
			t.Errorf("the new object was reconciled %d. (after %v), want 2., right after the object the worker held", i+1, calls[:i])
		}
		for i := range existing {
			rec.waitFor(t, controller.Request{Namespace: ns, Name: fmt.Sprintf("old-%02d", i)}, 1)
		}
	})

	t.Run("predicate", func(t *testing.T) {
		ns := namespace(t)
		cm := e.create(t, ns, "web", map[string]string{"replicas": "1"})
		rec := newRecorder(nil)
		start(t, ns, rec, controller.Options{}, change.FieldsChanged("data.replicas"))
		req := controller.Request{Namespace: ns, Name: "web"}
		rec.waitFor(t, req, 1)
		cm.Data["other"] = "x"
		cm, err := e.cms.Update(testContext(t), cm, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rec.never(t, req, 1)
		cm.Data["replicas"] = "2"
		if _, err := e.cms.Update(testContext(t), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		rec.waitFor(t, req, 2)
	})

	t.Run("requeue after", func(t *testing.T) {
		ns := namespace(t)
		e.create(t, ns, "a", nil)
		rec := newRecorder(func(_ context.Context, _ controller.Request, n int) (controller.Result, error) {
			if n < 3 {
				return controller.Result{RequeueAfter: 20 * time.Millisecond}, nil
			}
			return controller.Result{}, nil
		})
		_, reg := start(t, ns, rec, controller.Options{})
		req := controller.Request{Namespace: ns, Name: "a"}
		rec.waitFor(t, req, 3)
		rec.never(t, req, 3)
		if got := counter(t, reg, "controller_runtime_reconcile_total", "result", "requeue_after"); got != 2 {
			t.Errorf("reconcile_total{requeue_after} = %v, want 2", got)
		}
	})

	t.Run("errors back off", func(t *testing.T) {
		ns := namespace(t)
		e.create(t, ns, "a", nil)
		var (
			mu    sync.Mutex
			times []time.Time
		)
		rec := newRecorder(func(_ context.Context, _ controller.Request, n int) (controller.Result, error) {
			mu.Lock()
			times = append(times, time.Now())
			mu.Unlock()
			if n <= 4 {
				return controller.Result{}, errors.New("not yet")
			}
			return controller.Result{}, nil
		})
		_, reg := start(t, ns, rec, controller.Options{Queue: workqueue.Options{BaseDelay: 10 * time.Millisecond}})
		req := controller.Request{Namespace: ns, Name: "a"}
		rec.waitFor(t, req, 5)
		rec.never(t, req, 5)
		mu.Lock()
		defer mu.Unlock()
		for i := 1; i < len(times); i++ {
			if want := 10 * time.Millisecond << (i - 1); times[i].Sub(times[i-1]) < want {
				t.Errorf("retry %d after %v, want >= %v", i, times[i].Sub(times[i-1]), want)
			}
		}
		if got := counter(t, reg, "controller_runtime_reconcile_errors_total"); got != 4 {
			t.Errorf("reconcile_errors_total = %v, want 4", got)
		}
		if got := counter(t, reg, "workqueue_retries_total", "name", "test"); got != 4 {
			t.Errorf("workqueue_retries_total = %v, want 4", got)
		}
	})

	t.Run("terminal error", func(t *testing.T) {
		ns := namespace(t)
		e.create(t, ns, "a", nil)
		rec := newRecorder(func(context.Context, controller.Request, int) (controller.Result, error) {
			return controller.Result{}, controller.TerminalError(errors.New("bad spec"))
		})
		_, reg := start(t, ns, rec, controller.Options{Queue: workqueue.Options{BaseDelay: time.Millisecond}})
		req := controller.Request{Namespace: ns, Name: "a"}
		rec.waitFor(t, req, 1)
		rec.never(t, req, 1)
		if got := counter(t, reg, "controller_runtime_terminal_reconcile_errors_total"); got != 1 {
			t.Errorf("terminal_reconcile_errors_total = %v, want 1", got)
		}
	})

	t.Run("panic", func(t *testing.T) {
		ns := namespace(t)
		e.create(t, ns, "a", nil)
		rec := newRecorder(func(_ context.Context, _ controller.Request, n int) (controller.Result, error) {
			if n == 1 {
				panic("boom")
			}
			return controller.Result{}, nil
		})
		_, reg := start(t, ns, rec, controller.Options{Queue: workqueue.Options{BaseDelay: time.Millisecond}})
		req := controller.Request{Namespace: ns, Name: "a"}
		rec.waitFor(t, req, 2)
		if got := counter(t, reg, "controller_runtime_reconcile_panics_total"); got != 1 {
			t.Errorf("reconcile_panics_total = %v, want 1", got)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		ns := namespace(t)
		e.create(t, ns, "a", nil)
		rec := newRecorder(func(ctx context.Context, _ controller.Request, n int) (controller.Result, error) {
			if n == 1 {
				<-ctx.Done()
				return controller.Result{}, ctx.Err()
			}
			return controller.Result{}, nil
		})
		_, reg := start(t, ns, rec, controller.Options{ReconcileTimeout: 50 * time.Millisecond, Queue: workqueue.Options{BaseDelay: time.Millisecond}})
		req := controller.Request{Namespace: ns, Name: "a"}
		rec.waitFor(t, req, 2)
		if got := counter(t, reg, "controller_runtime_reconcile_timeouts_total"); got != 1 {
			t.Errorf("reconcile_timeouts_total = %v, want 1", got)
		}
	})

	t.Run("owned and mapped", func(t *testing.T) {
		ns := namespace(t)
		scs := client.NewClient[*corev1.Secret](e.rest, secrets)
		owner, err := scs.Create(testContext(t), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ref := func(apiVersion string) metav1.OwnerReference {
			return metav1.OwnerReference{APIVersion: apiVersion, Kind: "Secret", Name: owner.Name, UID: owner.UID, Controller: new(true)}
		}
		owned := e.create(t, ns, "owned", nil, ref("v1"))
		e.create(t, ns, "other-group", nil, metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Secret", Name: "stranger", UID: "x", Controller: new(true)})
		secretInf, err := informer.New(scs, informer.Options[*corev1.Secret]{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		run(t, secretInf)
		cmInf := e.configMapInformer(t, ns)
		rec := newRecorder(nil)
		c, err := controller.NewBuilder("owned").
			For(controller.NewSource(secretInf)).
			Owns(controller.NewSource(cmInf)).
			Watches(controller.NewMapSource(cmInf, func(cm CM) []controller.Request {
				if t := cm.Data["target"]; t != "" {
					return []controller.Request{{Namespace: ns, Name: t}}
				}
				return nil
			})).
			Complete(rec)
		if err != nil {
			t.Fatal(err)
		}
		run(t, c)
		req := controller.Request{Namespace: ns, Name: "owner"}
		rec.waitFor(t, req, 1)
		time.Sleep(100 * time.Millisecond) // the initial lists' adds are merged
		before := rec.count(req)
		owned.Data = map[string]string{"edited": "yes"}
		if _, err := e.cms.Update(testContext(t), owned, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		rec.waitFor(t, req, before+1)
		e.create(t, ns, "pointer", map[string]string{"target": "mapped"})
		rec.waitFor(t, controller.Request{Namespace: ns, Name: "mapped"}, 1)
		if n := rec.count(controller.Request{Namespace: ns, Name: "stranger"}); n != 0 {
			t.Errorf("an owner of another group was reconciled %d times", n)
		}
	})

	// A ConfigMap owning a ConfigMap: change.LabelsMatch on the primary's
	// source keeps the owned ones from reconciling themselves, and
	// FieldsChangedExcept keeps label-only updates of primaries out.
	t.Run("primaries by label", func(t *testing.T) {
		ns := namespace(t)
		inf := e.configMapInformer(t, ns)
		primary := change.LabelsMatch(labels.SelectorFromSet(labels.Set{"mirror": "true"}))
		rec := newRecorder(func(ctx context.Context, r controller.Request, n int) (controller.Result, error) {
			src, ok := inf.Lister().Get(r.Namespace, r.Name)
			if !ok || n > 1 {
				return controller.Result{}, nil
			}
			ref := metav1.NewControllerRef(src, corev1.SchemeGroupVersion.WithKind("ConfigMap"))
			_, err := e.cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: r.Name + "-copy",
				OwnerReferences: []metav1.OwnerReference{*ref}}, Data: src.Data}, metav1.CreateOptions{})
			return controller.Result{}, err
		})
		c, err := controller.NewBuilder("mirror").
			For(controller.NewSource(inf, primary, change.FieldsChangedExcept("metadata.labels"))).
			Owns(controller.NewSource(inf)).
			Complete(rec)
		if err != nil {
			t.Fatal(err)
		}
		run(t, c)
		src, err := e.cms.Create(testContext(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "src",
			Labels: map[string]string{"mirror": "true"}}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		req := controller.Request{Namespace: ns, Name: "src"}
		rec.waitFor(t, req, 1)
		// The copy's add reconciles its owner (Owns), not itself (For).
		rec.waitFor(t, req, 2)
		src.Labels["team"] = "web" // a label-only update: not reconciled
		if _, err := e.cms.Update(testContext(t), src, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.create(t, ns, "unlabelled", nil)
		rec.never(t, req, 2)
		for _, name := range []string{"src-copy", "unlabelled"} {
			if n := rec.count(controller.Request{Namespace: ns, Name: name}); n != 0 {
				t.Errorf("%s, not a primary, was reconciled %d times", name, n)
			}
		}
	})

	t.Run("sync timeout names the resource", func(t *testing.T) {
		missing := client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("nothings"), Namespaced: true, Kind: "Nothing"}
		inf, err := informer.New(client.NewClient[CM](e.rest, missing), informer.Options[CM]{InitialBackoff: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		run(t, inf)
		c, err := controller.NewBuilder("nosync").For(controller.NewSource(inf)).
			WithOptions(controller.Options{SyncTimeout: 300 * time.Millisecond}).Complete(newRecorder(nil))
		if err != nil {
			t.Fatal(err)
		}
		err = c.Run(testContext(t))
		if !errors.Is(err, controller.ErrSyncTimeout) || !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "nothings") {
			t.Errorf("Run() = %v, want ErrSyncTimeout naming nothings and wrapping ErrNotFound", err)
		}
	})

	t.Run("shutdown waits for reconciles", func(t *testing.T) {
		ns := namespace(t)
		e.create(t, ns, "a", nil)
		var finished, cancelled atomic.Bool
		inside := make(chan struct{})
		rec := newRecorder(func(ctx context.Context, _ controller.Request, n int) (controller.Result, error) {
			if n == 1 {
				close(inside)
			}
			select {
			case <-time.After(200 * time.Millisecond):
				finished.Store(true)
			case <-ctx.Done():
				cancelled.Store(true)
			}
			return controller.Result{}, nil
		})
		c, err := controller.NewBuilder("shutdown").For(controller.NewSource(e.configMapInformer(t, ns))).Complete(rec)
		if err != nil {
			t.Fatal(err)
		}
		stop := run(t, c)
		<-inside
		stop()
		if !finished.Load() || cancelled.Load() {
			t.Errorf("the running reconcile: finished %v, cancelled %v; want it finished", finished.Load(), cancelled.Load())
		}

		// Past the grace period, the reconcile's context ends.
		e.create(t, ns, "b", nil)
		finished.Store(false)
		inside2 := make(chan struct{})
		rec2 := newRecorder(func(ctx context.Context, _ controller.Request, n int) (controller.Result, error) {
			close(inside2)
			<-ctx.Done()
			cancelled.Store(true)
			return controller.Result{}, ctx.Err()
		})
		c2, err := controller.NewBuilder("shutdown2").For(controller.NewSource(e.configMapInformer(t, ns))).
			WithOptions(controller.Options{ShutdownTimeout: 50 * time.Millisecond}).Complete(controller.Func[controller.Request](func(ctx context.Context, r controller.Request) (controller.Result, error) {
			if r.Name != "b" {
				return controller.Result{}, nil
			}
			return rec2.Reconcile(ctx, r)
		}))
		if err != nil {
			t.Fatal(err)
		}
		stop2 := run(t, c2)
		<-inside2
		stop2()
		if !cancelled.Load() {
			t.Error("a reconcile running past ShutdownTimeout was not cancelled")
		}
	})
}
