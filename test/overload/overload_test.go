// Package overload_test floods one `objwatch serve` process (on its own
// etcd process) with writes while many watches are open, half of which
// stop reading, and checks what issue 31 asks of overload: the server's
// memory stays under the bound docs/OPERATIONS.md states, the watches that
// stop reading are ended (410 Expired once their queue is full), the ones
// that read miss nothing, and a calm user's writes still go through. The
// CI run is small (flags below); docs/OPERATIONS.md ("Overload") has the
// large ones.
package overload_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/objwatch/objwatch/bench"
	"github.com/objwatch/objwatch/internal/robustness"
	"github.com/objwatch/objwatch/server/servertest"
)

var (
	watchers = flag.Int("overload.watchers", 400, "watches open during the flood; half stop reading")
	writers  = flag.Int("overload.writers", 16, "concurrent writers flooding")
	keys     = flag.Int("overload.keys", 200, "ConfigMaps the writers create and update in turn")
	buffer   = flag.Int("overload.buffer", 200, "the server's --watch-buffer-events")
	size     = flag.Int("overload.object-size", 8192, "bytes of data in each flooding write")
	limit    = flag.Int("overload.queue-limit", 1000000, "the server's --watch-queue-limit")
	duration = flag.Duration("overload.duration", 15*time.Second, "length of the flood")
	eventCPU = flag.String("overload.watch-event-cpu", "", "the server's --watch-event-cpu (default: the server's)")
	writersN = flag.String("overload.watch-writers", "", "the server's --watch-writers (default: the server's)")
	calmRes  = flag.String("overload.calm-resource", "configmaps", "what the calm user creates: configmaps, or secrets (which no watch looks at, so that the server's own latency histogram of secrets creates is the calm user's alone)")
	calmNS   = flag.String("overload.calm-namespace", "calm", "the namespace the calm user creates its ConfigMaps in (the watches are of \"default\"; \"default\": each of its creates is delivered to every watch too)")
	loadNice = flag.Int("overload.load-nice", 0, "run this process (the watches and the flood: the load generator) at this niceness and etcd, the server and the calm user at 0 (needs root): to tell the server's share of the calm user's latency from the load generator's")
	calmN    = flag.Int("overload.calm-creates", 20, "the calm user's creates during the flood and with the watches open (twice as many before them); p99 is the sorted latencies' n×99/100th: the largest below 200")
	hogs     = flag.Int("overload.control-hogs", 0, "a control phase before the watches: the calm user's creates while this many processes spin on the CPUs (no watch, no flood), to tell what a busy machine alone costs its p99 from what the server's work does")
	serverAt = flag.String("overload.objwatch", "", "the objwatch binary to serve with (default: built from this checkout), for side-by-side runs of two builds")
	strict   = flag.Bool("overload.strict", false, "also require the calm user's create p99 within 2× its unloaded p99 (a timing: by hand on a quiet machine)")
)

const mib = 1 << 20

// rssBound is docs/OPERATIONS.md's bound on a server's resident memory
// under watch overload, for one watched resource: 1.5× its resident memory
// before the watches (the process with its objects cached; 1.5 for the
// collector's headroom), 64 KiB per watch at rest (its connection's
// buffers and TLS state, two goroutines' stacks: measured, 62 KiB at
// 10,000 idle watches, the collector's headroom included), then twice
// (the collector's headroom at GOGC=100) what the overload adds: each
// watch's pending chunk (64 KiB), the queued events — at most WatchBufferEvents per watch
// and, past --watch-queue-limit, each watch's share (at least 100), twice
// (a queue and the batch its writer took before it blocked), 96 bytes each
// — and the events the cache's history holds (here every write of the
// flood, well inside its 75 s window), about three times the object each
// (the object, the one before it, the encoded event).
func rssBound(base float64, watches, buffer, limit, events, objectSize int) float64 {
	queued := min(watches*buffer, max(limit, watches*100))
	const atRest, chunk = 64 * 1024, 64 * 1024
	added := float64(watches)*chunk + 2*float64(queued)*96 + float64(events)*3*float64(objectSize)
	return 1.5*base + float64(watches)*atRest + 2*added
}

