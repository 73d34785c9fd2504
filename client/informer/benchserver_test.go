package informer_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
	"github.com/objwatch/objwatch/testenv"
)

// The informer benchmark compares objwatch's informer with client-go's
// SharedIndexInformer on the same server, all caching benchObjects
// ConfigMaps of about 1 KiB (labels and a data map), Transform off, ours
// both with its default decoded cache and with Options.Compact:
//
//   - heap in use after sync (live heap after a GC, above the baseline);
//   - time to synced;
//   - events per second delivered to a handler: under a steady update
//     stream (where both keep up and the server's write rate decides), and
//     draining a backlog (the informer's own throughput);
//   - peak heap during a relist forced by 410 Gone, relative to the steady
//     heap.
//
// The server runs in a child process (this test binary running
// TestBenchServer) so that its allocations do not pollute the heap
// measurements; set OBJWATCH_BENCH_KUBECONFIG to measure against another
// server (it must compact history, or the relist phase will time out).
//
//	go test ./client/informer -run '^$' -bench Informer -benchtime 1x
const (
	benchObjects   = 10000
	benchNamespace = "bench"
	benchWindow    = 10 * time.Second // server history kept (compaction, watch cache)
)

// TestBenchServer is the benchmark's server process; it does nothing in a
// normal test run.
func TestBenchServer(t *testing.T) {
	if os.Getenv("OBJWATCH_BENCH_SERVER") != "1" {
		t.Skip("the informer benchmark's server process")
	}
	e := testenv.Start(t, testenv.WithHistory(benchWindow))
	fmt.Printf("KUBECONFIG=%s\n", e.Kubeconfig)
	io.Copy(io.Discard, os.Stdin) // until the parent closes it
}

// benchServer starts the server process and returns its kubeconfig.
func benchServer(b *testing.B) string {
	if kc := os.Getenv("OBJWATCH_BENCH_KUBECONFIG"); kc != "" {
		return kc
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchServer$", "-test.v")
	cmd.Env = append(os.Environ(), "OBJWATCH_BENCH_SERVER=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if kc, ok := strings.CutPrefix(sc.Text(), "KUBECONFIG="); ok {
			go io.Copy(io.Discard, stdout)
			return kc
		}
	}
	b.Fatalf("server process ended: %v", sc.Err())
	return ""
}

// benchConfigMap is one ~1 KiB object.
func benchConfigMap(i int, rnd *rand.Rand) *corev1.ConfigMap {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	data := map[string]string{}
	for k := range 8 {
		v := make([]byte, 100)
		for j := range v {
			v[j] = letters[rnd.IntN(len(letters))]
		}
		data[fmt.Sprint("key-", k)] = string(v)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: benchNamespace, Name: fmt.Sprintf("cm-%05d", i),
			Labels: map[string]string{"app": "bench", "shard": fmt.Sprint(i % 16), "index": fmt.Sprint(i)}},
		Data: data,
	}
}

