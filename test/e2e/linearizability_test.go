package e2e_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	rb "github.com/objwatch/objwatch/internal/robustness"
	"github.com/objwatch/objwatch/testenv"
)

// This file checks that single-object reads and writes are linearizable
// (docs/ARCHITECTURE.md, "Guarantees"): clients spread over two servers on one etcd record
// every call and its answer, and porcupine searches for a sequential order,
// consistent with real time, that a per-object register explains.
//
// The register is internal/robustness's Model (shared with the robustness
// harness, test/robustness). A write without a definite answer (cancelled,
// connection error, 5xx) may or may not have happened: it never returns,
// so the checker can place it anywhere after its call.

const (
	linClients  = 6
	linKeys     = 3
	linDuration = 2500 * time.Millisecond
	// linCancelEvery: one write in this many gets a deadline short enough
	// to cancel it in flight, so some writes have no definite answer.
	linCancelEvery = 40
	linNamespace   = "lin"
)

// linValues is small on purpose: an update that writes the current value
// is a no-op, and the register must see its resourceVersion stay.
var linValues = []string{"x", "y", "z"}

// TestLinearizability runs clients that send every request to one of two
// servers at random, so reads through one server check writes through the
// other. GET and LIST without resourceVersion are consistent reads and
// must see every write that finished before they started.
func TestLinearizability(t *testing.T) {
	ep := testenv.StartEtcd(t)
	envs := []*testenv.Env{testenv.Start(t, testenv.WithEtcd(ep)), testenv.Start(t, testenv.WithEtcd(ep))}
	keys := names("lin", linKeys)

	setup := envs[0].HTTPClient()
	t.Cleanup(setup.CloseIdleConnections)
	ns := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": linNamespace}}
	if code, _, err := rb.DoJSON(t.Context(), setup, http.MethodPost, envs[0].Config.Host+"/api/v1/namespaces", ns); err != nil || code != http.StatusCreated {
		t.Fatalf("POST namespace %s = %d, %v, want 201", linNamespace, code, err)
	}

	start := time.Now()
	deadline := start.Add(linDuration)
	histories := make([][]porcupine.Operation, linClients)
	var wg sync.WaitGroup
	var clients []*linClient
	for id := range linClients {
		c := &linClient{id: id, start: start, rng: rand.New(rand.NewPCG(uint64(id), uint64(start.UnixNano()))), lastRV: map[string]int64{}}
		for i, env := range envs {
			hc := env.HTTPClient()
			t.Cleanup(hc.CloseIdleConnections)
			c.servers = append(c.servers, linServer{name: string(rune('A' + i)), host: env.Config.Host, c: hc})
		}
		wg.Go(func() {
			for time.Now().Before(deadline) {
				c.step(t.Context(), keys)
			}
			histories[id] = c.ops
		})
		clients = append(clients, c)
	}
	wg.Wait()
	for _, c := range clients {
		for _, f := range c.failures {
			t.Logf("client %d: no definite answer: %s", c.id, f)
		}
	}

	var ops []porcupine.Operation
	counts := map[string]int{}
	noAnswer := 0
	for _, h := range histories {
		for _, op := range h {
			in, out := op.Input.(rb.Input), op.Output.(rb.Output)
			counts[fmt.Sprintf("%s %d", in.Kind, out.Code)]++
			if out.Code == 0 {
				noAnswer++
				op.Return = math.MaxInt64
			}
			ops = append(ops, op)
		}
	}
	t.Logf("%d operations in %v (%d without an answer): %v", len(ops), linDuration, noAnswer, counts)
	for _, c := range []string{"create 201", "create 409", "update 200", "update 409", "update 404", "delete 200", "delete 404", "get 200", "get 404", "list 200"} {
		if counts[c] == 0 {
			t.Errorf("no %q in the history: the test did not exercise it", c)
		}
	}

	checkStart := time.Now()
	res, info := porcupine.CheckOperationsVerbose(rb.Model, ops, 20*time.Second)
	t.Logf("porcupine: %s after %v", res, time.Since(checkStart).Round(time.Millisecond))
	if res == porcupine.Ok {
		return
	}
	// Like TempDir, but kept when the test runs with -artifacts.
	path := filepath.Join(t.ArtifactDir(), "linearizability.html")
	if err := porcupine.VisualizePath(rb.Model, info, path); err != nil {
		t.Errorf("VisualizePath(%s) = %v", path, err)
	}
	if res == porcupine.Illegal {
		t.Fatalf("history of %d operations is not linearizable; visualization (kept with go test -artifacts): %s", len(ops), path)
	}
	t.Fatalf("porcupine could not decide within 20s whether %d operations are linearizable (%s); visualization (kept with go test -artifacts): %s", len(ops), res, path)
}

