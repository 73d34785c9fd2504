package leaderelection_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/leaderelection"
	"github.com/objwatch/objwatch/testenv"
)

func TestConfigValidation(t *testing.T) {
	lead := func(context.Context) {}
	valid := leaderelection.Config{Namespace: "ns", Name: "n", Callbacks: leaderelection.Callbacks{OnStartedLeading: lead}}
	tests := []struct {
		name string
		edit func(*leaderelection.Config)
	}{
		{"no name", func(c *leaderelection.Config) { c.Name = "" }},
		{"no namespace", func(c *leaderelection.Config) { c.Namespace = "" }},
		{"no OnStartedLeading", func(c *leaderelection.Config) { c.Callbacks.OnStartedLeading = nil }},
		{"renewDeadline = leaseDuration", func(c *leaderelection.Config) { c.LeaseDuration, c.RenewDeadline = 5*time.Second, 5*time.Second }},
		{"default renewDeadline > leaseDuration", func(c *leaderelection.Config) { c.LeaseDuration = 5 * time.Second }},
		{"retryPeriod = renewDeadline", func(c *leaderelection.Config) { c.RetryPeriod = leaderelection.DefaultRenewDeadline }},
		{"negative", func(c *leaderelection.Config) { c.RetryPeriod = -time.Second }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid
			tt.edit(&cfg)
			if _, err := leaderelection.New(nil, cfg); !errors.Is(err, leaderelection.ErrInvalidConfig) {
				t.Errorf("New(%s) error = %v, want ErrInvalidConfig", tt.name, err)
			}
		})
	}
	el, err := leaderelection.New(&client.REST{}, valid)
	if err != nil {
		t.Fatalf("New(valid) error = %v", err)
	}
	if !strings.Contains(el.Identity(), "_") {
		t.Errorf("default Identity() = %q, want hostname_random", el.Identity())
	}
}

// TestTakeover: of two candidates one leads; when its context ends
// without release the other takes over once the lease expires, and with
// ReleaseOnCancel at once.
func TestTakeover(t *testing.T) {
	for _, release := range []bool{false, true} {
		t.Run(map[bool]string{false: "expiry", true: "release"}[release], func(t *testing.T) {
			env := testenv.Start(t)
			var l ledger
			cfgA, cfgB := config(t, "a", &l), config(t, "b", &l)
			cfgA.ReleaseOnCancel, cfgB.ReleaseOnCancel = release, release
			a := start(t, newREST(t, env.Kubeconfig, nil), cfgA)
			if s := l.waitLeader(t, "", 10*time.Second); s.who != "a" {
				t.Fatalf("leader = %s, want a (the only candidate)", s.who)
			}
			b := start(t, newREST(t, env.Kubeconfig, nil), cfgB)
			time.Sleep(leaseDuration + retryPeriod) // b must not take a lease that a renews
			if !a.el.IsLeader() || b.el.IsLeader() || b.el.Leader() != "a" {
				t.Errorf("IsLeader() = %v, %v, b.Leader() = %q; want true, false, a", a.el.IsLeader(), b.el.IsLeader(), b.el.Leader())
			}
			stopped := time.Now()
			if err := a.stop(t); err != nil {
				t.Errorf("Run() = %v, want nil after its context ended", err)
			}
			returned := time.Now()
			s := l.waitLeader(t, "a", leaseDuration+maxWait+slack)
			took := s.from.Sub(stopped)
			if release {
				if after := s.from.Sub(returned); after > maxWait+slack {
					t.Errorf("b led %v after a released the lease, want at most %v", after, maxWait+slack)
				}
			} else if took < leaseDuration-retryPeriod-slack {
				// a renewed at most retryPeriod (and a request) before it stopped.
				t.Errorf("b led %v after a stopped, before a's lease could expire (%v)", took, leaseDuration)
			}
			t.Logf("b led %v after a's context ended", took)
			l.checkOneLeader(t)

			lease := getLease(t, env)
			if got := *lease.Spec.HolderIdentity; got != "b" {
				t.Errorf("holderIdentity = %q, want b", got)
			}
			if got := *lease.Spec.LeaseTransitions; got != 1 {
				t.Errorf("leaseTransitions = %d, want 1", got)
			}
			if got := *lease.Spec.LeaseDurationSeconds; got != 2 {
				t.Errorf("leaseDurationSeconds = %d, want 2", got)
			}
		})
	}
}

