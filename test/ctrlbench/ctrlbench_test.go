package ctrlbench_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/objwatch/objwatch/test/ctrlbench"
	"github.com/objwatch/objwatch/testenv"
)

// TestSmall runs every side on 200 objects in this process, to show the
// harness works (the heap figures mix here; the benchmark separates them).
func TestSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	env := testenv.Start(t)
	for _, s := range ctrlbench.Sides {
		t.Run(s, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r, err := ctrlbench.Run(ctx, s, ctrlbench.Options{Kubeconfig: env.Kubeconfig, Namespace: "small-" + s, Objects: 200})
			if err != nil {
				t.Fatalf("Run(%s) = %v", s, err)
			}
			if r.InitialReconciles < 200 || r.UpdateReconciles < 200 || r.P99 <= 0 {
				t.Errorf("Run(%s) = %+v, want at least 200 reconciles each pass and a latency", s, r)
			}
			t.Logf("%+v", r)
		})
	}
}

const (
	sideEnv   = "OBJWATCH_CTRLBENCH_SIDE" // side=kubeconfig=namespace=objects
	resultTag = "CTRLBENCH_RESULT "
)

// TestSide is one side's process in BenchmarkController; it does nothing
// in a normal test run.
func TestSide(t *testing.T) {
	spec := os.Getenv(sideEnv)
	if spec == "" {
		t.Skip("a child process of BenchmarkController")
	}
	f := strings.SplitN(spec, "=", 4)
	n, _ := strconv.Atoi(f[3])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	r, err := ctrlbench.Run(ctx, f[0], ctrlbench.Options{Kubeconfig: f[1], Namespace: f[2], Objects: n})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(r)
	fmt.Println(resultTag + string(out))
}

// TestBenchServer is BenchmarkController's server process.
func TestBenchServer(t *testing.T) { testenv.ServeProcess(t) }

// runSide runs one side in a child process of this test binary.
func runSide(b *testing.B, side, kubeconfig, ns string, n int) ctrlbench.Result {
	cmd := exec.Command(os.Args[0], "-test.run=^TestSide$", "-test.v")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s=%s=%s=%d", sideEnv, side, kubeconfig, ns, n))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if j, ok := strings.CutPrefix(sc.Text(), resultTag); ok {
			var r ctrlbench.Result
			if err := json.Unmarshal([]byte(j), &r); err != nil {
				b.Fatal(err)
			}
			return r
		}
	}
	b.Fatalf("side %s: %v\n%s", side, err, out)
	return ctrlbench.Result{}
}

// BenchmarkController compares the sides on $OBJWATCH_CTRLBENCH_OBJECTS
// (default 10,000) ConfigMaps, each side in its own process, the server in
// another, $OBJWATCH_CTRLBENCH_ROUNDS rounds (default 2) in alternating
// order:
//
//	go test ./test/ctrlbench -run '^$' -bench Controller -benchtime 1x
func BenchmarkController(b *testing.B) {
	n := envInt("OBJWATCH_CTRLBENCH_OBJECTS", 10000)
	rounds := envInt("OBJWATCH_CTRLBENCH_ROUNDS", 2)
	kubeconfig := testenv.StartProcess(b, "TestBenchServer")
	results := map[string][]ctrlbench.Result{}
	for b.Loop() {
		for round := range rounds {
			order := slices.Clone(ctrlbench.Sides)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, s := range order {
				r := runSide(b, s, kubeconfig, fmt.Sprintf("ctrlbench-%s-%d", s, round), n)
				fmt.Fprintf(os.Stderr, "round %d %s: %+v\n", round, s, r)
				results[s] = append(results[s], r)
			}
		}
	}
	base := median(results[ctrlbench.Sides[len(ctrlbench.Sides)-1]])
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "side\tobjects\tinitial s\tinitial rec/s\tobjects/s\tupdate s\tp50 ms\tp99 ms\tmax ms\theap MB\terrors\trec/s ratio\tp99 ratio\theap ratio\t\n")
	for _, s := range ctrlbench.Sides {
		m := median(results[s])
		fmt.Fprintf(w, "%s\t%d\t%.1f\t%.0f\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%.2f\t%.2f\t%.2f\t\n", s, m.Objects,
			m.InitialSeconds, m.InitialRate(), float64(m.Objects)/m.InitialSeconds, m.UpdateSeconds, ms(m.P50), ms(m.P99), ms(m.Max), float64(m.HeapBytes)/1e6, m.Errors,
			m.InitialRate()/base.InitialRate(), float64(m.P99)/float64(base.P99), float64(m.HeapBytes)/float64(base.HeapBytes))
		b.ReportMetric(m.InitialRate(), s+"_initial_reconciles/s")
		b.ReportMetric(ms(m.P99), s+"_p99_ms")
		b.ReportMetric(float64(m.HeapBytes)/1e6, s+"_heap_MB")
	}
	w.Flush()
}

// median takes each metric's median over the rounds.
func median(rs []ctrlbench.Result) ctrlbench.Result {
	if len(rs) == 0 {
		return ctrlbench.Result{}
	}
	pick := func(f func(ctrlbench.Result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 0 {
			return (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		return v[len(v)/2]
	}
	return ctrlbench.Result{
		Side: rs[0].Side, Objects: rs[0].Objects,
		InitialSeconds:    pick(func(r ctrlbench.Result) float64 { return r.InitialSeconds }),
		InitialReconciles: int64(pick(func(r ctrlbench.Result) float64 { return float64(r.InitialReconciles) })),
		HeapBytes:         int64(pick(func(r ctrlbench.Result) float64 { return float64(r.HeapBytes) })),
		UpdateSeconds:     pick(func(r ctrlbench.Result) float64 { return r.UpdateSeconds }),
		UpdateReconciles:  int64(pick(func(r ctrlbench.Result) float64 { return float64(r.UpdateReconciles) })),
		P50:               time.Duration(pick(func(r ctrlbench.Result) float64 { return float64(r.P50) })),
		P99:               time.Duration(pick(func(r ctrlbench.Result) float64 { return float64(r.P99) })),
		Max:               time.Duration(pick(func(r ctrlbench.Result) float64 { return float64(r.Max) })),
		Errors:            int64(pick(func(r ctrlbench.Result) float64 { return float64(r.Errors) })),
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