// parallel runs fn(i) for i in [0, n) on 32 goroutines.
func parallel(n int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// heapLive returns the live heap after a full GC.
func heapLive() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// heapSampler samples the heap (live objects plus not yet collected
// garbage, i.e. what the process holds) every millisecond and keeps the
// peak.
type heapSampler struct {
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

func sampleHeap() *heapSampler {
	s := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	go func() {
		defer close(s.done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > s.peak.Load() {
				s.peak.Store(v)
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *heapSampler) Stop() uint64 {
	close(s.stop)
	<-s.done
	return s.peak.Load()
}

// benchSide is one informer implementation under test.
type benchSide struct {
	name   string
	start  func(ctx context.Context) (synced func() bool, events func() int64, rvs func() map[informer.Key]string, stop func())
	result benchResult
}

type benchResult struct {
	heap     uint64        // after sync, above baseline
	synced   time.Duration // time to synced
	eventsPS float64       // events per second under the steady stream
	keptUp   float64       // fraction of the stream's writes delivered
	burstPS  float64       // events per second draining a backlog
	steady   uint64        // heap before the relist, above baseline
	peak     uint64        // peak heap during the relist, above baseline
	relist   time.Duration // from the cut to consistent again
}

func BenchmarkInformer(b *testing.B) {
	kubeconfig := benchServer(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cfg, err := client.FromKubeconfig(kubeconfig, "")
	if err != nil {
		b.Fatal(err)
	}
	wrest, err := client.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer wrest.CloseIdleConnections()
	writer := client.For[CM](wrest, configMaps)
	namespaces := client.For[*corev1.Namespace](wrest, client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("namespaces"), Kind: "Namespace"})
	if _, err := namespaces.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "exists") {
		b.Fatal(err)
	}
	start := time.Now()
	if err := parallel(benchObjects, func(i int) error {
		_, err := writer.Create(ctx, benchConfigMap(i, rand.New(rand.NewPCG(uint64(i), 0))), metav1.CreateOptions{})
		if err != nil && strings.Contains(err.Error(), "already exists") {
			return nil
		}
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d ConfigMaps in %v", benchObjects, time.Since(start).Round(time.Millisecond))

	cut := newCutter()
	objwatch := func(compact bool) func(ctx context.Context) (func() bool, func() int64, func() map[informer.Key]string, func()) {
		return func(ctx context.Context) (func() bool, func() int64, func() map[informer.Key]string, func()) {
			rcfg := *cfg
			rcfg.WrapTransport = cut.wrap
			rest, err := client.New(&rcfg)
			if err != nil {
				b.Fatal(err)
			}
			inf, err := informer.New(client.For[CM](rest, configMaps), informer.Options[CM]{Namespace: benchNamespace, Compact: compact})
			if err != nil {
				b.Fatal(err)
			}
			var events atomic.Int64
			reg, err := inf.AddHandler(informer.HandlerFuncs[CM]{
				Add:    func(CM, bool) { events.Add(1) },
				Update: func(_, _ CM) { events.Add(1) },
				Delete: func(CM, bool) { events.Add(1) },
			}, informer.HandlerOptions{})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); inf.Run(ctx) }()
			return func() bool { return inf.HasSynced() && reg.HasSynced() }, events.Load,
				func() map[informer.Key]string { return listerRVs(inf.Lister()) },
				func() { cancel(); <-done; rest.CloseIdleConnections() }
		}
	}
	sides := []*benchSide{
		{name: "objwatch", start: objwatch(false)},
		{name: "objwatch compact", start: objwatch(true)},
		{name: "client-go", start: func(ctx context.Context) (func() bool, func() int64, func() map[informer.Key]string, func()) {
			rcfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				b.Fatal(err)
			}
			rcfg.QPS, rcfg.Burst = 1000, 1000
			var inner []http.RoundTripper
			rcfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { inner = append(inner, rt); return cut.wrap(rt) }
			cs, err := kubernetes.NewForConfig(rcfg)
			if err != nil {
				b.Fatal(err)
			}
			factory := k8sinformers.NewSharedInformerFactoryWithOptions(cs, 0, k8sinformers.WithNamespace(benchNamespace))
			inf := factory.Core().V1().ConfigMaps().Informer()
			var events atomic.Int64
			reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc:    func(any) { events.Add(1) },
				UpdateFunc: func(_, _ any) { events.Add(1) },
				DeleteFunc: func(any) { events.Add(1) },
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(ctx)
			factory.StartWithContext(ctx)
			return func() bool { return inf.HasSynced() && reg.HasSynced() }, events.Load,
				func() map[informer.Key]string { return storeRVs(inf.GetStore()) },
				func() {
					cancel()
					factory.Shutdown()
					for _, rt := range inner {
						if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
							c.CloseIdleConnections()
						}
					}
				}
		}},
	}

	for b.Loop() {
		for k, s := range sides {
			s.result = benchOne(b, ctx, s, uint64(k), writer, cut)
		}
	}
	ours, compact, theirs := sides[0].result, sides[1].result, sides[2].result
	mib := func(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
	ratio := func(a, b float64) string { return fmt.Sprintf("%.2f", a/b) }
	var sb strings.Builder
	row := func(name, a, b, c, ra, rb, target string) {
		fmt.Fprintf(&sb, "%-34s %14s %16s %14s %7s %7s  %s\n", name, a, b, c, ra, rb, target)
	}
	fmt.Fprintf(&sb, "\n%d ConfigMaps of ~1 KiB; %s; ratios to client-go\n", benchObjects, runtime.Version())
	row("", "objwatch", "objwatch compact", "client-go", "ratio", "compact", "target")
	row("heap after sync", mib(ours.heap), mib(compact.heap), mib(theirs.heap),
		ratio(float64(ours.heap), float64(theirs.heap)), ratio(float64(compact.heap), float64(theirs.heap)), "<= 0.5 (compact)")
	row("time to synced", fmt.Sprint(ours.synced.Round(time.Millisecond)), fmt.Sprint(compact.synced.Round(time.Millisecond)), fmt.Sprint(theirs.synced.Round(time.Millisecond)),
		ratio(ours.synced.Seconds(), theirs.synced.Seconds()), ratio(compact.synced.Seconds(), theirs.synced.Seconds()), "<= 1")
	row("events/s, steady update stream", fmt.Sprintf("%.0f", ours.eventsPS), fmt.Sprintf("%.0f", compact.eventsPS), fmt.Sprintf("%.0f", theirs.eventsPS), "", "", "(the server's write rate)")
	row("  of the stream delivered", fmt.Sprintf("%.1f%%", 100*ours.keptUp), fmt.Sprintf("%.1f%%", 100*compact.keptUp), fmt.Sprintf("%.1f%%", 100*theirs.keptUp), "", "", "")
	row("events/s, draining a backlog", fmt.Sprintf("%.0f", ours.burstPS), fmt.Sprintf("%.0f", compact.burstPS), fmt.Sprintf("%.0f", theirs.burstPS),
		ratio(ours.burstPS, theirs.burstPS), ratio(compact.burstPS, theirs.burstPS), ">= 1")
	row("steady heap before relist", mib(ours.steady), mib(compact.steady), mib(theirs.steady), "", "", "")
	row("peak heap during 410 relist", mib(ours.peak), mib(compact.peak), mib(theirs.peak), "", "", "")
	row("  peak / steady", ratio(float64(ours.peak), float64(ours.steady))+"x", ratio(float64(compact.peak), float64(compact.steady))+"x",
		ratio(float64(theirs.peak), float64(theirs.steady))+"x", "", "", "<= 1.25x (objwatch)")
	row("relist: cut to changes delivered", fmt.Sprint(ours.relist.Round(time.Millisecond)), fmt.Sprint(compact.relist.Round(time.Millisecond)), fmt.Sprint(theirs.relist.Round(time.Millisecond)), "", "", "")
	fmt.Println(sb.String()) // b.Log truncates benchmark output
	b.ReportMetric(float64(ours.heap)/float64(theirs.heap), "heap-ratio")
	b.ReportMetric(ours.synced.Seconds()/theirs.synced.Seconds(), "synced-ratio")
	b.ReportMetric(ours.burstPS/theirs.burstPS, "events/s-ratio")
	b.ReportMetric(float64(ours.peak)/float64(ours.steady), "relist-peak/steady")
	b.ReportMetric(float64(compact.heap)/float64(theirs.heap), "heap-ratio-compact")
	b.ReportMetric(compact.synced.Seconds()/theirs.synced.Seconds(), "synced-ratio-compact")
	b.ReportMetric(compact.burstPS/theirs.burstPS, "events/s-ratio-compact")
	b.ReportMetric(float64(compact.peak)/float64(compact.steady), "relist-peak/steady-compact")
}

// benchOne measures one side. Sides run one after the other so that their
// heaps do not mix; side, the side's number, seeds the relist phase's
// writes so that each side's change every object it writes (the server
// ignores an update that changes nothing).
func benchOne(b *testing.B, ctx context.Context, s *benchSide, side uint64, writer *client.Client[CM], cut *cutter) benchResult {
	var r benchResult
	base := heapLive()
	t0 := time.Now()
	synced, events, rvs, stop := s.start(ctx)
	defer stop()
	if err := informer.WaitForSync(ctx, synced); err != nil {
		b.Fatalf("%s: sync: %v", s.name, err)
	}
	r.synced = time.Since(t0)
	r.heap = heapLive() - base

	// Steady stream: 32 writers updating random objects for 10 s.
	const streamFor = 10 * time.Second
	before := events()
	streamCtx, stopStream := context.WithTimeout(ctx, streamFor)
	var writes atomic.Int64
	t1 := time.Now()
	parallel(1<<30, func(i int) error {
		if streamCtx.Err() != nil {
			return streamCtx.Err()
		}
		cm := benchConfigMap(rand.IntN(benchObjects), rand.New(rand.NewPCG(uint64(i), 1)))
		if _, err := writer.Update(streamCtx, cm, metav1.UpdateOptions{}); err != nil {
			return err
		}
		writes.Add(1)
		return nil
	})
	stopStream()
	elapsed := time.Since(t1)
	// Count what was delivered by the end of the stream plus the tail still
	// in flight, over the time until it was all delivered.
	want := before + writes.Load()
	for events() < want && time.Since(t1) < elapsed+30*time.Second {
		time.Sleep(time.Millisecond)
	}
	r.eventsPS = float64(events()-before) / time.Since(t1).Seconds()
	r.keptUp = float64(events()-before) / float64(writes.Load())
	b.Logf("%s: steady stream: %d writes in %v, %d events delivered", s.name, writes.Load(), elapsed.Round(time.Millisecond), events()-before)

	// Burst: stop reading the watch (the connection stays up and the
	// server's sends back up) while writing, then measure how fast the
	// backlog is drained: the informer's own throughput (decode, cache,
	// handler), not the server's write rate.
	const burstMax = 6000 // below the server's per-watcher buffer
	cut.pause()
	before = events()
	writes.Store(0)
	burstCtx, stopBurst := context.WithTimeout(ctx, 5*time.Second)
	parallel(burstMax, func(i int) error {
		if burstCtx.Err() != nil {
			return burstCtx.Err()
		}
		if _, err := writer.Update(burstCtx, benchConfigMap(rand.IntN(benchObjects), rand.New(rand.NewPCG(uint64(i), 3))), metav1.UpdateOptions{}); err != nil {
			return err
		}
		writes.Add(1)
		return nil
	})
	stopBurst()
	time.Sleep(time.Second) // let the server queue it all
	t3 := time.Now()
	cut.resume()
	want = before + writes.Load()
	for events() < want && time.Since(t3) < time.Minute {
		time.Sleep(100 * time.Microsecond)
	}
	if events() < want {
		b.Fatalf("%s: burst: %d of %d events delivered", s.name, events()-before, writes.Load())
	}
	r.burstPS = float64(events()-before) / time.Since(t3).Seconds()
	b.Logf("%s: burst: %d events drained in %v", s.name, events()-before, time.Since(t3).Round(time.Millisecond))

	// Relist: cut the watch and hold it back until the server forgot the
	// history, changing relistChanges objects meanwhile; sample the heap
	// from then until the informer delivered those changes (which both
	// informers only do once the relist is complete).
	const relistChanges = 100
	t2 := time.Now()
	cut.cut(3 * benchWindow)
	before = events()
	if err := parallel(relistChanges, func(i int) error {
		_, err := writer.Update(ctx, benchConfigMap(i*97%benchObjects, rand.New(rand.NewPCG(uint64(i), 2+side<<8))), metav1.UpdateOptions{})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	r.steady = heapLive() - base
	sampler := sampleHeap()
	for events() < before+relistChanges && time.Since(t2) < 2*time.Minute {
		time.Sleep(time.Millisecond)
	}
	r.relist = time.Since(t2)
	if peak := sampler.Stop(); peak > base {
		r.peak = peak - base
	}
	waitEqual(b, ctx, writer, rvs)
	return r
}

// waitEqual waits until the cache equals a fresh list.
func waitEqual(b *testing.B, ctx context.Context, c *client.Client[CM], rvs func() map[informer.Key]string) {
	want, err := listRVs(ctx, c, benchNamespace)
	if err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got := rvs()
		same := len(got) == len(want)
		for k, v := range want {
			if got[k] != v {
				same = false
				break
			}
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("cache never caught up with the server")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
