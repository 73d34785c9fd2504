package controller_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/client/controller"
	"github.com/objwatch/objwatch/client/informer"
	"github.com/objwatch/objwatch/client/leaderelection"
)

// fill creates n ConfigMaps in namespace default, 32 at a time.
func (e *env) fill(t *testing.T, n int) {
	t.Helper()
	ctx := t.Context()
	var wg sync.WaitGroup
	var failed atomic.Value
	next := atomic.Int64{}
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				cm := newCMObj("cm-"+strconv.Itoa(i), map[string]string{"i": strconv.Itoa(i)})
				if _, err := e.cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		t.Fatalf("create ConfigMaps: %v", err)
	}
}

func newCMObj(name string, data map[string]string) CM {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Data: data}
}

// election is a fast Lease for tests: a released lease is taken within
// about 2.2 retry periods.
func election(name, id string) leaderelection.Config {
	return leaderelection.Config{Namespace: "default", Name: name, Identity: id, ReleaseOnCancel: true,
		LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 20 * time.Millisecond}
}

// leader holds the lease name as "old-leader" until the returned release
// is called; it returns once it leads.
func (e *env) leader(t *testing.T, name string) (release func() time.Time) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan struct{})
	done := make(chan error, 1)
	cfg := election(name, "old-leader")
	// It leaves by releasing the lease, which the standby takes within a
	// few retry periods whatever the lease's duration: a long one keeps
	// a loaded machine (a renewal late by a second) from ending its term
	// before the test releases it.
	cfg.LeaseDuration, cfg.RenewDeadline = 20*time.Second, 10*time.Second
	cfg.Callbacks.OnStartedLeading = func(ctx context.Context) { close(leading); <-ctx.Done() }
	go func() { done <- leaderelection.Run(ctx, e.rest, cfg) }()
	select {
	case <-leading:
	case err := <-done:
		t.Fatalf("old leader: %v", err)
	}
	var at time.Time
	var once sync.Once
	release = func() time.Time {
		once.Do(func() {
			at = time.Now()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("old leader: %v", err)
			}
		})
		return at
	}
	t.Cleanup(func() { release() })
	return release
}

// standby is a candidate running one controller with RunElected.
type standby struct {
	factory    *informer.Factory
	ctrl       *controller.Controller[controller.Request]
	reconciles atomic.Int64
	first      chan time.Time // the first reconcile's time
	led        chan time.Time // when it started leading
	done       chan struct{}  // closed when RunElected returned
	result     error          // RunElected's, once done
	stop       func() error
}

