package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/objwatch/objwatch/testenv"
)

// This file checks that single-object reads and writes are linearizable
// (docs/ARCHITECTURE.md, "Guarantees"): clients spread over two servers on one etcd record
// every call and its answer, and porcupine searches for a sequential order,
// consistent with real time, that a per-object register explains.
//
// The register knows resourceVersions only from answers: they are etcd
// revisions, so every write must answer with a version greater than every
// version it follows, and a no-op update keeps the version. A write without
// a definite answer (cancelled, connection error, 5xx) may or may not have
// happened: it never returns, so the checker can place it anywhere after its
// call, including after everything else, where it changes nothing.

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

type linKind uint8

const (
	linGet linKind = iota
	linList
	linCreate
	linUpdate
	linDelete
)

func (k linKind) String() string {
	return [...]string{"get", "list", "create", "update", "delete"}[k]
}

type linInput struct {
	kind  linKind
	key   string
	value string // create, update
	rv    int64  // update: the resourceVersion precondition; 0 for none
}

type linOutput struct {
	code  int // HTTP status; 0: no definite answer
	value string
	rv    int64
	uid   string
}

// linState is one object as far as the answers so far pin it down.
type linState struct {
	exists bool
	value  string
	// rv is the object's resourceVersion when known is set; otherwise,
	// and always for an absent object, every later version exceeds it.
	rv    int64
	known bool
	uid   string // "" when not known
}

// fits reports whether an answer about the existing object s agrees with it.
func (s linState) fits(o linOutput) bool {
	if s.uid != "" && s.uid != o.uid {
		return false
	}
	if s.known {
		return o.rv == s.rv
	}
	return o.rv > s.rv
}

func linStep(state, input, output any) (bool, any) {
	s, in, out := state.(linState), input.(linInput), output.(linOutput)
	if out.code == 0 {
		return true, linMayApply(s, in)
	}
	pinned := linState{exists: true, value: out.value, rv: out.rv, known: true, uid: out.uid}
	switch in.kind {
	case linGet, linList:
		switch out.code {
		case http.StatusNotFound:
			return !s.exists, s
		case http.StatusOK:
			return s.exists && out.value == s.value && s.fits(out), pinned
		}
	case linCreate:
		switch out.code {
		case http.StatusConflict:
			return s.exists, s
		case http.StatusCreated:
			return !s.exists && out.value == in.value && out.rv > s.rv, pinned
		}
	case linUpdate:
		if !s.exists {
			return out.code == http.StatusNotFound, s
		}
		if in.rv != 0 {
			if out.code == http.StatusConflict {
				return !s.known || s.rv != in.rv, s
			}
			if s.known && s.rv != in.rv || !s.known && in.rv <= s.rv {
				return false, s
			}
			s.rv, s.known = in.rv, true
		}
		if out.code != http.StatusOK || out.value != in.value || s.uid != "" && s.uid != out.uid {
			return false, s
		}
		if in.value == s.value {
			return s.fits(out), pinned // a no-op keeps the resourceVersion
		}
		return out.rv > s.rv, pinned
	case linDelete:
		switch out.code {
		case http.StatusNotFound:
			return !s.exists, s
		case http.StatusOK:
			return s.exists && (s.uid == "" || s.uid == out.uid), linState{rv: s.rv}
		}
	}
	return false, s
}

// linMayApply is the state after a write without an answer, placed where
// it takes effect if it can; the checker places it after everything else
// when it never took effect.
func linMayApply(s linState, in linInput) linState {
	switch in.kind {
	case linCreate:
		if !s.exists {
			return linState{exists: true, value: in.value, rv: s.rv}
		}
	case linUpdate:
		if !s.exists || in.value == s.value {
			return s
		}
		if in.rv != 0 {
			if s.known && s.rv != in.rv || !s.known && in.rv <= s.rv {
				return s
			}
			s.rv = in.rv
		}
		return linState{exists: true, value: in.value, rv: s.rv, uid: s.uid}
	case linDelete:
		if s.exists {
			return linState{rv: s.rv}
		}
	}
	return s
}

var linModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(linInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return linState{} },
	Step: linStep,
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		call := fmt.Sprintf("%s %s", in.kind, in.key)
		switch {
		case in.kind == linUpdate && in.rv != 0:
			call += fmt.Sprintf(" = %s if rv %d", in.value, in.rv)
		case in.kind == linCreate || in.kind == linUpdate:
			call += " = " + in.value
		}
		switch out.code {
		case 0:
			return call + " -> no answer"
		case http.StatusOK, http.StatusCreated:
			if in.kind == linDelete {
				return fmt.Sprintf("%s -> %d uid %.8s", call, out.code, out.uid)
			}
			return fmt.Sprintf("%s -> %d %s rv %d uid %.8s", call, out.code, out.value, out.rv, out.uid)
		}
		return fmt.Sprintf("%s -> %d", call, out.code)
	},
	DescribeState: func(state any) string {
		s := state.(linState)
		switch {
		case !s.exists:
			return fmt.Sprintf("absent, next rv > %d", s.rv)
		case s.known:
			return fmt.Sprintf("%s rv %d uid %.8s", s.value, s.rv, s.uid)
		}
		return fmt.Sprintf("%s rv > %d uid %.8s", s.value, s.rv, s.uid)
	},
	DescribeOperationMetadata: func(info any) string {
		if info == nil {
			return ""
		}
		return fmt.Sprint(info)
	},
}

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
	if code, _, err := linDo(t.Context(), setup, http.MethodPost, envs[0].Config.Host+"/api/v1/namespaces", ns); err != nil || code != http.StatusCreated {
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
			in, out := op.Input.(linInput), op.Output.(linOutput)
			counts[fmt.Sprintf("%s %d", in.kind, out.code)]++
			if out.code == 0 {
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
	res, info := porcupine.CheckOperationsVerbose(linModel, ops, 20*time.Second)
	t.Logf("porcupine: %s after %v", res, time.Since(checkStart).Round(time.Millisecond))
	if res == porcupine.Ok {
		return
	}
	// Like TempDir, but kept when the test runs with -artifacts.
	path := filepath.Join(t.ArtifactDir(), "linearizability.html")
	if err := porcupine.VisualizePath(linModel, info, path); err != nil {
		t.Errorf("VisualizePath(%s) = %v", path, err)
	}
	if res == porcupine.Illegal {
		t.Fatalf("history of %d operations is not linearizable; visualization (kept with go test -artifacts): %s", len(ops), path)
	}
	t.Fatalf("porcupine could not decide within 20s whether %d operations are linearizable (%s); visualization (kept with go test -artifacts): %s", len(ops), res, path)
}

// TestLinearizabilityModel checks the register on small histories, so a
// model that accepts everything cannot hide behind a passing
// TestLinearizability.
func TestLinearizabilityModel(t *testing.T) {
	// op is one operation of client 0 from call to ret; ret < 0: no answer.
	type op struct {
		call, ret int64
		in        linInput
		out       linOutput
	}
	create := func(call, ret int64, v string, rv int64) op {
		return op{call, ret, linInput{kind: linCreate, key: "k", value: v}, linOutput{code: http.StatusCreated, value: v, rv: rv, uid: "u"}}
	}
	get := func(call, ret int64, v string, rv int64) op {
		out := linOutput{code: http.StatusOK, value: v, rv: rv, uid: "u"}
		if rv == 0 {
			out = linOutput{code: http.StatusNotFound}
		}
		return op{call, ret, linInput{kind: linGet, key: "k"}, out}
	}
	update := func(call, ret int64, v string, pre, rv int64) op {
		return op{call, ret, linInput{kind: linUpdate, key: "k", value: v, rv: pre}, linOutput{code: http.StatusOK, value: v, rv: rv, uid: "u"}}
	}
	lost := func(o op) op { o.ret, o.out = -1, linOutput{}; return o }
	for _, tc := range []struct {
		name string
		ops  []op
		want porcupine.CheckResult
	}{
		{"read your write", []op{create(0, 1, "x", 5), get(2, 3, "x", 5)}, porcupine.Ok},
		{"stale read", []op{create(0, 1, "x", 5), update(2, 3, "y", 0, 6), get(4, 5, "x", 5)}, porcupine.Illegal},
		{"read before create", []op{create(0, 1, "x", 5), get(2, 3, "", 0)}, porcupine.Illegal},
		{"concurrent read", []op{create(0, 3, "x", 5), get(1, 2, "", 0), get(4, 5, "x", 5)}, porcupine.Ok},
		{"no-op update keeps rv", []op{create(0, 1, "x", 5), update(2, 3, "x", 0, 5)}, porcupine.Ok},
		{"no-op update with new rv", []op{create(0, 1, "x", 5), update(2, 3, "x", 0, 6)}, porcupine.Illegal},
		{"update with old rv", []op{create(0, 1, "x", 5), update(2, 3, "y", 0, 4)}, porcupine.Illegal},
		{"precondition met", []op{create(0, 1, "x", 5), update(2, 3, "y", 5, 7)}, porcupine.Ok},
		{"precondition not met", []op{create(0, 1, "x", 5), update(2, 3, "y", 4, 7)}, porcupine.Illegal},
		{"unanswered create happened", []op{lost(create(0, 0, "x", 0)), get(2, 3, "x", 9), update(4, 5, "y", 9, 10)}, porcupine.Ok},
		{"unanswered create did not happen", []op{lost(create(0, 0, "x", 0)), get(2, 3, "", 0)}, porcupine.Ok},
		{"unanswered create took effect once", []op{lost(create(0, 0, "x", 0)), get(2, 3, "x", 9), get(4, 5, "", 0)}, porcupine.Illegal},
		{"unanswered update seen, then undone", []op{create(0, 1, "x", 5), lost(update(2, 0, "y", 5, 0)), get(4, 5, "y", 8), get(6, 7, "x", 5)}, porcupine.Illegal},
		{"unanswered update with a failed precondition", []op{create(0, 1, "x", 5), update(2, 3, "z", 5, 6), lost(update(4, 0, "y", 5, 0)), get(6, 7, "y", 8)}, porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var history []porcupine.Operation
			for _, o := range tc.ops {
				if o.ret < 0 {
					o.ret = math.MaxInt64
				}
				history = append(history, porcupine.Operation{Input: o.in, Output: o.out, Call: o.call, Return: o.ret})
			}
			if got := porcupine.CheckOperationsTimeout(linModel, history, time.Second); got != tc.want {
				t.Errorf("CheckOperations(%s) = %s, want %s", tc.name, got, tc.want)
			}
		})
	}
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
	in := linInput{key: key}
	var method, url string
	var body any
	switch p := c.rng.IntN(100); {
	case p < 30:
		in.kind, method, url = linGet, http.MethodGet, base+"/"+key
	case p < 40:
		in.kind, method, url = linList, http.MethodGet, base
	case p < 60:
		in.kind, in.value, in.rv = linUpdate, value, max(c.lastRV[key], 1)
		method, url, body = http.MethodPut, base+"/"+key, cm(in.rv)
	case p < 75:
		in.kind, in.value = linUpdate, value
		method, url, body = http.MethodPut, base+"/"+key, cm(0)
	case p < 90:
		in.kind, in.value = linCreate, value
		method, url, body = http.MethodPost, base, cm(0)
	default:
		in.kind, method, url = linDelete, http.MethodDelete, base+"/"+key
	}

	timeout, cancelled := 10*time.Second, false
	if in.kind != linGet && in.kind != linList && c.rng.IntN(linCancelEvery) == 0 {
		timeout, cancelled = time.Duration(c.rng.Int64N(int64(2*time.Millisecond))), true
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	// time.Since reads the monotonic clock: a wall-clock step must not
	// reorder operations.
	call := time.Since(c.start).Nanoseconds()
	code, obj, err := linDo(rctx, srv.c, method, url, body)
	ret := time.Since(c.start).Nanoseconds()
	cancel()

	op := func(in linInput, out linOutput) {
		if out.rv != 0 {
			c.lastRV[in.key] = out.rv
		}
		c.ops = append(c.ops, porcupine.Operation{ClientId: c.id, Input: in, Output: out, Call: call, Return: ret, Metadata: srv.name})
	}
	definite := err == nil && (code == http.StatusOK || code == http.StatusCreated || code == http.StatusConflict || code == http.StatusNotFound)
	if !definite && !cancelled {
		c.failures = append(c.failures, fmt.Sprintf("%s %s via %s = %d, %v", method, url, srv.name, code, err))
	}
	switch {
	case !definite && (in.kind == linGet || in.kind == linList):
		// A read without an answer tells nothing.
	case !definite:
		op(in, linOutput{})
	case in.kind == linList:
		if code != http.StatusOK {
			return
		}
		found := map[string]linObject{}
		for _, it := range obj.Items {
			found[it.Metadata.Name] = it
		}
		for _, k := range keys {
			it, ok := found[k]
			if !ok {
				op(linInput{kind: linList, key: k}, linOutput{code: http.StatusNotFound})
				continue
			}
			op(linInput{kind: linList, key: k}, linOutput{code: http.StatusOK, value: it.Data["v"], rv: it.rv(), uid: it.Metadata.UID})
		}
	case in.kind == linDelete && code == http.StatusOK:
		op(in, linOutput{code: code, uid: obj.Details.UID})
	case code == http.StatusOK || code == http.StatusCreated:
		op(in, linOutput{code: code, value: obj.Data["v"], rv: obj.rv(), uid: obj.Metadata.UID})
	default:
		op(in, linOutput{code: code})
	}
}

// linObject is the part of an answer the model reads: a ConfigMap, a list
// of them, or the Status of a deletion.
type linObject struct {
	Metadata struct {
		Name            string `json:"name"`
		UID             string `json:"uid"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Data    map[string]string `json:"data"`
	Items   []linObject       `json:"items"`
	Details struct {
		UID string `json:"uid"`
	} `json:"details"`
}

func (o linObject) rv() int64 {
	n, _ := strconv.ParseInt(o.Metadata.ResourceVersion, 10, 64)
	return n
}

// linDo sends a request with a JSON body (nil: none) and decodes a 2xx
// answer. An error means there is no definite answer.
func linDo(ctx context.Context, c *http.Client, method, url string, body any) (int, linObject, error) {
	var obj linObject
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, obj, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return 0, obj, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, obj, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, obj, err
	}
	if resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, &obj); err != nil {
			return 0, obj, fmt.Errorf("%s %s: decode: %w", method, url, err)
		}
	}
	return resp.StatusCode, obj, nil
}