func TestOverload(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs etcd and objwatch processes")
	}
	etcdBin, objwatchBin := binaries(t)
	if *loadNice > 0 {
		reniceSelf(t, *loadNice)
	}
	dir := t.TempDir()
	etcdURL := startEtcd(t, etcdBin, dir)
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte("flood-token,flood,u1,\"writers\"\ncalm-token,calm,u2,\"writers\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	args := []string{"serve", "--data-dir", filepath.Join(dir, "server"),
		"--listen", "127.0.0.1:" + strconv.Itoa(port), "--etcd-servers", etcdURL, "--token-auth-file", tokens,
		"--watch-buffer-events", strconv.Itoa(*buffer), "--watch-queue-limit", strconv.Itoa(*limit), "--history=false"}
	if *eventCPU != "" {
		args = append(args, "--watch-event-cpu", *eventCPU)
	}
	if *writersN != "" {
		args = append(args, "--watch-writers", *writersN)
	}
	srv := start(t, filepath.Join(dir, "server.log"), objwatchBin, args...)
	// OVERLOAD_KEEP_LOG=FILE keeps the server's log for a look after the run.
	if keep := os.Getenv("OVERLOAD_KEEP_LOG"); keep != "" {
		t.Cleanup(func() { b, _ := os.ReadFile(filepath.Join(dir, "server.log")); os.WriteFile(keep, b, 0o644) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	admin := waitServing(t, ctx, filepath.Join(dir, "server", "kubeconfig"))
	do(t, ctx, admin.Client, admin.Host, "", "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"writers"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},"subjects":[{"kind":"Group","apiGroup":"rbac.authorization.k8s.io","name":"writers"}]}`)
	// The flood's and the calm user's requests carry their tokens and no
	// client certificate: with the admin's, the certificate would
	// authenticate them (as kube-apiserver's x509 authenticator comes
	// before its token file) as system:masters, whom fair queuing exempts.
	users := tokenClient(t, filepath.Join(dir, "server", "kubeconfig"))
	const cms = "/api/v1/namespaces/default/configmaps"
	payload := strings.Repeat("x", *size)

	// The calm user's create latency before the watches. It runs in a
	// process of its own (this test binary again, TestCalmUser), as a
	// user on another machine would: in this one, its goroutine would
	// wait behind the watches' readers in this process's scheduler.
	calmPath := "/api/v1/namespaces/" + *calmNS + "/" + *calmRes
	if *calmNS != "default" {
		do(t, ctx, admin.Client, admin.Host, "", "POST", "/api/v1/namespaces", `{"metadata":{"name":"`+*calmNS+`"}}`)
	}
	kubeconfig := filepath.Join(dir, "server", "kubeconfig")
	calm := func(n int, prefix string) []time.Duration {
		return calmUser(t, ctx, kubeconfig, admin.Host+calmPath, n, prefix)
	}
	unloaded := calm(2**calmN, "calm-before")
	if *hogs > 0 {
		hogged := calmBesideHogs(t, ctx, *hogs, func() []time.Duration { return calm(*calmN, "calm-hogged") })
		t.Logf("calm user's creates beside %d spinning processes (no watch, no flood): %v; p99 %.2f× its unloaded", *hogs, spread(hogged), float64(p99(hogged))/float64(p99(unloaded)))
	}
	base := float64(rssOf(srv.Process.Pid))
	startRV := servertest.ResourceVersion(do(t, ctx, admin.Client, admin.Host, "", "GET", cms+"?limit=1", ""))

	// The watches, all from startRV: the first half read everything, the
	// others read their response headers and then nothing.
	fasts := make([]*fast, *watchers/2)
	var slows []*http.Response
	var wg sync.WaitGroup
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	slowClient := smallWindowClient(t, filepath.Join(dir, "server", "kubeconfig"))
	for i := range *watchers {
		// The slow ones outlive wctx: what they hold is read at the end.
		rctx, c := wctx, admin.Watch
		if i%2 == 1 {
			rctx, c = ctx, slowClient
		}
		req, _ := http.NewRequestWithContext(rctx, "GET", admin.Host+cms+"?watch=true&resourceVersion="+startRV, nil)
		resp, err := c.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("watch %d: %v %v", i, resp, err)
		}
		if i%2 == 1 {
			slows = append(slows, resp)
			continue
		}
		f := &fast{}
		fasts[i/2] = f
		wg.Go(func() {
			defer func() {
				f.mu.Lock()
				f.closed = true
				f.mu.Unlock()
			}()
			for {
				gone := f.read(resp.Body, wctx)
				resp.Body.Close()
				if !gone || wctx.Err() != nil {
					return
				}
				// Ended as too slow (the test's process reads 5,000
				// watches on the server's two CPUs): resume from the
				// last event, as a client does; nothing may be missing.
				from := startRV
				f.mu.Lock()
				if n := len(f.rvs); n > 0 {
					from = strconv.FormatInt(f.rvs[n-1], 10)
				}
				f.resumes++
				f.mu.Unlock()
				req, _ := http.NewRequestWithContext(wctx, "GET", admin.Host+cms+"?watch=true&resourceVersion="+from, nil)
				var err error
				if resp, err = admin.Watch.Do(req); err != nil || resp.StatusCode != http.StatusOK {
					f.mu.Lock()
					if wctx.Err() == nil {
						f.ended = fmt.Sprintf("resuming from %s: %v %v", from, resp, err)
					}
					f.mu.Unlock()
					return
				}
			}
		})
	}
	defer func() {
		for _, r := range slows {
			r.Body.Close()
		}
	}()

	// The calm user's create latency with the watches open, before the
	// flood: each of its creates is delivered to every watch too.
	watched := profiled(t, ctx, admin, "watched", func() []time.Duration { return calm(*calmN, "calm-watched") })

	// The flood, the calm user beside it, and the server's RSS sampled.
	var peak atomic.Int64
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		var heapAt int64
		for wctx.Err() == nil {
			rss := rssOf(srv.Process.Pid)
			if rss > peak.Load() {
				peak.Store(rss)
			}
			if dir := os.Getenv("OVERLOAD_PROFILE"); dir != "" {
				t.Logf("rss %s %d MiB", time.Now().Format("15:04:05.0"), rss/mib)
				if rss > 1400*mib && rss > heapAt+150*mib { // the heap near the peak
					heapAt = rss
					saveFrom(t, ctx, admin, "/debug/pprof/heap", filepath.Join(dir, fmt.Sprintf("rss-%d.heap", rss/mib)))
					saveFrom(t, ctx, admin, "/metrics", filepath.Join(dir, fmt.Sprintf("rss-%d.metrics", rss/mib)))
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	fctx, fcancel := context.WithTimeout(ctx, *duration)
	defer fcancel()
	var mu sync.Mutex
	written := map[int64]bool{}
	var refused, failed atomic.Int64
	var fw sync.WaitGroup
	for w := range *writers {
		fw.Go(func() {
			for i := w; fctx.Err() == nil; i += *writers {
				name := fmt.Sprintf("flood-%d", i%*keys)
				body := fmt.Sprintf(`{"metadata":{"name":%q},"data":{"v":"%d-%s"}}`, name, i, payload)
				method, path := "PUT", cms+"/"+name
				if i < *keys {
					method, path = "POST", cms
				}
				code, b := send(fctx, users, admin.Host, "flood-token", method, path, body)
				switch {
				case code == 200 || code == 201:
					// 0: the flood's end cut the body short (an answer
					// without its resourceVersion, as a lost response).
					if rv, _ := strconv.ParseInt(servertest.ResourceVersion(b), 10, 64); rv > 0 {
						mu.Lock()
						written[rv] = true
						mu.Unlock()
					}
				case code == 429:
					refused.Add(1)
				case fctx.Err() == nil:
					failed.Add(1)
				}
			}
		})
	}
	time.Sleep(*duration / 3)
	sched0 := schedLatencies(t, ctx, admin)
	const reqs = "objwatch_apiserver_request_duration_seconds"
	calmReq := []string{"resource", *calmRes, "verb", "create"}
	served0 := scrape(t, ctx, admin, reqs, calmReq...)
	etcd0 := scrape(t, ctx, admin, "objwatch_etcd_request_duration_seconds", "operation", "create")
	loaded := profiled(t, ctx, admin, "during", func() []time.Duration { return calm(*calmN, "calm-during") })
	sched := schedLatencies(t, ctx, admin).minus(sched0)
	served := scrape(t, ctx, admin, reqs, calmReq...).minus(served0)
	etcdCreates := scrape(t, ctx, admin, "objwatch_etcd_request_duration_seconds", "operation", "create").minus(etcd0)
	fw.Wait()
	var last int64
	for rv := range written {
		last = max(last, rv)
	}
	t.Logf("flood: %d writes acknowledged, %d refused with 429, %d failed otherwise; last rv %d", len(written), refused.Load(), failed.Load(), last)

	// Every fast watch must reach the last write (or have been ended).
	deadline := time.Now().Add(2 * time.Minute)
	for _, f := range fasts {
		for {
			f.mu.Lock()
			reached := len(f.rvs) > 0 && f.rvs[len(f.rvs)-1] >= last || f.ended != "" || f.closed
			f.mu.Unlock()
			if reached || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	wcancel()
	<-sampleDone
	wg.Wait()

	// Checks.
	want := slices.Sorted(func(yield func(int64) bool) {
		for rv := range written {
			if !yield(rv) {
				return
			}
		}
	})
	var fastEnded, resumed, resumes int
	for i, f := range fasts {
		if f.resumes > 0 {
			resumed++
			resumes += f.resumes
		}
		if f.ended != "" {
			fastEnded++
			t.Errorf("fast watch %d ended: %.300s", i, f.ended)
			continue
		}
		// Each acknowledged write must be among its events, in order.
		if !slices.IsSorted(f.rvs) {
			t.Errorf("fast watch %d: events out of order", i)
		}
		var missing []int64
		for _, rv := range want {
			if _, ok := slices.BinarySearch(f.rvs, rv); !ok {
				missing = append(missing, rv)
			}
		}
		if len(missing) > 0 {
			t.Errorf("fast watch %d: %d of %d acknowledged writes missing (first rv %d; its events %d, from %d to %d)", i, len(missing), len(want), missing[0], len(f.rvs), f.rvs[0], f.rvs[len(f.rvs)-1])
		}
	}
	var slowEnded, slowOpen, slowCaughtUp int
	slowCut := map[string]int{}
	for i, r := range slows {
		// What it did not read is still in the kernel's buffers: read it now.
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		stop := context.AfterFunc(rctx, func() { r.Body.Close() })
		es := servertest.NewEvents(r.Body)
		var lastEv servertest.WireEvent
		var err error
		var lastRV int64
		n := 0
		for {
			var ev servertest.WireEvent
			if ev, err = es.Next(); err != nil {
				break
			}
			lastEv = ev
			if rv, perr := strconv.ParseInt(ev.RV, 10, 64); perr == nil && ev.Type != "ERROR" {
				lastRV = max(lastRV, rv)
			}
			n++
		}
		if i == 0 {
			t.Logf("slow watch 0: %d events read at the end, last %s %s, then %v", n, lastEv.Type, lastEv.RV, err)
		}
		gaveUp := rctx.Err() != nil
		stop()
		rcancel()
		switch {
		case lastEv.Type == "ERROR" && lastEv.Status().Code == http.StatusGone && errors.Is(err, io.EOF):
			slowEnded++
		case errors.Is(err, io.EOF) && lastRV >= last:
			// Ended cleanly after every write (a clean end, as at a
			// watch's timeout, that clients resume from): nothing was
			// lost. Seen once in ten 10k runs, for the first stopped
			// watch read, about a minute after it stopped reading; why
			// the server ended it cleanly is not established (the write
			// timeout racing this read is the suspect).
			slowCaughtUp++
		case errors.Is(err, io.EOF):
			t.Errorf("slow watch %d: ended without a 410 ERROR event and before the last write: last %.200s", i, lastEv.Line)
		case gaveUp && lastRV >= last:
			// Never behind by more than its socket's buffers and its
			// queue hold (a few hundred events of the flood's size):
			// not slow by the server's rules, and it has every write.
			slowCaughtUp++
		case gaveUp:
			slowOpen++
		default:
			// The server broke the connection: its write had been
			// blocked for --watch-write-timeout (docs/OPERATIONS.md).
			slowCut[err.Error()]++
		}
	}
	if len(slowCut) > 0 {
		t.Logf("slow watches whose connection the server broke (a write blocked past its timeout): %v", slowCut)
	}
	bound := rssBound(base, *watchers, *buffer, *limit, len(written)+60, *size+300)
	t.Logf("fast watches ended as too slow and resumed: %d (%d times in all)", resumed, resumes)
	t.Logf("watches: %d fast (%d ended), %d slow (%d ended with 410, %d caught up when read at the end (open, or ended cleanly after the last write), %d still open and behind); server RSS %.0f MiB before the watches, peak %.0f MiB, bound %.0f MiB",
		len(fasts), fastEnded, len(slows), slowEnded, slowCaughtUp, slowOpen, base/mib, float64(peak.Load())/mib, bound/mib)
	if float64(peak.Load()) > bound {
		t.Errorf("server RSS peaked at %.0f MiB, above the bound of %.0f MiB (docs/OPERATIONS.md)", float64(peak.Load())/mib, bound/mib)
	}
	if slowOpen > 0 {
		t.Errorf("%d watches that stopped reading were not ended and had not every write", slowOpen)
	}
	t.Logf("server's goroutines waiting for a CPU while the calm user wrote during the flood: mean %v, %.1f%% over 10 ms, %.1f%% over 117 ms (go_sched_latencies_seconds)",
		sched.mean(), 100*sched.over(0.0105), 100*sched.over(0.1175))
	t.Logf("during the flood, the server's own time for %.0f %s creates (the calm user's alone with -overload.calm-resource=secrets): p99 ≤ %vs, mean %v; etcd's for %.0f creates of the storage layer: p99 ≤ %vs, mean %v",
		served.count, *calmRes, served.quantile(0.99), served.mean(), etcdCreates.count, etcdCreates.quantile(0.99), etcdCreates.mean())
	t.Logf("calm user's creates during the flood, in order: %v", loaded)
	t.Logf("calm user's creates unloaded: %v; with the watches: %v; during the flood: %v", spread(unloaded), spread(watched), spread(loaded))
	pu, pw, pl := p99(unloaded), p99(watched), p99(loaded)
	t.Logf("calm user's create p99: %v unloaded, %v with the watches, %v during the flood (%.2f×, %.2f× with the watches)", pu, pw, pl, float64(pl)/float64(pu), float64(pl)/float64(pw))
	if *strict && pl > 2*pu {
		t.Errorf("calm user's p99 %v is more than 2× its unloaded %v", pl, pu)
	}
}

// fast is a watch that reads everything, resuming from its last event
// when the server ends it as too slow.
type fast struct {
	mu      sync.Mutex
	rvs     []int64
	ended   string // the ERROR event or error that ended it for good
	resumes int    // times it was ended as too slow and resumed
	closed  bool
}

// read reads one watch response until it ends; gone is true when it
// ended with a 410 ERROR event (too slow, or expired), nothing else
// having gone wrong.
func (f *fast) read(body io.Reader, wctx context.Context) (gone bool) {
	es := servertest.NewEvents(body)
	for {
		ev, err := es.Next()
		f.mu.Lock()
		switch {
		case err != nil:
			if !gone && wctx.Err() == nil && f.ended == "" {
				f.ended = err.Error()
			}
		case ev.Type == "ERROR" && ev.Status().Code == http.StatusGone:
			gone = true
		case ev.Type == "ERROR":
			f.ended = string(bytes.TrimSpace(ev.Line))
		case ev.Type != "BOOKMARK":
			rv, _ := strconv.ParseInt(ev.RV, 10, 64)
			f.rvs = append(f.rvs, rv)
		}
		ended := f.ended != ""
		f.mu.Unlock()
		if err != nil {
			return gone && !ended
		}
	}
}

// calmUser creates n ConfigMaps at url, one every 50 ms, as the calm
// user, from a process of its own (TestCalmUser), and returns each
// create's latency.
func calmUser(t *testing.T, ctx context.Context, kubeconfig, url string, n int, prefix string) []time.Duration {
	t.Helper()
	cmd := command(ctx, os.Args[0], "-test.run=^TestCalmUser$")
	cmd.Env = append(os.Environ(), "OVERLOAD_CALM="+strings.Join([]string{kubeconfig, url, strconv.Itoa(n), prefix}, "\n"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("calm user: %v\n%s", err, out)
	}
	var lat []time.Duration
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "calm-latency "); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("calm user: %q: %v", line, err)
			}
			lat = append(lat, d)
		}
	}
	if len(lat) != n {
		t.Fatalf("calm user: %d latencies of %d\n%s", len(lat), n, out)
	}
	return lat
}

// TestCalmUser is the calm user's process (calmUser): it runs only when
// OVERLOAD_CALM holds its kubeconfig, URL, count and name prefix.
func TestCalmUser(t *testing.T) {
	args := strings.Split(os.Getenv("OVERLOAD_CALM"), "\n")
	if len(args) != 4 {
		t.Skip("the calm user's process of TestOverload")
	}
	n, err := strconv.Atoi(args[2])
	if err != nil {
		t.Fatal(err)
	}
	c := tokenClient(t, args[0])
	for i := range n {
		// "Y2FsbQ==" is valid data of a ConfigMap and of a Secret.
		body := fmt.Sprintf(`{"metadata":{"name":"%s-%d"},"data":{"v":"Y2FsbQ=="}}`, args[3], i)
		t0 := time.Now()
		if code, b := send(t.Context(), c, args[1], "calm-token", "POST", "", body); code != http.StatusCreated {
			t.Fatalf("create = %d %.300s", code, b)
		}
		fmt.Printf("calm-latency %v\n", time.Since(t0))
		time.Sleep(50 * time.Millisecond)
	}
}

// histogram is a scrape of a Prometheus histogram: its cumulative
// bucket counts by upper bound, its sum and count.
type histogram struct {
	buckets    map[float64]float64
	sum, count float64
}

// schedLatencies scrapes the server's go_sched_latencies_seconds.
func schedLatencies(t *testing.T, ctx context.Context, admin *bench.Target) histogram {
	return scrape(t, ctx, admin, "go_sched_latencies_seconds")
}

// scrape reads the server's histogram name, summed over the series
// whose labels include every one of labels (name, value, name, value...).
func scrape(t *testing.T, ctx context.Context, admin *bench.Target, name string, labels ...string) histogram {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(do(t, ctx, admin.Client, admin.Host, "", "GET", "/metrics", "")))
	if err != nil {
		t.Fatalf("the server's metrics: %v", err)
	}
	h := histogram{buckets: map[float64]float64{}}
	for _, m := range families[name].GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		hg := m.GetHistogram()
		h.sum += hg.GetSampleSum()
		h.count += float64(hg.GetSampleCount())
		for _, b := range hg.GetBucket() {
			h.buckets[b.GetUpperBound()] += float64(b.GetCumulativeCount())
		}
	}
	return h
}

// hasLabels reports whether m has every label of want (name, value, ...).
func hasLabels(m *dto.Metric, want []string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == want[i] && l.GetValue() == want[i+1] }) {
			return false
		}
	}
	return true
}

