package informer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
	"github.com/objwatch/objwatch/internal/watchcut"
)

// BenchmarkChangeCost measures what change detection costs the informer:
// its events per second draining a backlog (as in BenchmarkInformer) with
//
//   - plain: a handler that touches nothing;
//   - dedup: that handler wrapped in change.DedupHandler;
//   - dedup+diff: DedupHandler around a handler that computes
//     change.Between(old, new).Changes() on every update.
//
// The three informers run side by side on the same server and objects,
// each behind its own cutter. A round pauses all three watches, writes
// costUpdates updates (every object a few times, each changing its
// content, so dedup drops none), then releases the informers one at a
// time and times each drain of the same backlog. The order rotates from
// round to round so that drift hits the variants alike. Rates are the
// median over rounds; ratios the median over rounds of the variant's rate
// over plain's in the same round. The target is dedup+diff >= 0.90.
//
// Handlers run on their own goroutine, beside the decoding: with spare
// cores their cost hides behind it. -cpu 1 shows the cost on a busy
// machine (the server process keeps its own GOMAXPROCS).
//
//	go test ./client/informer -run '^$' -bench ChangeCost -benchtime 1x
//	go test ./client/informer -run '^$' -bench ChangeCost -benchtime 1x -cpu 1
const (
	costObjects   = 2000
	costUpdates   = 5000 // below the server's per-watcher buffer
	costWarmup    = 3    // rounds not counted: the first drains are slower
	costRounds    = 12   // rounds counted
	costNamespace = "changecost"
)

// countedHandler counts the events h has returned from.
type countedHandler[T client.Object] struct {
	h informer.Handler[T]
	n *atomic.Int64
}

func (c countedHandler[T]) OnAdd(obj T, initial bool) { c.h.OnAdd(obj, initial); c.n.Add(1) }
func (c countedHandler[T]) OnUpdate(old, new T)       { c.h.OnUpdate(old, new); c.n.Add(1) }
func (c countedHandler[T]) OnDelete(obj T, unknown bool) {
	c.h.OnDelete(obj, unknown)
	c.n.Add(1)
}

var costSink atomic.Int64 // keeps the diffs from being optimized away

type costVariant struct {
	name    string
	handler func(b *testing.B) informer.Handler[CM]
	cut     *watchcut.Cutter
	events  atomic.Int64
	inf     *informer.SharedInformer[CM]
	rates   []float64
}

