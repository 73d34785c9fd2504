package leaderelection_test

import (
	"context"
	"crypto/rand"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/clientcmd"
	goleaderelection "k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/objwatch/objwatch/testenv"
)

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
	cc, err := coordinationclient.NewForConfig(cfg)
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

// TestInterop runs objwatch's and client-go's electors on one Lease: the
// leader is killed (its context cancelled, and with release: released)
// and leadership moves from objwatch's to client-go's and back, never to
// two at once.
func TestInterop(t *testing.T) {
	env := testenv.Start(t)
	for _, release := range []bool{false, true} {
		t.Run(map[bool]string{false: "expiry", true: "release"}[release], func(t *testing.T) {
			interop(t, env.Kubeconfig, "interop-"+strings.ToLower(rand.Text()[:8]), release)
		})
	}
}

// TestInteropKube is TestInterop against the reference kube-apiserver,
// when it runs (see /work/shared/reference/kube/README.md).
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
	interop(t, kubeconfig, "objwatch-interop-"+strings.ToLower(rand.Text()[:8]), false)
}

func interop(t *testing.T, kubeconfig, name string, release bool) {
	var l ledger
	ours := func(who string) *candidate {
		cfg := config(who, &l)
		cfg.Name, cfg.ReleaseOnCancel = name, release
		return start(t, newREST(t, kubeconfig, nil), cfg)
	}
	handover := leaseDuration + maxWait + slack
	if release {
		handover = maxWait + slack
	}

	a := ours("objwatch-1")
	l.waitLeader(t, "", 10*time.Second)
	g := startClientGo(t, kubeconfig, name, "client-go", release, &l)
	time.Sleep(leaseDuration + retryPeriod)
	if s, _ := l.current(); s.who != "objwatch-1" {
		t.Fatalf("leader = %q, want objwatch-1 (client-go took a renewed lease)", s.who)
	}
	killed := time.Now()
	a.stop(t)
	s := l.waitLeader(t, "objwatch-1", handover)
	if s.who != "client-go" {
		t.Fatalf("leader = %q, want client-go", s.who)
	}
	t.Logf("client-go led %v after objwatch-1 was killed", s.from.Sub(killed))

	ours("objwatch-2")
	time.Sleep(leaseDuration + retryPeriod)
	if s, _ := l.current(); s.who != "client-go" {
		t.Fatalf("leader = %q, want client-go (objwatch took a renewed lease)", s.who)
	}
	killed = time.Now()
	g.stop()
	s = l.waitLeader(t, "client-go", handover)
	if s.who != "objwatch-2" {
		t.Fatalf("leader = %q, want objwatch-2", s.who)
	}
	t.Logf("objwatch-2 led %v after client-go was killed", s.from.Sub(killed))
	l.checkOneLeader(t)
}
