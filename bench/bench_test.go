package bench_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/bench"
	"github.com/objwatch/objwatch/testenv"
)

// target returns the server to measure: $OBJWATCH_BENCH_KUBECONFIG if set
// (any Kubernetes-compatible server), else an in-process objwatch.
func target(b *testing.B) *bench.Target {
	b.Helper()
	path, name := os.Getenv("OBJWATCH_BENCH_KUBECONFIG"), "external"
	if path == "" {
		path, name = testenv.Start(b).Kubeconfig, "objwatch"
	}
	t, err := bench.LoadTarget(name, path)
	if err != nil {
		b.Fatal(err)
	}
	return t
}

func run(b *testing.B, o bench.Options, f func(context.Context, *bench.Target, *bench.Options) ([]bench.Result, error)) {
	t := target(b)
	ctx := context.Background()
	o.Namespace = "default"
	if o.ObjectSize == 0 {
		o.ObjectSize = 1024
	}
	if err := bench.Setup(ctx, t, &o); err != nil {
		b.Fatal(err)
	}
	defer bench.Cleanup(ctx, t)
	b.ResetTimer()
	rs, err := f(ctx, t, &o)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range rs {
		b.ReportMetric(r.Value, strings.ReplaceAll(r.Metric, " ", "_")+"_"+r.Unit)
	}
}

// BenchmarkWrites: go test -bench Writes ./bench/ (b.N scales the objects).
func BenchmarkWrites(b *testing.B) {
	run(b, bench.Options{Objects: max(b.N, 100), Clients: 64}, bench.Writes)
}

// BenchmarkFanout: 100 watchers of one object, 100 writes/s for 3 s.
func BenchmarkFanout(b *testing.B) {
	run(b, bench.Options{Watchers: 100, WriteRate: 100, Duration: 3 * time.Second}, bench.Fanout)
}

// BenchmarkList: lists over 1,000 objects.
func BenchmarkList(b *testing.B) {
	run(b, bench.Options{Objects: 1000, Clients: 16, ListRuns: max(b.N, 3)}, func(ctx context.Context, t *bench.Target, o *bench.Options) ([]bench.Result, error) {
		if _, err := bench.Writes(ctx, t, o); err != nil {
			return nil, err
		}
		return bench.Lists(ctx, t, o)
	})
}

// BenchmarkIdleWatches: 200 watches that get no events.
func BenchmarkIdleWatches(b *testing.B) {
	run(b, bench.Options{Watchers: 200}, bench.IdleWatches)
}

// BenchmarkInformer compares objwatch's informer with client-go's on
// 10,000 ConfigMaps (bench.Informer; a few minutes):
//
//	go test ./bench -run '^$' -bench Informer -benchtime 1x
//
// The server runs in a child process (this test binary running
// TestBenchServer) so that its allocations stay out of the heap figures;
// $OBJWATCH_BENCH_KUBECONFIG measures against another server (it must
// compact its history, or the relist is skipped after 10 minutes).
func BenchmarkInformer(b *testing.B) {
	kubeconfig := os.Getenv("OBJWATCH_BENCH_KUBECONFIG")
	if kubeconfig == "" {
		kubeconfig = testenv.StartProcess(b, "TestBenchServer")
	}
	t, err := bench.LoadTarget("objwatch", kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	o := bench.Options{Objects: 10000, Progress: func(s string) { fmt.Fprintln(os.Stderr, s) }}
	var rep *bench.InformerReport
	for b.Loop() {
		if rep, err = bench.Informer(ctx, t, &o); err != nil {
			b.Fatal(err)
		}
	}
	if err := rep.WriteTable(os.Stdout); err != nil { // b.Log would indent it
		b.Fatal(err)
	}
	for _, r := range rep.Results() {
		if r.Unit == "ratio" || strings.Contains(r.Metric, "peak / steady") {
			b.ReportMetric(r.Value, strings.NewReplacer(" / ", "/", " ", "_", "[", "", "]", "").Replace(strings.TrimPrefix(r.Metric, "informer ")))
		}
	}
}

// benchHistory is how long the informer benchmark's server keeps history
// (compaction interval and watch cache window), so that its relist comes
// soon.
const benchHistory = 10 * time.Second

// TestBenchServer is BenchmarkInformer's server process; it does nothing in
// a normal test run.
func TestBenchServer(t *testing.T) { testenv.ServeProcess(t, testenv.WithHistory(benchHistory)) }

// BenchmarkConfigMapLists: lists of 1,000 ConfigMaps, whole, in pages,
// and decoded by the client from JSON and protobuf.
func BenchmarkConfigMapLists(b *testing.B) {
	run(b, bench.Options{Objects: 1000, Clients: 16, ListRuns: max(b.N, 3)}, bench.ConfigMapLists)
}

// TestConfigMapLists: the scenario lists what it created in every form,
// the client's decode of JSON and of protobuf included.
func TestConfigMapLists(t *testing.T) {
	env := testenv.Start(t)
	tg, err := bench.LoadTarget("objwatch", env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := bench.ConfigMapLists(t.Context(), tg, &bench.Options{Namespace: "default", Objects: 50, Clients: 4, ObjectSize: 512, ListRuns: 2})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, r := range rs {
		got[r.Metric] = r.Value
	}
	for _, m := range []string{"configmap list 50 p50", "configmap list 50, JSON, client decode p50", "configmap list 50, protobuf, client decode p50"} {
		if v, ok := got[m]; !ok || v <= 0 {
			t.Errorf("%s = %v (present %v), want a time; results %v", m, v, ok, rs)
		}
	}
}