type linServer struct {
	name string
	host string
	c    *http.Client
}

// linClient is one sequential client; it is used by one goroutine.
type linClient struct {
	id      int
	start   time.Time
	servers []linServer
	rng     *rand.Rand
	lastRV  map[string]int64 // the last resourceVersion seen per key, for conditional updates
	ops     []porcupine.Operation
	// failures are requests without a definite answer that were not
	// cancelled on purpose.
	failures []string
}

// step sends one random request and records it.
func (c *linClient) step(ctx context.Context, keys []string) {
	srv := c.servers[c.rng.IntN(len(c.servers))]
	key := keys[c.rng.IntN(len(keys))]
	value := linValues[c.rng.IntN(len(linValues))]
	base := srv.host + "/api/v1/namespaces/" + linNamespace + "/configmaps"
	cm := func(rv int64) map[string]any {
		md := map[string]any{"name": key, "namespace": linNamespace}
		if rv != 0 {
			md["resourceVersion"] = strconv.FormatInt(rv, 10)
		}
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": map[string]string{"v": value}}
	}
	in := rb.Input{Key: key}
	var method, url string
	var body any
	switch p := c.rng.IntN(100); {
	case p < 30:
		in.Kind, method, url = rb.OpGet, http.MethodGet, base+"/"+key
	case p < 40:
		in.Kind, method, url = rb.OpList, http.MethodGet, base
	case p < 60:
		in.Kind, in.Value, in.RV = rb.OpUpdate, value, max(c.lastRV[key], 1)
		method, url, body = http.MethodPut, base+"/"+key, cm(in.RV)
	case p < 75:
		in.Kind, in.Value = rb.OpUpdate, value
		method, url, body = http.MethodPut, base+"/"+key, cm(0)
	case p < 90:
		in.Kind, in.Value = rb.OpCreate, value
		method, url, body = http.MethodPost, base, cm(0)
	default:
		in.Kind, method, url = rb.OpDelete, http.MethodDelete, base+"/"+key
	}

	timeout, cancelled := 10*time.Second, false
	if in.Kind != rb.OpGet && in.Kind != rb.OpList && c.rng.IntN(linCancelEvery) == 0 {
		timeout, cancelled = time.Duration(c.rng.Int64N(int64(2*time.Millisecond))), true
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	// time.Since reads the monotonic clock: a wall-clock step must not
	// reorder operations.
	call := time.Since(c.start).Nanoseconds()
	code, obj, err := rb.DoJSON(rctx, srv.c, method, url, body)
	ret := time.Since(c.start).Nanoseconds()
	cancel()

	op := func(in rb.Input, out rb.Output) {
		if out.RV != 0 {
			c.lastRV[in.Key] = out.RV
		}
		c.ops = append(c.ops, porcupine.Operation{ClientId: c.id, Input: in, Output: out, Call: call, Return: ret, Metadata: srv.name})
	}
	definite := err == nil && (code == http.StatusOK || code == http.StatusCreated || code == http.StatusConflict || code == http.StatusNotFound)
	if !definite && !cancelled {
		c.failures = append(c.failures, fmt.Sprintf("%s %s via %s = %d, %v", method, url, srv.name, code, err))
	}
	switch {
	case !definite && (in.Kind == rb.OpGet || in.Kind == rb.OpList):
		// A read without an answer tells nothing.
	case !definite:
		op(in, rb.Output{})
	case in.Kind == rb.OpList:
		if code != http.StatusOK {
			return
		}
		found := map[string]rb.Object{}
		for _, it := range obj.Items {
			found[it.Metadata.Name] = it
		}
		for _, k := range keys {
			it, ok := found[k]
			if !ok {
				op(rb.Input{Kind: rb.OpList, Key: k}, rb.Output{Code: http.StatusNotFound})
				continue
			}
			op(rb.Input{Kind: rb.OpList, Key: k}, rb.Output{Code: http.StatusOK, Value: it.Data["v"], RV: it.RV(), UID: it.Metadata.UID})
		}
	case in.Kind == rb.OpDelete && code == http.StatusOK:
		op(in, rb.Output{Code: code, UID: obj.Details.UID})
	case code == http.StatusOK || code == http.StatusCreated:
		op(in, rb.Output{Code: code, Value: obj.Data["v"], RV: obj.RV(), UID: obj.Metadata.UID})
	default:
		op(in, rb.Output{Code: code})
	}
}
