package server_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/testenv"
)

const gcLease = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/objwatch-garbage-collector"

func shortLease(c *server.Config) { c.GCLeaseDuration = 2 * time.Second }

func leader(a *api) int { return metricValue(a, "objwatch_gc_leader ") }

// holder returns the lease's holderIdentity and leaseTransitions.
func holder(t *testing.T, a *api) (string, int) {
	t.Helper()
	r := a.json("GET", gcLease, "")
	mustCode(t, "get lease", r, http.StatusOK)
	spec, _ := r.object()["spec"].(map[string]any)
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
	a1, a2 := newAPI(t, one), newAPI(t, two)
	g := &gcAPI{api: a1, t: t}
	g.eventually("one leader", func() (bool, string) {
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
	og := &gcAPI{api: other, t: t}
	owner := og.cm("owner", nil)
	og.cm("dep", nil, ownerRef(t, owner, false))
	mustCode(t, "delete owner", other.json("DELETE", cms+"/owner", ""), http.StatusOK)
	og.gone(cms + "/dep")

	leadEnv.Stop()
	start := time.Now()
	og.eventually("the other server leads", func() (bool, string) {
		h, _ := holder(t, other)
		return leader(other) == 1 && h != first && h != "", fmt.Sprintf("holder %q, metric %d", h, leader(other))
	})
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("takeover after a release took %v, want well under the 2 s lease", d)
	}
	owner2 := og.cm("owner-2", nil)
	og.cm("dep-2", nil, ownerRef(t, owner2, false))
	mustCode(t, "delete owner-2", other.json("DELETE", cms+"/owner-2", ""), http.StatusOK)
	og.gone(cms + "/dep-2")
}

// A lease taken by another holder (here written into etcd as if another
// server had taken it) stops this server's collector; once that holder
// stops renewing, the lease expires and this server takes it back, and
// counts a transition.
func TestGCLeaseLostAndRetaken(t *testing.T) {
	env := testenv.Start(t, testenv.WithServerConfig(shortLease))
	a := newAPI(t, env)
	g := &gcAPI{api: a, t: t}
	g.eventually("leader", func() (bool, string) { return leader(a) == 1, "" })
	me, n := holder(t, a)
	rewriteKey(t, rawStore(t, env), "/registry/coordination.k8s.io/leases/kube-system/objwatch-garbage-collector", func(m map[string]any) {
		spec := m["spec"].(map[string]any)
		spec["holderIdentity"] = "ghost"
		spec["renewTime"] = time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")
	})
	g.eventually("the collector stops", func() (bool, string) { return leader(a) == 0, "" })
	lost := time.Now()
	g.eventually("retaken after expiry", func() (bool, string) {
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
	owner := g.cm("owner", nil)
	g.cm("dep", nil, ownerRef(t, owner, false))
	mustCode(t, "delete owner", a.json("DELETE", cms+"/owner", ""), http.StatusOK)
	g.gone(cms + "/dep")
}