// quantile is the upper bound of the bucket holding the q quantile (0
// without observations).
func (h histogram) quantile(q float64) float64 {
	bounds := slices.Sorted(maps.Keys(h.buckets))
	for _, b := range bounds {
		if h.count > 0 && h.buckets[b] >= q*h.count {
			return b
		}
	}
	return 0
}

func (h histogram) minus(o histogram) histogram {
	d := histogram{buckets: map[float64]float64{}, sum: h.sum - o.sum, count: h.count - o.count}
	for le, v := range h.buckets {
		d.buckets[le] = v - o.buckets[le]
	}
	return d
}

func (h histogram) mean() time.Duration {
	return time.Duration(h.sum / max(1, h.count) * float64(time.Second))
}

// over is the fraction of observations above the bucket bound nearest
// below limit.
func (h histogram) over(limit float64) float64 {
	var le float64
	for b := range h.buckets {
		if b <= limit && b > le {
			le = b
		}
	}
	return 1 - h.buckets[le]/max(1, h.count)
}

// tokenClient trusts the server's CA and presents no client certificate.
func tokenClient(t *testing.T, kubeconfig string) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsFor(t, kubeconfig, false), MaxIdleConnsPerHost: 128, ForceAttemptHTTP2: false}}
}

// tlsFor is the TLS configuration of kubeconfig's cluster, with its
// client certificate or without.
func tlsFor(t *testing.T, kubeconfig string, withCert bool) *tls.Config {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if !withCert {
		cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.KeyData = nil, nil
		cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile = "", ""
	}
	tc, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// smallWindowClient opens one connection per request with a 16 KiB
// receive buffer, so that a response nobody reads stops the server's
// writes after a few events rather than after the tens of megabytes a
// loopback connection's buffers grow to.
func smallWindowClient(t *testing.T, kubeconfig string) *http.Client {
	tc := tlsFor(t, kubeconfig, true)
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10) })
		return errors.Join(err, serr)
	}}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, DialContext: d.DialContext, DisableKeepAlives: true, ForceAttemptHTTP2: false}}
}

