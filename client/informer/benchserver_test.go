package informer_test

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