func BenchmarkChangeCost(b *testing.B) {
	kubeconfig := benchServer(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
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
	writer := client.NewClient[CM](wrest, configMaps)
	namespaces := client.NewClient[*corev1.Namespace](wrest, client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("namespaces"), Kind: "Namespace"})
	if _, err := namespaces.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: costNamespace}}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "exists") {
		b.Fatal(err)
	}
	costConfigMap := func(i int, seed, stream uint64) CM {
		cm := benchConfigMap(i, rand.New(rand.NewPCG(seed, stream)))
		cm.Namespace = costNamespace
		return cm
	}
	if err := parallel(costObjects, func(i int) error {
		_, err := writer.Create(ctx, costConfigMap(i, uint64(i), 0), metav1.CreateOptions{})
		if err != nil && strings.Contains(err.Error(), "already exists") {
			return nil
		}
		return err
	}); err != nil {
		b.Fatal(err)
	}

	noop := informer.HandlerFuncs[CM]{Add: func(CM, bool) {}, Update: func(_, _ CM) {}, Delete: func(CM, bool) {}}
	newDedup := func(b *testing.B) *change.Dedup[informer.Key] {
		d, err := change.NewDedup[informer.Key](change.DedupOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	variants := []*costVariant{
		{name: "plain", handler: func(*testing.B) informer.Handler[CM] { return noop }},
		{name: "dedup", handler: func(b *testing.B) informer.Handler[CM] { return change.DedupHandler[CM](noop, newDedup(b)) }},
		{name: "dedup+diff", handler: func(b *testing.B) informer.Handler[CM] {
			diff := informer.HandlerFuncs[CM]{Add: func(CM, bool) {}, Delete: func(CM, bool) {},
				Update: func(old, new CM) { costSink.Add(int64(len(change.Between(old, new).Changes()))) }}
			return change.DedupHandler[CM](diff, newDedup(b))
		}},
	}
	for _, v := range variants {
		v.cut = watchcut.New()
		rcfg := *cfg
		rcfg.WrapTransport = v.cut.Wrap
		rest, err := client.New(&rcfg)
		if err != nil {
			b.Fatal(err)
		}
		defer rest.CloseIdleConnections()
		v.inf, err = informer.New(client.NewClient[CM](rest, configMaps), informer.Options[CM]{Namespace: costNamespace})
		if err != nil {
			b.Fatal(err)
		}
		reg, err := v.inf.AddHandler(countedHandler[CM]{h: v.handler(b), n: &v.events}, informer.HandlerOptions{Name: v.name})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); v.inf.Run(ctx) }()
		defer func() { cancel(); <-done }()
		if err := informer.WaitForSync(ctx, func() bool { return v.inf.HasSynced() && reg.HasSynced() }); err != nil {
			b.Fatalf("%s: sync: %v", v.name, err)
		}
	}

	// round writes one backlog while every informer's watch is paused,
	// then releases them one at a time, timing each drain.
	var written atomic.Int64 // updates written so far
	round := func(r int, count bool) {
		for _, v := range variants {
			v.cut.Pause()
		}
		if err := parallel(costUpdates, func(i int) error {
			_, err := writer.Update(ctx, costConfigMap(i%costObjects, uint64(r)<<20|uint64(i), 7), metav1.UpdateOptions{})
			return err
		}); err != nil {
			b.Fatal(err)
		}
		want := int64(costObjects) + written.Add(costUpdates)
		time.Sleep(500 * time.Millisecond) // let the server queue it all
		var line []string
		for i := range variants {
			// Rotate the order so that no variant always goes first.
			v := variants[(i+r)%len(variants)]
			runtime.GC()
			before := v.events.Load()
			t0 := time.Now()
			v.cut.Resume()
			for v.events.Load() < want && time.Since(t0) < time.Minute {
				time.Sleep(100 * time.Microsecond)
			}
			elapsed := time.Since(t0)
			if got := v.events.Load(); got < want {
				b.Fatalf("%s: %d of %d events delivered", v.name, got-before, want-before)
			}
			rate := float64(want-before) / elapsed.Seconds()
			if count {
				v.rates = append(v.rates, rate)
			}
			line = append(line, fmt.Sprintf("%s %.0f", v.name, rate))
		}
		if !count {
			line = append(line, "(warm-up)")
		}
		b.Logf("round %d: %s", r, strings.Join(line, ", "))
	}

	for b.Loop() {
		for r := range costWarmup + costRounds {
			round(r, r >= costWarmup)
		}
	}

	median := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	// ratio is the median over rounds of a variant's rate over plain's in
	// the same round, which drift between rounds does not move.
	ratio := func(v *costVariant) float64 {
		rs := make([]float64, len(v.rates))
		for i := range rs {
			rs[i] = v.rates[i] / variants[0].rates[i]
		}
		return median(rs)
	}
	plain := median(variants[0].rates)
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nchange cost: %d ConfigMaps of ~1 KiB, backlogs of %d updates, %d rounds; %s, GOMAXPROCS %d\n",
		costObjects, costUpdates, costRounds, runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(&sb, "%-12s %12s %12s %12s %8s %s\n", "", "median ev/s", "min", "max", "ratio", "target")
	for i, v := range variants {
		m := median(v.rates)
		target := ""
		if i > 0 {
			target = ">= 0.90"
		}
		fmt.Fprintf(&sb, "%-12s %12.0f %12.0f %12.0f %8.3f %s\n", v.name, m, slices.Min(v.rates), slices.Max(v.rates), ratio(v), target)
	}
	fmt.Println(sb.String()) // b.Log truncates benchmark output
	b.ReportMetric(plain, "plain-events/s")
	b.ReportMetric(median(variants[1].rates), "dedup-events/s")
	b.ReportMetric(median(variants[2].rates), "diff-events/s")
	b.ReportMetric(ratio(variants[1]), "dedup/plain")
	b.ReportMetric(ratio(variants[2]), "diff/plain")
}