func getLease(t *testing.T, env *testenv.Env) *coordinationv1.Lease {
	t.Helper()
	leases := client.NewClient[*coordinationv1.Lease](newREST(t, env.Kubeconfig, nil), leaderelection.Leases)
	l, err := leases.Get(context.Background(), "default", "test-lease", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Get lease: %v", err)
	}
	return l
}

// TestRenewFailure: a leader that cannot reach the server stops leading
// when RenewDeadline has passed since its last renewal, before the other
// candidate can take over, and Run returns ErrLost.
func TestRenewFailure(t *testing.T) {
	env := testenv.Start(t)
	var l ledger
	var cut atomic.Bool
	a := start(t, newREST(t, env.Kubeconfig, &cut), config(t, "a", &l))
	l.waitLeader(t, "", 10*time.Second)
	start(t, newREST(t, env.Kubeconfig, nil), config(t, "b", &l))
	time.Sleep(3 * retryPeriod)
	cutAt := time.Now()
	cut.Store(true)
	err := a.wait(t, renewDeadline+slack)
	if !errors.Is(err, leaderelection.ErrLost) || !errors.Is(err, errCut) {
		t.Errorf("Run() = %v, want ErrLost wrapping the failed renewal", err)
	}
	s := l.waitLeader(t, "a", leaseDuration+maxWait+slack)
	spans := l.all()
	if end := spans[0].to.Sub(cutAt); end > renewDeadline+slack/5 {
		t.Errorf("a led %v after its connection was cut, want at most renewDeadline %v", end, renewDeadline)
	}
	t.Logf("a stopped %v after the cut, b led %v after it", spans[0].to.Sub(cutAt), s.from.Sub(cutAt))
	l.checkOneLeader(t)
}

// TestStolen: a leader that finds the lease written by someone else stops
// leading at its next renewal.
func TestStolen(t *testing.T) {
	env := testenv.Start(t)
	var l ledger
	a := start(t, newREST(t, env.Kubeconfig, nil), config(t, "a", &l))
	l.waitLeader(t, "", 10*time.Second)

	leases := client.NewClient[*coordinationv1.Lease](newREST(t, env.Kubeconfig, nil), leaderelection.Leases)
	ctx := context.Background()
	err := client.RetryOnConflict(ctx, func() error {
		lease, err := leases.Get(ctx, "default", "test-lease", metav1.GetOptions{})
		if err != nil {
			return err
		}
		thief := "thief"
		lease.Spec.HolderIdentity = &thief
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("steal lease: %v", err)
	}
	stolen := time.Now()
	if err := a.wait(t, retryPeriod+slack); !errors.Is(err, leaderelection.ErrLost) {
		t.Errorf("Run() = %v, want ErrLost", err)
	}
	if end := l.all()[0].to.Sub(stolen); end > retryPeriod+slack {
		t.Errorf("a led %v after the lease was stolen, want at most %v", end, retryPeriod+slack)
	}
	if a.el.IsLeader() || a.el.Leader() != "thief" {
		t.Errorf("IsLeader() = %v, Leader() = %q; want false, thief", a.el.IsLeader(), a.el.Leader())
	}
}

// skewed is a clock off by a fixed amount.
type skewed time.Duration

func (s skewed) Now() time.Time                         { return time.Now().Add(time.Duration(s)) }
func (s skewed) After(d time.Duration) <-chan time.Time { return time.After(d) }

// TestRemoteTimeIgnored: a candidate judges a lease's expiry by its own
// clock from when it first saw the lease, whatever the lease's renewTime
// and the candidate's clock say.
func TestRemoteTimeIgnored(t *testing.T) {
	env := testenv.Start(t)
	leases := client.NewClient[*coordinationv1.Lease](newREST(t, env.Kubeconfig, nil), leaderelection.Leases)
	for _, tt := range []struct {
		name        string
		renew, skew time.Duration
	}{
		{"renewTime an hour ago", -time.Hour, 0},
		{"renewTime in an hour", time.Hour, 0},
		{"clock an hour ahead", 0, time.Hour},
		{"clock an hour behind", 0, -time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each on its own lease
			ctx := context.Background()
			name := strings.ToLower(strings.ReplaceAll(tt.name, " ", "-"))
			ghost, secs, renew := "ghost", int32(2), metav1.NewMicroTime(time.Now().Add(tt.renew))
			_, err := leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &ghost, LeaseDurationSeconds: &secs, RenewTime: &renew, AcquireTime: &renew},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("Create lease: %v", err)
			}
			var l ledger
			cfg := config(t, "a", &l)
			cfg.Clock, cfg.Name = skewed(tt.skew), name
			started := time.Now()
			c := start(t, newREST(t, env.Kubeconfig, nil), cfg)
			s := l.waitLeader(t, "", leaseDuration+maxWait+slack)
			if took := s.from.Sub(started); took < leaseDuration {
				t.Errorf("took the lease after %v, want at least its duration %v", took, leaseDuration)
			}
			c.stop(t)
		})
	}
}

