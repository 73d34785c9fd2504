package e2e_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/objwatch/objwatch/testenv"
)

// term is one candidate's time as leader: from OnStartedLeading until the
// context it was given is done (end is zero while it leads).
type term struct {
	id         string
	start, end time.Time
}

// terms records leadership terms; callbacks run on client-go goroutines.
type terms struct {
	mu  sync.Mutex
	all []term
}

func (ts *terms) lead(ctx context.Context, id string) {
	ts.mu.Lock()
	i := len(ts.all)
	ts.all = append(ts.all, term{id: id, start: time.Now()})
	ts.mu.Unlock()
	<-ctx.Done()
	ts.mu.Lock()
	ts.all[i].end = time.Now()
	ts.mu.Unlock()
}

func (ts *terms) snapshot() []term {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]term(nil), ts.all...)
}

// TestLeaderElection runs two client-go leader electors on a Lease, each
// through its own server on a shared etcd: one leads at a time, and when
// the leader steps down (ReleaseOnCancel) the other takes over at once.
func TestLeaderElection(t *testing.T) {
	t.Parallel()
	const (
		leaseDuration = 2 * time.Second
		renewDeadline = 1500 * time.Millisecond
		retryPeriod   = 200 * time.Millisecond
		// margin allows for the goroutine that records the end of a term
		// to wake up after the term's context is done.
		margin = 100 * time.Millisecond
	)
	ep := testenv.StartEtcd(t)
	clients := []*kubernetes.Clientset{
		typedClient(t, testenv.Start(t, testenv.WithEtcd(ep))),
		typedClient(t, testenv.Start(t, testenv.WithEtcd(ep))),
	}
	ctx := t.Context()
	lease := metav1.ObjectMeta{Namespace: "default", Name: "e2e-leader"}

	rec := &terms{}
	ids := make([]string, len(clients))
	cancels := make([]context.CancelFunc, len(clients))
	var wg sync.WaitGroup
	for i, cs := range clients {
		ids[i] = fmt.Sprintf("candidate-%d", i)
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: &resourcelock.LeaseLock{
				LeaseMeta:  lease,
				Client:     cs.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: ids[i]},
			},
			LeaseDuration:   leaseDuration,
			RenewDeadline:   renewDeadline,
			RetryPeriod:     retryPeriod,
			ReleaseOnCancel: true,
			Name:            "e2e",
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) { rec.lead(ctx, ids[i]) },
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			t.Fatalf("NewLeaderElector(%s) = %v", ids[i], err)
		}
		lctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		wg.Go(func() { le.Run(lctx) })
	}
	stopAll := func() {
		for _, c := range cancels {
			c()
		}
		wg.Wait()
	}
	defer stopAll()

	var first term
	poll(ctx, t, "a leader", func(context.Context) (bool, error) {
		ts := rec.snapshot()
		if len(ts) > 0 {
			first = ts[0]
		}
		return len(ts) > 0, nil
	})
	leader := 0
	if first.id == ids[1] {
		leader = 1
	}
	other := 1 - leader
	// Let the leader renew a few times while the other keeps trying.
	time.Sleep(3 * retryPeriod)

	cancelledAt := time.Now()
	cancels[leader]()
	var second term
	poll(ctx, t, ids[other]+" to take over", func(context.Context) (bool, error) {
		ts := rec.snapshot()
		if len(ts) > 1 {
			second = ts[1]
		}
		return len(ts) > 1, nil
	})
	if second.id != ids[other] {
		t.Errorf("second leader = %s, want %s", second.id, ids[other])
	}
	if !second.start.After(cancelledAt) {
		t.Errorf("%s started leading at %v, before %s stepped down at %v", second.id, second.start, first.id, cancelledAt)
	}
	// Without the release the other would wait out the lease (about
	// leaseDuration); with it, the next retry succeeds.
	if took := second.start.Sub(cancelledAt); took > leaseDuration/2 {
		t.Errorf("takeover after release took %v, want under %v", took, leaseDuration/2)
	}
	got, err := clients[leader].CoordinationV1().Leases(lease.Namespace).Get(ctx, lease.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Leases().Get(%s) = %v", lease.Name, err)
	}
	if h := got.Spec.HolderIdentity; h == nil || *h != ids[other] {
		t.Errorf("Lease holder through %s's server = %s, want %s", ids[leader], ptrString(h), ids[other])
	}
	if n := got.Spec.LeaseTransitions; n == nil || *n < 1 {
		t.Errorf("Lease leaseTransitions = %s, want >= 1", ptrString(n))
	}

	stopAll()
	// A term's end is recorded by its OnStartedLeading goroutine, which
	// Run does not wait for.
	var ts []term
	poll(ctx, t, "every leadership term to end", func(context.Context) (bool, error) {
		ts = rec.snapshot()
		for _, tm := range ts {
			if tm.end.IsZero() {
				return false, nil
			}
		}
		return true, nil
	})
	for i, a := range ts {
		for _, b := range ts[i+1:] {
			if a.id != b.id && b.start.Before(a.end.Add(-margin)) {
				t.Errorf("two leaders at once: %s [%v, %v] and %s from %v", a.id, a.start, a.end, b.id, b.start)
			}
		}
	}
	if len(ts) != 2 {
		t.Errorf("leadership terms = %+v, want 2", ts)
	}
	got, err = clients[other].CoordinationV1().Leases(lease.Namespace).Get(ctx, lease.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Leases().Get(%s) = %v", lease.Name, err)
	}
	if h := got.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("Lease holder after both stepped down = %s, want none (released)", *h)
	}
}
