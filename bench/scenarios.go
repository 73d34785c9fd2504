package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// Options are the settings every side runs with.
type Options struct {
	Namespace  string
	Objects    int           // objects to create (writes, list, memory)
	Clients    int           // concurrent writers
	ObjectSize int           // approximate bytes per object
	Watchers   int           // fan-out watchers
	WriteRate  int           // fan-out writes per second
	Duration   time.Duration // fan-out duration
	ListRuns   int           // repetitions of each list
	// WatchHTTP2 multiplexes the watches on HTTP/2 connections (Target.Client,
	// as one client-go process would) instead of one HTTP/1.1 connection
	// each (Target.Watch, as separate processes would).
	WatchHTTP2 bool
	Progress   func(string) // progress line; may be nil
	// CPU are processes besides the server whose CPU the writes scenario
	// charges to each write (objwatch bench ab: the run's etcd).
	CPU []CPUSource
}

// CPUSource is a process's CPU time so far, in seconds (user + system).
type CPUSource struct {
	Name    string
	Seconds func() (float64, error)
}

func (o *Options) progress(format string, args ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, args...))
	}
}

// Result is one measured number.
type Result struct {
	Target string  `json:"target"`
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
}

// The benchmark resource: a namespaced CRD that keeps unknown fields.
const (
	Group    = "bench.objwatch.io"
	Plural   = "benchobjects"
	crdName  = Plural + "." + Group
	crdJSON  = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"` + crdName + `"},"spec":{"group":"` + Group + `","scope":"Namespaced","names":{"plural":"` + Plural + `","singular":"benchobject","kind":"BenchObject","listKind":"BenchObjectList"},"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`
	basePath = "/apis/" + Group + "/v1"
)

func (o *Options) objectsPath() string { return basePath + "/namespaces/" + o.Namespace + "/" + Plural }