// TestMetricsAndCallbacks checks client-go's metrics, OnNewLeader,
// OnStoppedLeading and ErrRunning.
func TestMetricsAndCallbacks(t *testing.T) {
	env := testenv.Start(t)
	var l ledger
	reg := prometheus.NewRegistry()
	newLeaders := make(chan string, 10)
	stopped := make(chan struct{}, 1)
	cfg := config(t, "a", &l)
	cfg.Metrics = reg
	cfg.Callbacks.OnNewLeader = func(id string) { newLeaders <- id }
	cfg.Callbacks.OnStoppedLeading = func() { stopped <- struct{}{} }
	a := start(t, newREST(t, env.Kubeconfig, nil), cfg)
	l.waitLeader(t, "", 10*time.Second)
	if err := a.el.Run(context.Background()); !errors.Is(err, leaderelection.ErrRunning) {
		t.Errorf("second Run() = %v, want ErrRunning", err)
	}
	select {
	case id := <-newLeaders:
		if id != "a" {
			t.Errorf("OnNewLeader(%q), want a", id)
		}
	case <-time.After(time.Second):
		t.Error("OnNewLeader not called")
	}
	status := func(v string) string {
		return "# HELP leader_election_master_status Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.\n" +
			"# TYPE leader_election_master_status gauge\n" +
			`leader_election_master_status{name="test-lease"} ` + v + "\n"
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(status("1")), "leader_election_master_status"); err != nil {
		t.Errorf("while leading: %v", err)
	}
	// A second elector on the same registry shares the series' families.
	cfgB := config(t, "b", &l)
	cfgB.Name, cfgB.Metrics = "other-lease", reg
	if _, err := leaderelection.New(newREST(t, env.Kubeconfig, nil), cfgB); err != nil {
		t.Errorf("New(second elector, same registry) error = %v", err)
	}
	if err := a.stop(t); err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
	select {
	case <-stopped:
	default:
		t.Error("OnStoppedLeading not called before Run returned")
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(status("0")+`leader_election_master_status{name="other-lease"} 0`+"\n"), "leader_election_master_status"); err != nil {
		t.Errorf("after leading: %v", err)
	}
}

// TestOnStartedLeadingReturns: leadership ends when OnStartedLeading
// returns on its own, and with ReleaseOnCancel the lease is released;
// while it has not returned after ctx ended, the lease is still renewed.
func TestOnStartedLeadingReturns(t *testing.T) {
	env := testenv.Start(t)
	rc := newREST(t, env.Kubeconfig, nil)
	var l ledger
	cfg := config(t, "a", &l)
	cfg.ReleaseOnCancel = true
	cfg.Callbacks.OnStartedLeading = func(context.Context) { time.Sleep(2 * retryPeriod) }
	if err := leaderelection.Run(context.Background(), rc, cfg); err != nil {
		t.Errorf("Run() = %v, want nil when OnStartedLeading returned", err)
	}
	if lease := getLease(t, env); *lease.Spec.HolderIdentity != "" || *lease.Spec.LeaseDurationSeconds != 1 {
		t.Errorf("lease after release: holder %q, duration %d; want none, 1", *lease.Spec.HolderIdentity, *lease.Spec.LeaseDurationSeconds)
	}

	// Slow to stop: it keeps acting for longer than the lease lasts
	// after ctx ended, so Run must keep the lease.
	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan struct{})
	cfg.ReleaseOnCancel = false
	cfg.Callbacks.OnStartedLeading = func(ctx context.Context) {
		close(leading)
		<-ctx.Done()
		time.Sleep(leaseDuration + retryPeriod)
	}
	done := make(chan error, 1)
	go func() { done <- leaderelection.Run(ctx, rc, cfg) }()
	<-leading
	cancel()
	var lb ledger
	b := start(t, newREST(t, env.Kubeconfig, nil), config(t, "b", &lb))
	if err := <-done; err != nil {
		t.Errorf("Run() = %v, want nil after ctx ended", err)
	}
	if spans := lb.all(); len(spans) > 0 {
		t.Errorf("b led while a's OnStartedLeading still ran")
	}
	b.stop(t)
}