func p99(d []time.Duration) time.Duration { return percentile(d, 99) }

// percentile is the latency at index len×q/100 of d sorted.
func percentile(d []time.Duration, q int) time.Duration {
	d = slices.Sorted(slices.Values(d))
	return d[min(len(d)-1, len(d)*q/100)]
}

// profiled runs measure; with OVERLOAD_PROFILE=DIR set, it also takes the
// server's CPU profile for 5 s meanwhile, into DIR/NAME.pprof, and an
// execution trace of its first 2 s, into DIR/NAME.trace (`go tool trace
// -pprof=sched` turns it into where goroutines waited for a CPU).
func profiled(t *testing.T, ctx context.Context, admin *bench.Target, name string, measure func() []time.Duration) []time.Duration {
	dir := os.Getenv("OVERLOAD_PROFILE")
	if dir == "" {
		return measure()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		saveFrom(t, ctx, admin, "/debug/pprof/profile?seconds=5", filepath.Join(dir, name+".pprof"))
		saveFrom(t, ctx, admin, "/debug/pprof/heap", filepath.Join(dir, name+".heap"))
	})
	wg.Go(func() { saveFrom(t, ctx, admin, "/debug/pprof/trace?seconds=2", filepath.Join(dir, name+".trace")) })
	return measure()
}

