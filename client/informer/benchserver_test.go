package informer_test

import (
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/objwatch/objwatch/internal/testobj"
	"github.com/objwatch/objwatch/testenv"
)

// Shared by the informer package's benchmarks (see changecost_bench_test.go):
// a server in a child process, so that its allocations and CPU do not mix
// with the informers', and ~1 KiB ConfigMaps. The informer-versus-client-go
// benchmark lives in the bench package (objwatch bench --scenarios
// informer; go test ./bench -run '^$' -bench Informer -benchtime 1x).
const (
	benchNamespace = "bench"
	benchWindow    = 10 * time.Second // server history kept (compaction, watch cache)
)

// TestBenchServer is the benchmarks' server process; it does nothing in a
// normal test run.
func TestBenchServer(t *testing.T) { testenv.ServeProcess(t, testenv.WithHistory(benchWindow)) }

// benchServer returns the kubeconfig of $OBJWATCH_BENCH_KUBECONFIG, or of
// TestBenchServer started in a child process.
func benchServer(b *testing.B) string {
	if kc := os.Getenv("OBJWATCH_BENCH_KUBECONFIG"); kc != "" {
		return kc
	}
	return testenv.StartProcess(b, "TestBenchServer")
}

// benchConfigMap is one ~1 KiB object.
func benchConfigMap(i int, rnd *rand.Rand) *corev1.ConfigMap {
	return testobj.ConfigMap(benchNamespace, i, rnd)
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
