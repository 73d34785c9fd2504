package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/testenv"
)

// TestFairQueuing: with one execution seat, a running watch holds none;
// held by a create of flood's
// whose body trickles in, calm's create waits at most a quarter of the
// request timeout and then gets Kubernetes' 429 with Retry-After; admin
// (system:masters) is exempt and served at once; flood's further creates
// queue until flood's share of the in-flight limit is used up, and then
// get 429; once the seat is free, calm's create, queued after all of
// flood's, executes after at most one or two of them (round robin over
// users), not after all of them (FIFO).
func TestFairQueuing(t *testing.T) {
	const (
		timeout = 8 * time.Second // queue wait: 2 s
		queued  = 9               // flood's share is 10 of 20: the slow create and 9 queued
	)
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) {
		c.ExecutionSeats, c.MaxMutatingInFlight, c.UserInFlightShare, c.RequestTimeout = 1, 2*(queued+1), 0.5, timeout
	}))
	admin := newAPI(t, env)
	users := writers(t, env, admin, "flood", "calm")
	flood, calm := users[0], users[1]
	admin.must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"cm-watcher"},
		"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["watch"]}]}`)
	admin.must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"cm-watchers"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"cm-watcher"},
		"subjects":[{"kind":"User","name":"calm"}]}`)
	eventually(t, "calm's watch binding", func() bool {
		return calm.json("GET", cms+"?watch=true&timeoutSeconds=1", "").code == http.StatusOK
	})

	// A watch holds the seat only while it starts.
	resp, err := calm.c.Get(calm.host + cms + "?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	mustCode(t, "calm's watch", response{code: resp.StatusCode}, http.StatusOK)
	mustCode(t, "calm's create while its watch runs", calm.json("POST", cms, cm("calm-watching", "")), http.StatusCreated)

	slow := slowCreate(t, env, userTLS(t, env, "flood"), "slow")
	// The slow create holds the seat once its handler runs: calm's
	// creates are 201 until then, and 429 after waiting in the queue.
	var waited time.Duration
	for i := 0; ; i++ {
		start := time.Now()
		r := calm.json("POST", cms, cm(fmt.Sprintf("calm-early-%d", i), ""))
		if r.code == http.StatusCreated && i < 50 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		waited = time.Since(start)
		mustTooMany(t, "calm's create while the seat is held", r)
		break
	}
	if waited < timeout/4-100*time.Millisecond || waited > timeout/2 {
		t.Errorf("calm's create was refused after %v in the queue, want about %v", waited, timeout/4)
	}
	mustCode(t, "admin's create (system:masters, exempt)", admin.json("POST", cms, cm("admin-0", "")), http.StatusCreated)

	var seq atomic.Int64
	var wg sync.WaitGroup
	order := make([]int64, queued+1) // completion order; calm's last
	codes := make([]int, queued+1)
	for i := range queued {
		wg.Go(func() {
			codes[i] = flood.json("POST", cms, cm(fmt.Sprintf("flood-%d", i), "")).code
			order[i] = seq.Add(1)
		})
	}
	time.Sleep(200 * time.Millisecond) // flood's creates reach their queue
	start := time.Now()
	mustTooMany(t, "flood's create beyond its share", flood.json("POST", cms, cm("flood-extra", "")))
	if d := time.Since(start); d > timeout/8 {
		t.Fatalf("flood's create beyond its share was refused after %v, want at once", d)
	}
	wg.Go(func() {
		codes[queued] = calm.json("POST", cms, cm("calm-queued", "")).code
		order[queued] = seq.Add(1)
	})
	time.Sleep(500 * time.Millisecond) // calm's create reaches its queue

	body := cm("slow", "")
	fmt.Fprint(slow, body[len(body)/2:])
	slow.SetReadDeadline(time.Now().Add(timeout))
	resp, err = http.ReadResponse(bufio.NewReader(slow), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	mustCode(t, "the slow create", response{code: resp.StatusCode}, http.StatusCreated)
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusCreated {
			t.Errorf("queued create %d = %d, want 201", i, c)
		}
	}
	if order[queued] > 3 {
		t.Errorf("calm's create completed %d. of %d queued, want at most 3. (round robin)", order[queued], queued+1)
	}
}

func mustTooMany(t *testing.T, what string, r response) {
	t.Helper()
	if s := r.status(); r.code != http.StatusTooManyRequests || s.Reason != "TooManyRequests" ||
		s.Message != "Too many requests, please try again later." || r.header.Get("Retry-After") != "1" {
		t.Fatalf("%s = %d %s (Retry-After %q), want Kubernetes' 429", what, r.code, r.body, r.header.Get("Retry-After"))
	}
}
