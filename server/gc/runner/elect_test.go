package runner_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

const gcLease = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/objwatch-garbage-collector"

func shortLease(c *server.Config) { c.GCLeaseDuration = 2 * time.Second }

func leader(a *servertest.API) int { return servertest.MetricValue(a, "objwatch_gc_leader ") }

// holder returns the lease's holderIdentity and leaseTransitions.
func holder(t *testing.T, a *servertest.API) (string, int) {
	t.Helper()
	r := a.JSON("GET", gcLease, "")
	servertest.MustCode(t, "get lease", r, http.StatusOK)
	spec, _ := r.Object()["spec"].(map[string]any)
	h, _ := spec["holderIdentity"].(string)
	n, _ := spec["leaseTransitions"].(float64)
	return h, int(n)
}

// Of two servers on one etcd, one runs the garbage collector at a time,
// holding a Lease that kubectl can see; deletions through the other are
// collected all the same; when the holder shuts down it releases the
// lease and the other takes over at once.
func TestGCElection(t *testing.T) {
	ep := testenv.StartEtcd(t)
	one := testenv.Start(t, testenv.WithEtcd(ep), testenv.WithServerConfig(shortLease))
	two := testenv.Start(t, testenv.WithEtcd(ep), testenv.WithServerConfig(shortLease))
	a1, a2 := servertest.NewAPI(t, one), servertest.NewAPI(t, two)
	g := &servertest.GCAPI{API: a1, T: t}
	g.Eventually("one leader", func() (bool, string) {
		l1, l2 := leader(a1), leader(a2)
		return l1+l2 == 1, fmt.Sprintf("leader metrics %d and %d", l1, l2)
	})
	lead, other, leadEnv := a1, a2, one
	if leader(a2) == 1 {
		lead, other, leadEnv = a2, a1, two
	}
	first, _ := holder(t, other)
	if first == "" {
		t.Fatal("the lease has no holder")
	}
	// Stable: the other does not take over while the holder renews.
	time.Sleep(3 * time.Second)
	if h, _ := holder(t, other); h != first || leader(lead) != 1 || leader(other) != 0 {
		t.Fatalf("after 3 s: holder %q (was %q), leader metrics %d/%d", h, first, leader(lead), leader(other))
	}
	// Collection works through the server that does not run it.
	og := &servertest.GCAPI{API: other, T: t}
	owner := og.CM("owner", nil)
	og.CM("dep", nil, servertest.OwnerRef(t, owner, false))
	servertest.MustCode(t, "delete owner", other.JSON("DELETE", servertest.CMs+"/owner", ""), http.StatusOK)
	og.Gone(servertest.CMs + "/dep")

	leadEnv.Stop()
	start := time.Now()
	og.Eventually("the other server leads", func() (bool, string) {
		h, _ := holder(t, other)
		return leader(other) == 1 && h != first && h != "", fmt.Sprintf("holder %q, metric %d", h, leader(other))
	})
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("takeover after a release took %v, want well under the 2 s lease", d)
	}
	owner2 := og.CM("owner-2", nil)
	og.CM("dep-2", nil, servertest.OwnerRef(t, owner2, false))
	servertest.MustCode(t, "delete owner-2", other.JSON("DELETE", servertest.CMs+"/owner-2", ""), http.StatusOK)
	og.Gone(servertest.CMs + "/dep-2")
}

// A lease taken by another holder (here written into etcd as if another
// server had taken it) stops this server's collector; once that holder
// stops renewing, the lease expires and this server takes it back, and
// counts a transition.
func TestGCLeaseLostAndRetaken(t *testing.T) {
	env := testenv.Start(t, testenv.WithServerConfig(shortLease))
	a := servertest.NewAPI(t, env)
	g := &servertest.GCAPI{API: a, T: t}
	g.Eventually("leader", func() (bool, string) { return leader(a) == 1, "" })
	me, n := holder(t, a)
	servertest.RewriteKey(t, servertest.RawStore(t, env), "/registry/coordination.k8s.io/leases/kube-system/objwatch-garbage-collector", func(m map[string]any) {
		spec := m["spec"].(map[string]any)
		spec["holderIdentity"] = "ghost"
		spec["renewTime"] = time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")
	})
	g.Eventually("the collector stops", func() (bool, string) { return leader(a) == 0, "" })
	lost := time.Now()
	g.Eventually("retaken after expiry", func() (bool, string) {
		h, _ := holder(t, a)
		return leader(a) == 1 && h == me, h
	})
	if d := time.Since(lost); d < time.Second {
		t.Errorf("retaken %v after losing it, before the 2 s lease could expire", d)
	}
	if _, n2 := holder(t, a); n2 <= n {
		t.Errorf("leaseTransitions %d after a takeover, was %d", n2, n)
	}
	// And it collects again.
	owner := g.CM("owner", nil)
	g.CM("dep", nil, servertest.OwnerRef(t, owner, false))
	servertest.MustCode(t, "delete owner", a.JSON("DELETE", servertest.CMs+"/owner", ""), http.StatusOK)
	g.Gone(servertest.CMs + "/dep")
}