// saveFrom writes what the server answers at path into file; a failure
// is logged (these are diagnostics, not checks).
func saveFrom(t *testing.T, ctx context.Context, admin *bench.Target, path, file string) {
	code, b := send(ctx, admin.Client, admin.Host, "", "GET", path, "")
	if code != http.StatusOK {
		t.Logf("GET %s: %d %.200s", path, code, b)
		return
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Log(err)
	}
}

// spread is "p50 p90 p99 max" of latencies.
func spread(d []time.Duration) string {
	at := func(q int) time.Duration { return percentile(d, q).Round(10 * time.Microsecond) }
	return fmt.Sprintf("p50 %v p90 %v p99 %v max %v (%d)", at(50), at(90), at(99), slices.Max(d).Round(10*time.Microsecond), len(d))
}

// calmBesideHogs runs measure while n processes spin on the CPUs at
// niceness 0, and stops them after.
func calmBesideHogs(t *testing.T, ctx context.Context, n int, measure func() []time.Duration) []time.Duration {
	t.Helper()
	hctx, stop := context.WithCancel(ctx)
	var procs []*exec.Cmd
	defer func() {
		stop()
		for _, p := range procs {
			_ = p.Wait()
		}
	}()
	for range n {
		p := command(hctx, "sh", "-c", "while :; do :; done")
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	return measure()
}

// rssOf is a process's resident memory in bytes (0 if it cannot be read).
func rssOf(pid int) int64 {
	rss, _ := robustness.RSS(pid)
	return int64(rss)
}

func send(ctx context.Context, c *http.Client, host, token, method, path, body string) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, method, host+path, strings.NewReader(body))
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func do(t *testing.T, ctx context.Context, c *http.Client, host, token, method, path, body string) []byte {
	t.Helper()
	code, b := send(ctx, c, host, token, method, path, body)
	if code/100 != 2 {
		t.Fatalf("%s %s = %d %.300s", method, path, code, b)
	}
	return b
}