// Setup creates the CRD (if missing; after an earlier run's is deleted,
// if that deletion is still under way) and waits until it is served.
func Setup(ctx context.Context, t *Target, o *Options) error {
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		_, err := t.do(ctx, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/json", []byte(crdJSON))
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "409") {
			return fmt.Errorf("setup %s: %w", t.Name, err)
		}
		cur, err := t.do(ctx, "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+crdName, "", nil)
		if err == nil && !strings.Contains(string(cur), `"deletionTimestamp"`) {
			break // there, and staying
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("setup %s: the CRD of an earlier run is still being deleted", t.Name)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := t.do(ctx, "GET", o.objectsPath()+"?limit=1", "", nil); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("setup %s: resource not served: %w", t.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The namespace may not be needed (the reference has none); best effort.
	t.do(ctx, "POST", "/api/v1/namespaces", "application/json", []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"`+o.Namespace+`"}}`))
	return nil
}

// Cleanup deletes the CRD, and with it every benchmark object.
func Cleanup(ctx context.Context, t *Target) {
	t.do(ctx, "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+crdName, "", nil)
}

func (o *Options) object(name string) []byte {
	pad := strings.Repeat("x", max(o.ObjectSize-300, 0))
	return []byte(fmt.Sprintf(`{"apiVersion":"%s/v1","kind":"BenchObject","metadata":{"name":%q,"labels":{"app":"bench","shard":"s%d"}},"spec":{"replicas":1,"data":%q}}`,
		Group, name, rand.IntN(16), pad))
}

// latencies summarises durations.
type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := append(latencies(nil), l...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(int(p*float64(len(s))), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Writes creates o.Objects objects with o.Clients concurrent clients, then
// updates each once: throughput and latency of creates and updates, and
// the CPU each write cost the server (its process_cpu_seconds_total) and
// each of o.CPU. On a machine shared with other work CPU per write moves
// less than the rate, which is what the machine has left over.
func Writes(ctx context.Context, t *Target, o *Options) ([]Result, error) {
	var out []Result
	for _, phase := range []string{"create", "update"} {
		cpu0 := writeCPU(ctx, t, o)
		all, elapsed, err := parallel(ctx, o.Clients, o.Objects, func(i int) error {
			name := fmt.Sprintf("obj-%06d", i)
			if i%1000 == 0 {
				o.progress("%s: %s %d/%d", t.Name, phase, i, o.Objects)
			}
			if phase == "create" {
				_, err := t.do(ctx, "POST", o.objectsPath(), "application/json", o.object(name))
				return err
			}
			_, err := t.do(ctx, "PATCH", o.objectsPath()+"/"+name, "application/merge-patch+json", []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, 2+rand.IntN(1000))))
			return err
		})
		if err != nil {
			return out, fmt.Errorf("%s %s: %w", t.Name, phase, err)
		}
		cpu1 := writeCPU(ctx, t, o)
		out = append(out,
			Result{t.Name, phase + "s/s", float64(len(all)) / elapsed.Seconds(), "ops/s"},
			Result{t.Name, phase + " p50", ms(all.pct(0.5)), "ms"},
			Result{t.Name, phase + " p99", ms(all.pct(0.99)), "ms"},
		)
		out = append(out, cpuPerWrite(t.Name, phase, cpu0, cpu1, len(all))...)
	}
	return out, nil
}

// writeCPU samples the CPU seconds of the server ("server") and of each
// of o.CPU; a source that cannot be read is left out.
func writeCPU(ctx context.Context, t *Target, o *Options) map[string]float64 {
	m := map[string]float64{}
	if v, err := t.Metric(ctx, "process_cpu_seconds_total"); err == nil {
		m["server"] = v
	}
	for _, c := range o.CPU {
		if v, err := c.Seconds(); err == nil {
			m[c.Name] = v
		}
	}
	return m
}

// cpuPerWrite turns two samples of writeCPU into µs per write: one row per
// source read both times and, with more than one, their sum.
func cpuPerWrite(target, phase string, before, after map[string]float64, writes int) []Result {
	if writes == 0 {
		return nil
	}
	names := make([]string, 0, len(after))
	for name := range after {
		if _, ok := before[name]; ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var out []Result
	var sum float64
	for _, name := range names {
		us := (after[name] - before[name]) / float64(writes) * 1e6
		sum += us
		out = append(out, Result{target, phase + " CPU, " + name, us, "µs"})
	}
	if len(names) > 1 {
		out = append(out, Result{target, phase + " CPU, " + strings.Join(names, "+"), sum, "µs"})
	}
	return out
}

// Lists measures a full list and a label selector that matches nothing.
func Lists(ctx context.Context, t *Target, o *Options) ([]Result, error) {
	var full, none latencies
	for i := range o.ListRuns {
		o.progress("%s: list %d/%d", t.Name, i+1, o.ListRuns)
		t0 := time.Now()
		n, _, err := listPage(ctx, t, o.objectsPath())
		if err != nil {
			return nil, err
		}
		full = append(full, time.Since(t0))
		if n < o.Objects {
			return nil, fmt.Errorf("%s: list returned %d objects, want %d", t.Name, n, o.Objects)
		}
	}
	for range o.ListRuns * 10 {
		t0 := time.Now()
		if _, err := t.do(ctx, "GET", o.objectsPath()+"?labelSelector=app%3Dnothing", "", nil); err != nil {
			return nil, err
		}
		none = append(none, time.Since(t0))
	}
	return []Result{
		{t.Name, fmt.Sprintf("list %d p50", o.Objects), ms(full.pct(0.5)), "ms"},
		{t.Name, "list selector-none p50", ms(none.pct(0.5)), "ms"},
		{t.Name, "list selector-none p99", ms(none.pct(0.99)), "ms"},
	}, nil
}

// listPage gets a list (or a page of one) and decodes it as a client
// would: it returns the items' count and the continue token.
func listPage(ctx context.Context, t *Target, path string) (items int, cont string, err error) {
	b, err := t.do(ctx, "GET", path, "", nil)
	if err != nil {
		return 0, "", err
	}
	var list struct {
		Metadata struct{ Continue string } `json:"metadata"`
		Items    []map[string]any          `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return 0, "", err
	}
	return len(list.Items), list.Metadata.Continue, nil
}

// MemorySample is a server's memory after a forced garbage collection.
type MemorySample struct{ Heap, RSS float64 }

// SampleMemory forces a garbage collection on the server (through
// /debug/pprof/heap?gc=1, which objwatch and kube-apiserver both serve to
// authorised users) and reads its live heap and resident memory.
func SampleMemory(ctx context.Context, t *Target) (MemorySample, error) {
	if _, err := t.do(ctx, "GET", "/debug/pprof/heap?gc=1", "", nil); err != nil {
		return MemorySample{}, fmt.Errorf("%s: force gc: %w", t.Name, err)
	}
	heap, err := t.Metric(ctx, "go_memstats_heap_inuse_bytes")
	if err != nil {
		return MemorySample{}, err
	}
	rss, err := t.Metric(ctx, "process_resident_memory_bytes")
	return MemorySample{Heap: heap, RSS: rss}, err
}

// Memory reports the server's memory per stored object against a sample
// taken before the objects were created.
func Memory(ctx context.Context, t *Target, o *Options, before MemorySample) ([]Result, error) {
	// Both sides cache the objects in memory once they serve a list.
	if _, err := t.do(ctx, "GET", o.objectsPath()+"?limit=1", "", nil); err != nil {
		return nil, err
	}
	after, err := SampleMemory(ctx, t)
	if err != nil {
		return nil, err
	}
	n := float64(o.Objects)
	return []Result{
		{t.Name, "heap per object", (after.Heap - before.Heap) / n, "bytes"},
		{t.Name, "RSS per object", (after.RSS - before.RSS) / n, "bytes"},
	}, nil
}

// Fanout attaches o.Watchers watchers to one object and patches it at
// o.WriteRate for o.Duration: delivery latency from each write's
// acknowledgement to each watcher, and server CPU per delivered event.
func Fanout(ctx context.Context, t *Target, o *Options) ([]Result, error) {
	return FanoutAcross(ctx, t, []*Target{t}, o, false)
}

// FanoutAcross is Fanout with the watches spread over the servers ts (of
// one etcd; watch i on ts[i%len(ts)]) and the writes sent to t. With
// memory set it also reports the servers' heap and RSS per open watch
// (summed over ts), sampled once every watch is open, before the writes;
// server CPU per event is then t's alone.
func FanoutAcross(ctx context.Context, t *Target, ts []*Target, o *Options, memory bool) ([]Result, error) {
	return fanout(ctx, t, ts, o, memory, fanoutSpec{
		name: "fanout-target", body: o.object("fanout-target"),
		patch: func(startRV int64, n int) string { return fmt.Sprintf(`{"spec":{"fanoutWrite":"%d-%d"}}`, startRV, n) },
	})
}

// fanoutSpec is what a fan-out watches and writes: one object, its
// watches' extra query, and the n-th write's merge patch (a value no
// earlier state had, so that no patch is a no-op). prefix, if set, starts
// the names of the results.
type fanoutSpec struct {
	name   string
	body   []byte
	query  string
	patch  func(startRV int64, n int) string
	prefix string
}

func fanout(ctx context.Context, t *Target, ts []*Target, o *Options, memory bool, spec fanoutSpec) ([]Result, error) {
	name := spec.name
	if _, err := t.do(ctx, "POST", o.objectsPath(), "application/json", spec.body); err != nil && !strings.Contains(err.Error(), "409") {
		return nil, err
	}
	b, err := t.do(ctx, "GET", o.objectsPath()+"/"+name, "", nil)
	if err != nil {
		return nil, err
	}
	startRV := rvIn(b)

	// What each watcher saw, without pointers: millions of these must not
	// cost the load generator garbage-collection work.
	type recv struct {
		rv int64
		at time.Duration // since base, monotonic
	}
	base := time.Now()
	received := make([][]recv, o.Watchers)
	var eventBytes atomic.Int64 // every event line but bookmarks
	path := fmt.Sprintf("%s?watch=true&fieldSelector=metadata.name%%3D%s&resourceVersion=%d%s", o.objectsPath(), name, startRV, spec.query)
	var mem0 []MemorySample
	if memory {
		if mem0, err = sampleAll(ctx, ts); err != nil {
			return nil, err
		}
	}
	g, err := startWatchers(ctx, ts, o, path, "fan-out", func(i int, line []byte) {
		if bytes.Contains(line[:min(len(line), 32)], []byte(`"BOOKMARK"`)) {
			return
		}
		eventBytes.Add(int64(len(line)) + 1)
		received[i] = append(received[i], recv{rvIn(line), time.Since(base)})
	})
	if err != nil {
		return nil, err
	}
	defer g.stop()
	if n := g.failed.Load(); n > 0 {
		return nil, fmt.Errorf("%s: %d of %d watches failed", t.Name, n, o.Watchers)
	}
	if n := g.started.Load() - g.open.Load(); n > 0 {
		return nil, fmt.Errorf("%s: %d of %d watches ended as soon as they opened", t.Name, n, o.Watchers)
	}
	var perWatch []Result
	if memory {
		time.Sleep(2 * time.Second) // let the servers settle the new watches
		mem1, err := sampleAll(ctx, ts)
		if err != nil {
			return nil, err
		}
		var heap, rss float64
		for i := range ts {
			heap += mem1[i].Heap - mem0[i].Heap
			rss += mem1[i].RSS - mem0[i].RSS
		}
		perWatch = []Result{
			{t.Name, "heap per watch", heap / float64(o.Watchers), "bytes"},
			{t.Name, "RSS per watch", rss / float64(o.Watchers), "bytes"},
		}
	}
	cpu0, cpuErr := t.Metric(ctx, "process_cpu_seconds_total")

	// Open loop: writes start on schedule whatever the latency of earlier
	// ones, with up to 16 in flight (each patch changes the object, so
	// every write is one event per watcher).
	var (
		ackMu    sync.Mutex
		acks     = map[int64]time.Duration{} // since base
		writeLat latencies                   // under ackMu
		writeErr atomic.Value
		writers  sync.WaitGroup
		writes   atomic.Int64
		// refused counts writes answered 503 or 504 (storage unavailable,
		// or a write's outcome unknown): an overloaded machine starves
		// etcd at times, which need not end the run; the watches are
		// measured on the acknowledged writes.
		refused atomic.Int64
	)
	slots := make(chan struct{}, 16)
	interval := time.Second / time.Duration(max(o.WriteRate, 1))
	tick := time.NewTicker(interval)
	end := time.Now().Add(o.Duration)
	for n := 0; time.Now().Before(end) && writeErr.Load() == nil; n++ {
		<-tick.C
		select {
		case slots <- struct{}{}:
		default:
			continue // 16 writes in flight: the server is not keeping up
		}
		writers.Add(1)
		go func() {
			defer writers.Done()
			defer func() { <-slots }()
			// A value no earlier state had (the run's start revision and
			// the write's number), so that no patch is a no-op: a no-op
			// is acknowledged with the old revision and makes no event.
			patch := spec.patch(startRV, n)
			sent := time.Now()
			b, err := t.do(ctx, "PATCH", o.objectsPath()+"/"+name, "application/merge-patch+json", []byte(patch))
			if code := statusOf(err); code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout {
				if refused.Add(1) == 1 {
					o.progress("%s: fan-out write refused (counted, the run goes on): %v\n", t.Name, err)
				}
				return
			}
			if err != nil {
				writeErr.CompareAndSwap(nil, err)
				return
			}
			ackMu.Lock()
			acks[rvIn(b)] = time.Since(base)
			writeLat = append(writeLat, time.Since(sent))
			ackMu.Unlock()
			if w := writes.Add(1); w%100 == 0 {
				o.progress("%s: fan-out %d writes", t.Name, w)
			}
		}()
	}
	tick.Stop()
	writers.Wait()
	if err, ok := writeErr.Load().(error); ok {
		return nil, err
	}
	time.Sleep(2 * time.Second) // let deliveries drain
	cpu1, _ := t.Metric(ctx, "process_cpu_seconds_total")
	g.stop()

	var lat latencies
	delivered, missing := 0, 0
	missedBy := map[int64]int{} // acknowledged revision → watchers that missed it
	for _, rs := range received {
		seen := map[int64]bool{}
		for _, r := range rs {
			if at, ok := acks[r.rv]; ok {
				d := r.at - at
				if d < 0 {
					d = 0 // delivered before the writer read its response
				}
				lat = append(lat, d)
				seen[r.rv] = true
			}
		}
		delivered += len(seen)
		missing += len(acks) - len(seen)
		for rv := range acks {
			if !seen[rv] {
				missedBy[rv]++
			}
		}
	}
	if missing > 0 {
		o.progress("%s: fan-out: %d acknowledged writes (of %d, from revision %d) missed by some watchers: %v\n", t.Name, len(missedBy), len(acks), startRV, missedBy)
	}
	if spec.prefix != "" {
		return []Result{
			{t.Name, spec.prefix + " writes/s", float64(writes.Load()) / o.Duration.Seconds(), "ops/s"},
			{t.Name, spec.prefix + " events delivered", float64(delivered), "events"},
			{t.Name, spec.prefix + " bytes per event", float64(eventBytes.Load()) / float64(max(delivered, 1)), "bytes"},
			{t.Name, spec.prefix + " delivery p99", ms(lat.pct(0.99)), "ms"},
			{t.Name, spec.prefix + " server CPU per write", (cpu1 - cpu0) / float64(max(writes.Load(), 1)) * 1e6, "µs"},
			{t.Name, spec.prefix + " server CPU per event", (cpu1 - cpu0) / float64(max(delivered, 1)) * 1e6, "µs"},
		}, nil
	}
	out := []Result{
		{t.Name, "fan-out writes/s", float64(writes.Load()) / o.Duration.Seconds(), "ops/s"},
		{t.Name, "fan-out write p99", ms(writeLat.pct(0.99)), "ms"},
		{t.Name, "fan-out delivery p50", ms(lat.pct(0.5)), "ms"},
		{t.Name, "fan-out delivery p99", ms(lat.pct(0.99)), "ms"},
		{t.Name, "fan-out events missing", float64(missing), "events"},
	}
	if n := refused.Load(); n > 0 {
		out = append(out, Result{t.Name, "fan-out writes refused", float64(n), "writes"})
	}
	if cpuErr == nil && delivered > 0 {
		out = append(out, Result{t.Name, "server CPU per event", (cpu1 - cpu0) / float64(delivered) * 1e6, "µs"})
	}
	return append(out, perWatch...), nil
}

// sampleAll samples every server's memory.
func sampleAll(ctx context.Context, ts []*Target) ([]MemorySample, error) {
	out := make([]MemorySample, len(ts))
	for i, t := range ts {
		var err error
		if out[i], err = SampleMemory(ctx, t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// IdleWatches opens o.Watchers watches that see no events and reports the
// server's resident memory per open watch; every watch must stay open.
func IdleWatches(ctx context.Context, t *Target, o *Options) ([]Result, error) {
	mem0, err := SampleMemory(ctx, t)
	if err != nil {
		return nil, err
	}
	g, err := startWatchers(ctx, []*Target{t}, o, o.objectsPath()+"?watch=true&fieldSelector=metadata.name%3Didle-nobody", "idle", nil)
	if err != nil {
		return nil, err
	}
	defer g.stop()
	time.Sleep(3 * time.Second)
	mem1, err := SampleMemory(ctx, t)
	still := g.open.Load()
	g.stop()
	if err != nil {
		return nil, err
	}
	return []Result{
		{t.Name, "idle watches open", float64(still), "watches"},
		{t.Name, "idle watches failed", float64(int64(o.Watchers) - still), "watches"},
		{t.Name, "heap per idle watch", (mem1.Heap - mem0.Heap) / float64(o.Watchers), "bytes"},
		{t.Name, "RSS per idle watch", (mem1.RSS - mem0.RSS) / float64(o.Watchers), "bytes"},
	}, nil
}

// watchGroup is a set of watches, each read by its own goroutine.
type watchGroup struct {
	open, failed atomic.Int64
	started      atomic.Int64 // watches that got 200, whether still open or not
	cancel       context.CancelFunc
	wg           sync.WaitGroup
}

// openingWatches is how many watches startWatchers opens at once: enough
// to open tens of thousands in a minute, few enough not to overflow the
// server's listen backlog (net.core.somaxconn) with handshakes.
const openingWatches = 256

// startWatchers opens o.Watchers watches on path (one connection each, or
// multiplexed with o.WatchHTTP2),
// watch i on ts[i%len(ts)], and returns once every one is open or has
// failed. onLine, if set, gets every event line of watch i; it is called
// from that watch's goroutine only.
func startWatchers(ctx context.Context, ts []*Target, o *Options, path, label string, onLine func(i int, line []byte)) (*watchGroup, error) {
	wctx, cancel := context.WithCancel(ctx)
	g := &watchGroup{cancel: cancel}
	opening := make(chan struct{}, openingWatches)
	for i := range o.Watchers {
		t := ts[i%len(ts)]
		g.wg.Add(1)
		opening <- struct{}{}
		go func() {
			defer g.wg.Done()
			req, _ := http.NewRequestWithContext(wctx, "GET", t.Host+path, nil)
			c := t.Watch
			if o.WatchHTTP2 {
				c = t.Client
			}
			resp, err := c.Do(req)
			<-opening
			if err != nil || resp.StatusCode != 200 {
				if err == nil {
					resp.Body.Close()
				}
				g.failed.Add(1)
				return
			}
			defer resp.Body.Close()
			g.started.Add(1)
			g.open.Add(1)
			defer g.open.Add(-1)
			// A small first buffer (it grows to the longest line): tens of
			// thousands of watches must not cost the load generator 64 KiB
			// each.
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 4<<10), 8<<20)
			for sc.Scan() {
				if onLine != nil {
					onLine(i, sc.Bytes())
				}
			}
		}()
		if i%500 == 499 {
			o.progress("%s: %s watches %d/%d", t.Name, label, i+1, o.Watchers)
		}
	}
	for g.started.Load()+g.failed.Load() < int64(o.Watchers) {
		if ctx.Err() != nil {
			g.stop()
			return nil, ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return g, nil
}

// stop closes every watch and waits for the readers; it may be called twice.
func (g *watchGroup) stop() {
	g.cancel()
	g.wg.Wait()
}

// parallel runs op(0..n-1) on clients concurrent workers and returns each
// op's latency and the elapsed time; the first error stops the workers.
func parallel(ctx context.Context, clients, n int, op func(i int) error) (latencies, time.Duration, error) {
	lat := make([]latencies, clients)
	var next atomic.Int64
	var firstErr atomic.Pointer[error] // the first error; any type
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for firstErr.Load() == nil && ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := op(i); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := firstErr.Load(); err != nil {
		return nil, elapsed, *err
	}
	var all latencies
	for _, l := range lat {
		all = append(all, l...)
	}
	return all, elapsed, ctx.Err()
}

// ConfigMapLists measures lists of a built-in kind: it creates o.Objects
// ConfigMaps of about o.ObjectSize bytes in o.Namespace, then lists them
// whole (served from the watch cache) and in pages of 500. Built-in
// kinds' lists are written differently from custom resources' (their
// items go out without apiVersion and kind), so Lists does not cover
// them.
func ConfigMapLists(ctx context.Context, t *Target, o *Options) ([]Result, error) {
	path := "/api/v1/namespaces/" + o.Namespace + "/configmaps"
	pad := strings.Repeat("x", max(o.ObjectSize-200, 0))
	_, _, err := parallel(ctx, o.Clients, o.Objects, func(i int) error {
		if i%1000 == 0 {
			o.progress("%s: configmap %d/%d", t.Name, i, o.Objects)
		}
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%06d","labels":{"app":"bench"}},"data":{"a":%q,"b":"x"}}`, i, pad)
		_, err := t.do(ctx, "POST", path, "application/json", []byte(body))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s configmaps: %w", t.Name, err)
	}
	var full, paged latencies
	decoded := map[string]latencies{}
	for i := range o.ListRuns {
		o.progress("%s: configmap list %d/%d", t.Name, i+1, o.ListRuns)
		for _, accept := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
			d, err := decodedList(ctx, t, path, accept, o.Objects)
			if err != nil {
				return nil, err
			}
			decoded[accept] = append(decoded[accept], d)
		}
		t0 := time.Now()
		n, cont := 0, ""
		for {
			got, next, err := listPage(ctx, t, path+"?limit=500&continue="+url.QueryEscape(cont))
			if err != nil {
				return nil, err
			}
			n += got
			if cont = next; cont == "" {
				break
			}
		}
		paged = append(paged, time.Since(t0))
		t0 = time.Now()
		whole, _, err := listPage(ctx, t, path)
		if err != nil {
			return nil, err
		}
		full = append(full, time.Since(t0))
		if whole < o.Objects || n < o.Objects {
			return nil, fmt.Errorf("%s: configmap list returned %d objects (%d in pages), want %d", t.Name, whole, n, o.Objects)
		}
	}
	return []Result{
		{t.Name, fmt.Sprintf("configmap list %d p50", o.Objects), ms(full.pct(0.5)), "ms"},
		{t.Name, fmt.Sprintf("configmap list %d in pages of 500 p50", o.Objects), ms(paged.pct(0.5)), "ms"},
		{t.Name, fmt.Sprintf("configmap list %d, JSON, client decode p50", o.Objects), ms(decoded["application/json"].pct(0.5)), "ms"},
		{t.Name, fmt.Sprintf("configmap list %d, protobuf, client decode p50", o.Objects), ms(decoded["application/vnd.kubernetes.protobuf"].pct(0.5)), "ms"},
	}, nil
}

// configMapDecoder decodes ConfigMap lists as client-go's typed clients
// do, JSON or protobuf by the body's form.
var configMapDecoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(scheme).UniversalDeserializer()
}()

// decodedList times a whole list of path in the encoding accept names,
// the client's decode into a typed ConfigMapList included, and checks it
// has want items.
func decodedList(ctx context.Context, t *Target, path, accept string, want int) (time.Duration, error) {
	t0 := time.Now()
	b, err := t.doAccept(ctx, "GET", path, "", accept, nil)
	if err != nil {
		return 0, err
	}
	if strings.Contains(accept, "protobuf") && !bytes.HasPrefix(b, []byte("k8s\x00")) {
		return 0, fmt.Errorf("%s: configmap list: asked for %s, got %.20q", t.Name, accept, b)
	}
	var list corev1.ConfigMapList
	if _, _, err := configMapDecoder.Decode(b, nil, &list); err != nil {
		return 0, fmt.Errorf("%s: configmap list (%s): %w", t.Name, accept, err)
	}
	d := time.Since(t0)
	if len(list.Items) < want {
		return 0, fmt.Errorf("%s: configmap list (%s) returned %d objects, want %d", t.Name, accept, len(list.Items), want)
	}
	return d, nil
}