func (e *env) standby(t *testing.T, lease string, warm bool) *standby {
	t.Helper()
	s := &standby{first: make(chan time.Time, 1), led: make(chan time.Time, 1)}
	s.factory = informer.NewFactory(e.rest, informer.FactoryOptions{Name: lease})
	cms := informer.Shared[CM](s.factory, configMaps, informer.Selection{Namespace: "default"})
	var err error
	s.ctrl, err = controller.NewBuilder(lease).For(controller.NewSource(cms)).Complete(
		controller.Func[controller.Request](func(ctx context.Context, r controller.Request) (controller.Result, error) {
			if s.reconciles.Add(1) == 1 {
				s.first <- time.Now()
			}
			return controller.Result{}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	cfg := election(lease, "standby")
	cfg.Callbacks.OnNewLeader = func(id string) {
		if id == "standby" {
			select {
			case s.led <- time.Now():
			default:
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		s.result = controller.RunElected(ctx, e.rest, s.factory, controller.ElectedOptions{Election: cfg, EnableWarmup: warm}, s.ctrl)
	}()
	s.stop = func() error {
		cancel()
		select {
		case <-s.done:
			return s.result
		case <-time.After(30 * time.Second):
			return errors.New("RunElected did not return 30 s after its context ended")
		}
	}
	t.Cleanup(func() { s.stop() })
	return s
}

// failover measures, for n ConfigMaps, the time from the old leader's
// loss of the lease to the standby's start of leading and to its first
// reconcile.
func failover(t *testing.T, e *env, lease string, warm bool, n int) (lead, first time.Duration) {
	t.Helper()
	release := e.leader(t, lease)
	s := e.standby(t, lease, warm)
	if warm {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		if err := s.ctrl.WaitForSync(ctx); err != nil {
			t.Fatalf("warm standby did not sync: %v", err)
		}
		if got := s.ctrl.Queue().Len(); got != n {
			t.Errorf("warm standby's queue holds %d keys before leading, want %d", got, n)
		}
	} else {
		time.Sleep(100 * time.Millisecond) // trying to acquire
	}
	time.Sleep(50 * time.Millisecond)
	if got := s.reconciles.Load(); got != 0 {
		t.Fatalf("standby reconciled %d keys before leading", got)
	}
	lost := release()
	var led, rec time.Time
	timeout := time.After(60 * time.Second)
	for led.IsZero() || rec.IsZero() {
		select {
		case led = <-s.led:
		case rec = <-s.first:
		case <-timeout:
			t.Fatalf("no reconcile on the new leader 60 s after the old one left")
		}
	}
	if err := s.stop(); err != nil {
		t.Errorf("RunElected: %v", err)
	}
	return led.Sub(lost), rec.Sub(lost)
}

// TestWarmStandby: with EnableWarmup the standby's cache syncs and its
// queue fills while another replica leads, nothing is reconciled before
// it leads, and its first reconcile follows leadership at once; cold, the
// informers start on leading. With 10k ConfigMaps (skipped with -short)
// it logs both failover times; under the race detector, with 2,000 to
// stay within 20 s.
func TestWarmStandby(t *testing.T) {
	n := 10_000
	switch {
	case testing.Short():
		n = 300
	case raceEnabled:
		n = 2_000
	}
	e := startEnv(t)
	start := time.Now()
	e.fill(t, n)
	t.Logf("created %d ConfigMaps in %v", n, time.Since(start).Round(time.Millisecond))

	warmLead, warmFirst := failover(t, e, "warm", true, n)
	coldLead, coldFirst := failover(t, e, "cold", false, n)
	t.Logf("failover with %d objects, from the old leader's release to: leading, first reconcile", n)
	t.Logf("  warm standby: %v, %v (first reconcile %v after leading)", warmLead.Round(time.Millisecond), warmFirst.Round(time.Millisecond), (warmFirst - warmLead).Round(time.Millisecond))
	t.Logf("  cold standby: %v, %v (first reconcile %v after leading)", coldLead.Round(time.Millisecond), coldFirst.Round(time.Millisecond), (coldFirst - coldLead).Round(time.Millisecond))
	if n >= 10_000 && coldFirst-coldLead <= warmFirst-warmLead {
		t.Errorf("cold standby's first reconcile came %v after leading, warm's %v: warm-up gained nothing", coldFirst-coldLead, warmFirst-warmLead)
	}
}

// TestRunElectedErrors: a misuse is refused before anything runs.
func TestRunElectedErrors(t *testing.T) {
	e := startEnv(t)
	f := informer.NewFactory(e.rest, informer.FactoryOptions{})
	cfg := election("x", "me")
	if err := controller.RunElected(t.Context(), e.rest, f, controller.ElectedOptions{Election: cfg}); err == nil {
		t.Error("no controllers: no error")
	}
	cfg.Callbacks.OnStartedLeading = func(context.Context) {}
	ctrl, _ := controller.New("x", controller.Func[string](func(context.Context, string) (controller.Result, error) { return controller.Result{}, nil }), controller.Options{})
	if err := controller.RunElected(t.Context(), e.rest, f, controller.ElectedOptions{Election: cfg}, ctrl); err == nil {
		t.Error("OnStartedLeading set: no error")
	}
}

// TestFactoryDefaultResync: a factory's DefaultResync reaches the
// controller's handlers: with nothing written, every object is
// reconciled again each period.
func TestFactoryDefaultResync(t *testing.T) {
	e := startEnv(t)
	e.fill(t, 3)
	f := informer.NewFactory(e.rest, informer.FactoryOptions{DefaultResync: 200 * time.Millisecond})
	cms := informer.Shared[CM](f, configMaps, informer.Selection{Namespace: "default"})
	if got := cms.DefaultResync(); got != 200*time.Millisecond {
		t.Fatalf("DefaultResync() = %v", got)
	}
	var mu sync.Mutex
	count := map[string]int{}
	ctrl, err := controller.NewBuilder("resync").For(controller.NewSource(cms)).Complete(
		controller.Func[controller.Request](func(ctx context.Context, r controller.Request) (controller.Result, error) {
			mu.Lock()
			defer mu.Unlock()
			count[r.Name]++
			return controller.Result{}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	run(t, f)
	stop := run(t, ctrl)
	time.Sleep(1100 * time.Millisecond)
	stop()
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i <= 3; i++ {
		if c := count[fmt.Sprintf("cm-%d", i)]; c < 3 {
			t.Errorf("cm-%d reconciled %d times in 1.1 s with a 200 ms resync, want at least 3", i, c)
		}
	}
	plain := informer.Shared[CM](informer.NewFactory(e.rest, informer.FactoryOptions{}), configMaps, informer.Selection{})
	if plain.DefaultResync() != 0 {
		t.Errorf("factory without DefaultResync: %v", plain.DefaultResync())
	}
}

// TestWarmStandbyNeverLeads: a warm standby that never wins syncs, fills
// its queue, reconciles nothing, and stops cleanly with its context
// (goleak checks the goroutines at the end of the package's tests).
func TestWarmStandbyNeverLeads(t *testing.T) {
	e := startEnv(t)
	e.fill(t, 20)
	e.leader(t, "held")
	s := e.standby(t, "held", true)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := s.ctrl.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // ten retry periods
	if got := s.ctrl.Queue().Len(); got != 20 {
		t.Errorf("queue holds %d keys, want 20", got)
	}
	if err := s.stop(); err != nil {
		t.Errorf("RunElected = %v, want nil when its context ends", err)
	}
	if got := s.reconciles.Load(); got != 0 {
		t.Errorf("reconciled %d keys without leading", got)
	}
}

// TestRunElectedLosesLease: when another holder takes the lease,
// RunElected stops its controllers and returns an error wrapping ErrLost.
func TestRunElectedLosesLease(t *testing.T) {
	e := startEnv(t)
	e.fill(t, 5)
	s := e.standby(t, "stolen", true)
	select {
	case <-s.first:
	case <-time.After(30 * time.Second):
		t.Fatal("no reconcile 30 s after start with no other candidate")
	}
	res := e.rest.Patch(types.MergePatchType).Resource(leaderelection.Leases).Namespace("default").Name("stolen").
		Body(`{"spec":{"holderIdentity":"thief"}}`).Do(t.Context())
	if res.Error() != nil {
		t.Fatal(res.Error())
	}
	select {
	case <-s.done:
		if !errors.Is(s.result, leaderelection.ErrLost) {
			t.Errorf("RunElected = %v, want ErrLost", s.result)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunElected still running 10 s after the lease was taken")
	}
}