var (
	buildOnce            sync.Once
	etcdBin, objwatchBin string
	buildErr             error
)

// binaries builds etcd and objwatch once, into a cache directory of this
// checkout (go build leaves an up-to-date binary alone).
func binaries(t *testing.T) (string, string) {
	buildOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		etcdBin, objwatchBin, buildErr = robustness.BuildCached(ctx, "objwatch-overload")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	if *serverAt != "" {
		return etcdBin, *serverAt
	}
	return etcdBin, objwatchBin
}

// command is exec.CommandContext, the process started at niceness 0 when
// this one runs at -overload.load-nice (nice(1) execs it: the pid is its).
func command(ctx context.Context, bin string, args ...string) *exec.Cmd {
	if *loadNice > 0 {
		return exec.CommandContext(ctx, "nice", append([]string{"-n", strconv.Itoa(-*loadNice), bin}, args...)...)
	}
	return exec.CommandContext(ctx, bin, args...)
}

// reniceSelf sets every thread of this process to niceness n (Linux
// niceness is a thread's; threads made later inherit it from the thread
// that makes them).
func reniceSelf(t *testing.T, n int) {
	if os.Geteuid() != 0 {
		t.Skip("-overload.load-nice needs root (the children go back to niceness 0)")
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, n); err != nil {
			t.Fatalf("renice thread %d: %v", tid, err)
		}
	}
}

// start starts a process that the test stops (SIGTERM, then SIGKILL).
func start(t *testing.T, log, bin string, args ...string) *exec.Cmd {
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := command(context.Background(), bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); f.Close(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return cmd
}

func startEtcd(t *testing.T, bin, dir string) string {
	client := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	start(t, filepath.Join(dir, "etcd.log"), bin, "--name=o", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=o="+peer,
		"--unsafe-no-fsync", "--log-level=warn")
	return client
}

func waitServing(t *testing.T, ctx context.Context, kubeconfig string) *bench.Target {
	for {
		if tg, err := bench.LoadTarget("overload", kubeconfig); err == nil {
			if code, _ := send(ctx, tg.Client, tg.Host, "", "GET", "/readyz", ""); code == 200 {
				return tg
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("server not ready")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
