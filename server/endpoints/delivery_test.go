package endpoints_test

import (
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestWriteKeepsItsSeatWhileItsEventIsDelivered: a write of a user who
// takes a seat keeps it after it returns for the watch event's estimated
// delivery (here 2 s per watch, capped at 1 s), and only while the
// resource has watches its event may go to; a dry run, a write in a
// namespace nobody watches and an exempt user's write hold nothing. The seat is
// seen through objwatch_apiserver_executing_seats, sampled after the
// write returned: a sample sent 300–900 ms after it must show the seat
// held, and none sent 500 ms or more after it may where nothing is held.
func TestWriteKeepsItsSeatWhileItsEventIsDelivered(t *testing.T) {
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) {
		c.ExecutionSeats, c.WatchEventCPU = 1, 2*time.Second
	}))
	admin := servertest.NewAPI(t, env)
	flood := servertest.Writers(t, env, admin, "flood")[0]

	type sample struct {
		after time.Duration // from the write's return to the scrape's start
		taken int
	}
	// samples scrapes the seats taken for 1.6 s after a write returned.
	samples := func(write func() servertest.Response) []sample {
		t.Helper()
		servertest.MustCode(t, "the write", write(), http.StatusCreated)
		returned := time.Now()
		var out []sample
		for time.Since(returned) < 1600*time.Millisecond {
			at := time.Since(returned)
			out = append(out, sample{at, servertest.MetricValue(admin, "objwatch_apiserver_executing_seats ")})
			time.Sleep(50 * time.Millisecond)
		}
		return out
	}
	noHold := func(what string, got []sample) {
		t.Helper()
		for _, s := range got {
			if s.after >= 500*time.Millisecond && s.taken != 0 {
				t.Errorf("%s: %d seats taken %v after it returned, want none: %v", what, s.taken, s.after, got)
				return
			}
		}
	}
	noHold("flood's create with no watch open", samples(func() servertest.Response {
		return flood.JSON("POST", servertest.CMs, servertest.CM("before", ""))
	}))

	resp, err := admin.C.Get(admin.Host + servertest.CMs + "?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	servertest.MustCode(t, "the watch", servertest.Response{Code: resp.StatusCode}, http.StatusOK)

	got := samples(func() servertest.Response { return flood.JSON("POST", servertest.CMs, servertest.CM("watched", "")) })
	held, released := false, false
	for _, s := range got {
		if s.after >= 300*time.Millisecond && s.after <= 900*time.Millisecond && s.taken == 1 {
			held = true
		}
		if s.after >= 1100*time.Millisecond && s.taken == 0 {
			released = true
		}
	}
	if !held || !released {
		t.Errorf("flood's create with a watch open: seat held within 0.3–0.9 s %v, released after 1.1 s %v; samples %v", held, released, got)
	}
	noHold("flood's dry-run create (no event)", samples(func() servertest.Response {
		return flood.JSON("POST", servertest.CMs+"?dryRun=All", servertest.CM("dry", ""))
	}))
	// The watch is of namespace default: an event in another namespace
	// goes to none of it, so a write there holds nothing (as
	// kube-apiserver counts the watches interested in a write).
	servertest.MustCode(t, "namespace other", admin.JSON("POST", "/api/v1/namespaces", `{"metadata":{"name":"other"}}`), http.StatusCreated)
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/other/rolebindings",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"flood-edit"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"edit"},"subjects":[{"kind":"User","name":"flood"}]}`)
	servertest.Eventually(t, "flood's binding in other", func() bool {
		return flood.JSON("GET", "/api/v1/namespaces/other/configmaps", "").Code == http.StatusOK
	})
	noHold("flood's create in a namespace nobody watches", samples(func() servertest.Response {
		return flood.JSON("POST", "/api/v1/namespaces/other/configmaps", servertest.CM("elsewhere", ""))
	}))
	noHold("admin's create (system:masters takes no seat)", samples(func() servertest.Response {
		return admin.JSON("POST", servertest.CMs, servertest.CM("admin", ""))
	}))
}

// TestDefaultGateKeepsASlotWhileUsersShare: the default delivery gate
// (one writer per CPU, two here) keeps one slot from watches' writes while
// more than one user is active, as objwatch_apiserver_watch_writer_slots
// shows: 1 once two users have made requests, 2 again after a request of
// one of them once the other has been inactive for over a second (the
// fair queue's activeFor). The administrator, exempt from fair queuing,
// counts as no user.
func TestDefaultGateKeepsASlotWhileUsersShare(t *testing.T) {
	prev := runtime.GOMAXPROCS(2) // the gate's slots are read when the server starts
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	env := testenv.Start(t)
	admin := servertest.NewAPI(t, env)
	users := servertest.Writers(t, env, admin, "one", "other")
	slots := func() int { return servertest.MetricValue(admin, "objwatch_apiserver_watch_writer_slots ") }

	for _, u := range users {
		servertest.MustCode(t, "a user's list", u.JSON("GET", servertest.CMs, ""), http.StatusOK)
	}
	if got := slots(); got != 1 {
		t.Fatalf("two users active: %d watch writer slots open, want 1 (one kept for requests)", got)
	}
	time.Sleep(1500 * time.Millisecond)
	servertest.MustCode(t, "one's list", users[0].JSON("GET", servertest.CMs, ""), http.StatusOK)
	if got := slots(); got != 2 {
		t.Fatalf("one user active: %d watch writer slots open, want 2", got)
	}
	servertest.MustCode(t, "other's list", users[1].JSON("GET", servertest.CMs, ""), http.StatusOK)
	if got := slots(); got != 1 {
		t.Fatalf("two users active again: %d watch writer slots open, want 1", got)
	}
}
