package endpoints_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestFairQueuing: with one execution seat, a running watch holds none,
// nor does a create whose body trickles in. While a create of flood's
// holds the seat (its validating webhook waits), calm's create waits at
// most a quarter of the request timeout and then gets Kubernetes' 429
// with Retry-After; admin (system:masters) is exempt and served at once;
// flood's further creates queue until flood's share of the in-flight
// limit is used up, and then get 429; once the seat is free, calm's
// create, queued after all of flood's, executes after at most one or two
// of them (round robin over users), not after all of them (FIFO).
func TestFairQueuing(t *testing.T) {
	const (
		timeout = 8 * time.Second // queue wait: 2 s
		queued  = 8               // flood's share is 10 of 20: the held create, the trickling one and 8 queued
	)
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) {
		c.ExecutionSeats, c.MaxMutatingInFlight, c.UserInFlightShare, c.RequestTimeout = 1, 2*(queued+2), 0.5, timeout
	}))
	admin := servertest.NewAPI(t, env)
	users := servertest.Writers(t, env, admin, "flood", "calm")
	flood, calm := users[0], users[1]
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"cm-watcher"},
		"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["watch"]}]}`)
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"cm-watchers"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"cm-watcher"},
		"subjects":[{"kind":"User","name":"calm"}]}`)
	servertest.Eventually(t, "calm's watch binding", func() bool {
		return calm.JSON("GET", servertest.CMs+"?watch=true&timeoutSeconds=1", "").Code == http.StatusOK
	})
	held, free := make(chan struct{}), make(chan struct{})
	env.Webhook(t, testenv.WebhookOptions{Name: "hold", Rules: servertest.ConfigMapRules,
		Validating: func(ctx context.Context, r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			if r.Name == "held" {
				close(held)
				select {
				case <-free:
				case <-ctx.Done():
				}
			}
			return nil
		}})

	resp, err := calm.C.Get(calm.Host + servertest.CMs + "?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	servertest.MustCode(t, "calm's watch", servertest.Response{Code: resp.StatusCode}, http.StatusOK)
	servertest.MustCode(t, "calm's create while its watch runs", calm.JSON("POST", servertest.CMs, servertest.CM("calm-watching", "")), http.StatusCreated)
	servertest.SlowCreate(t, env, servertest.UserTLS(t, env, "flood"), "trickling")
	servertest.MustCode(t, "calm's create while flood's body trickles in", calm.JSON("POST", servertest.CMs, servertest.CM("calm-trickling", "")), http.StatusCreated)

	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(free)
	var heldCode int
	wg.Go(func() { heldCode = flood.JSON("POST", servertest.CMs, servertest.CM("held", "")).Code })
	<-held
	start := time.Now()
	mustTooMany(t, "calm's create while the seat is held", calm.JSON("POST", servertest.CMs, servertest.CM("calm-early", "")))
	if waited := time.Since(start); waited < timeout/4-100*time.Millisecond || waited > timeout/2 {
		t.Errorf("calm's create was refused after %v in the queue, want about %v", waited, timeout/4)
	}
	servertest.MustCode(t, "admin's create (system:masters, exempt)", admin.JSON("POST", servertest.CMs, servertest.CM("admin-0", "")), http.StatusCreated)

	// The order in which the queued creates executed is the order of
	// their resourceVersions (one seat: one create at a time), not the
	// order their clients saw the answers in.
	rvs := make([]int64, queued+1) // calm's last
	codes := make([]int, queued+1)
	create := func(i int, c *servertest.API, name string) {
		r := c.JSON("POST", servertest.CMs, servertest.CM(name, ""))
		codes[i] = r.Code
		if r.Code == http.StatusCreated {
			rvs[i], _ = strconv.ParseInt(r.Object()["metadata"].(map[string]any)["resourceVersion"].(string), 10, 64)
		}
	}
	for i := range queued {
		wg.Go(func() { create(i, flood, fmt.Sprintf("flood-%d", i)) })
	}
	time.Sleep(200 * time.Millisecond) // flood's creates reach their queue
	start = time.Now()
	mustTooMany(t, "flood's create beyond its share", flood.JSON("POST", servertest.CMs, servertest.CM("flood-extra", "")))
	if d := time.Since(start); d > timeout/8 {
		t.Fatalf("flood's create beyond its share was refused after %v, want at once", d)
	}
	wg.Go(func() { create(queued, calm, "calm-queued") })
	time.Sleep(500 * time.Millisecond) // calm's create reaches its queue

	free <- struct{}{}
	wg.Wait()
	servertest.MustCode(t, "the held create", servertest.Response{Code: heldCode}, http.StatusCreated)
	for i, c := range codes {
		if c != http.StatusCreated {
			t.Errorf("queued create %d = %d, want 201", i, c)
		}
	}
	rank := 1 // calm's place in the execution order
	for _, rv := range rvs[:queued] {
		if rv < rvs[queued] {
			rank++
		}
	}
	if rank > 3 {
		t.Errorf("calm's create executed %d. of %d queued, want at most 3. (round robin)", rank, queued+1)
	}
}

func mustTooMany(t *testing.T, what string, r servertest.Response) {
	t.Helper()
	if s := r.Status(); r.Code != http.StatusTooManyRequests || s.Reason != "TooManyRequests" ||
		s.Message != "Too many requests, please try again later." || r.Header.Get("Retry-After") != "1" {
		t.Fatalf("%s = %d %s (Retry-After %q), want Kubernetes' 429", what, r.Code, r.Body, r.Header.Get("Retry-After"))
	}
}
