package leaderelection_test

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	goleaderelection "k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/objwatch/objwatch/client/leaderelection"
	"github.com/objwatch/objwatch/testenv"
)

func init() {
	// client-go's elector logs every attempt through klog.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
}

// goCandidate is one client-go leader elector on the same lease, run the
// way a Kubernetes controller runs it.
type goCandidate struct {
	cancel context.CancelFunc
	done   chan struct{} // Run and its OnStartedLeading goroutine returned
}

func startClientGo(t *testing.T, kubeconfig, name, who string, release bool, l *ledger) *goCandidate {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("client-go config: %v", err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatalf("client-go HTTP client: %v", err)
	}
	// A reference server outlives the test: close client-go's connections,
	// through its wrapping round trippers.
	t.Cleanup(func() { utilnet.CloseIdleConnectionsFor(hc.Transport) })
	cc, err := coordinationclient.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatalf("client-go client: %v", err)
	}
	var leading sync.WaitGroup // client-go does not wait for OnStartedLeading
	el, err := goleaderelection.NewLeaderElector(goleaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: "default", Name: name},
			Client:     cc,
			LockConfig: resourcelock.ResourceLockConfig{Identity: who},
		},
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		ReleaseOnCancel: release,
		Name:            name,
		Callbacks: goleaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				leading.Add(1)
				defer leading.Done()
				l.lead(who)(ctx)
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		t.Fatalf("NewLeaderElector: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &goCandidate{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		el.Run(ctx)
		leading.Wait()
	}()
	t.Cleanup(c.stop)
	return c
}

func (c *goCandidate) stop() {
	c.cancel()
	<-c.done
}

// How the first leader, objwatch's, stops in interop.
const (
	killed   = "expiry"  // its context is cancelled
	released = "release" // the same, with ReleaseOnCancel
	// Its connection is cut late in a second, just after a renewal:
	// client-go's candidate, which sees renewTime in whole seconds, saw
	// that renewal as no change.
	cut = "cut"
)

// TestInterop runs objwatch's and client-go's electors on one Lease: the
// leader is stopped and leadership moves from objwatch's to client-go's
// and back, never to two at once.
func TestInterop(t *testing.T) {
	env := testenv.Start(t)
	for _, how := range []string{killed, released, cut} {
		t.Run(how, func(t *testing.T) {
			t.Parallel() // each on its own lease
			interop(t, env.Kubeconfig, "interop-"+strings.ToLower(rand.Text()[:8]), how)
		})
	}
}

// TestInteropKube is TestInterop against a real kube-apiserver run beside
// the tests (its admin kubeconfig in $KAS_DIR/run/, default
// $TMPDIR/kube-apiserver-ref), skipped when none runs.
func TestInteropKube(t *testing.T) {
	dir := os.Getenv("KAS_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "kube-apiserver-ref")
	}
	kubeconfig := filepath.Join(dir, "run", "admin.kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Skipf("no reference kube-apiserver kubeconfig: %v", err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Skipf("reference kubeconfig host %q: %v", cfg.Host, err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, time.Second)
	if err != nil {
		t.Skipf("reference kube-apiserver not running: %v", err)
	}
	conn.Close()
	for _, how := range []string{killed, cut} {
		t.Run(how, func(t *testing.T) {
			interop(t, kubeconfig, "objwatch-interop-"+strings.ToLower(rand.Text()[:8]), how)
		})
	}
}

func interop(t *testing.T, kubeconfig, name, how string) {
	var l ledger
	release := how == released
	var cutA atomic.Bool
	ours := func(who string, cut *atomic.Bool) *candidate {
		cfg := config(t, who, &l)
		cfg.Name, cfg.ReleaseOnCancel = name, release
		if cut != nil {
			// The least margin allowed, so that a leader that counted its
			// deadline from a renewal client-go cannot see would overlap.
			cfg.RenewDeadline = leaseDuration - 200*time.Millisecond
		}
		return start(t, newREST(t, kubeconfig, cut), cfg)
	}
	handover := leaseDuration + maxWait + slack
	if release {
		handover = maxWait + slack
	}

	a := ours("objwatch-1", &cutA)
	l.waitLeader(t, "", 10*time.Second)
	g := startClientGo(t, kubeconfig, name, "client-go", release, &l)
	time.Sleep(leaseDuration + retryPeriod)
	if s, _ := l.current(); s.who != "objwatch-1" {
		t.Fatalf("leader = %q, want objwatch-1 (client-go took a renewed lease)", s.who)
	}
	stopped := time.Now()
	if how == cut {
		for time.Now().Nanosecond() < 850e6 || time.Now().Nanosecond() > 950e6 {
			time.Sleep(5 * time.Millisecond)
		}
		stopped = time.Now()
		cutA.Store(true)
		if err := a.wait(t, leaseDuration); !errors.Is(err, leaderelection.ErrLost) {
			t.Errorf("objwatch-1: Run() = %v, want ErrLost", err)
		}
	} else {
		a.stop(t)
	}
	s := l.waitLeader(t, "objwatch-1", handover)
	if s.who != "client-go" {
		t.Fatalf("leader = %q, want client-go", s.who)
	}
	t.Logf("client-go led %v after objwatch-1 was stopped", s.from.Sub(stopped))

	ours("objwatch-2", nil)
	time.Sleep(leaseDuration + retryPeriod)
	if s, _ := l.current(); s.who != "client-go" {
		t.Fatalf("leader = %q, want client-go (objwatch took a renewed lease)", s.who)
	}
	killedAt := time.Now()
	g.stop()
	s = l.waitLeader(t, "client-go", handover)
	if s.who != "objwatch-2" {
		t.Fatalf("leader = %q, want objwatch-2", s.who)
	}
	t.Logf("objwatch-2 led %v after client-go was killed", s.from.Sub(killedAt))
	l.checkOneLeader(t)
}
