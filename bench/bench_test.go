package bench_test

import (
	"context"
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
