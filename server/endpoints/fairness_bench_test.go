package endpoints_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
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

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// BenchmarkUserFairness measures what one user flooding the server with
// creates does to another user's creates: calm's create latency (p99,
// retries after 429 included, as client-go waits Retry-After) alone, then
// while flood runs floodClients concurrent create loops (twice the
// mutating in-flight limit, over several HTTP/2 connections; each waits
// Retry-After after a 429, as client-go does), with the default per-user
// share of the in-flight limit and seats execution seats: 0 is the default
// (endpoints.DefaultExecutionSeatsPerCPU per CPU), 1000 is in effect no
// execution limit (every admitted request executes, as before fair
// queuing). One iteration per run (the metrics are the result; ns/op is
// the run's length):
//
//	go test -run '^$' -bench UserFairness -benchtime 1x ./server/
//
// flood=process runs the flood in a child process at the lowest CPU
// priority (nice 19), as if its clients ran on another machine: on a
// machine of two cores shared by both users' clients and the server, an
// in-process flood (flood=inprocess) measures the clients' own TLS and
// JSON work taking the CPU from the server as much as the server's
// fairness.
func BenchmarkUserFairness(b *testing.B) {
	for _, mode := range []string{"process", "inprocess"} {
		for _, seats := range []int{1, 2, 0, 8, 1000} {
			b.Run(fmt.Sprintf("flood=%s/seats=%d", mode, seats), func(b *testing.B) {
				for b.Loop() {
					userFairness(b, seats, mode == "process")
				}
			})
		}
	}
}

const (
	floodClients = 400 // twice the default mutating limit of 200
	floodConns   = 8
	calmCreates  = 1000
	// calmLoadedFor bounds the loaded phase: without a share, each of
	// calm's creates waits out 429s.
	calmLoadedFor = 30 * time.Second
)

func userFairness(b *testing.B, seats int, inChild bool) {
	env := testenv.Start(b, testenv.WithServerConfig(func(c *server.Config) { c.ExecutionSeats = seats }))
	admin := newBenchAPI(b, env, "")
	admin.create(b, "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"cm-writer"},
		"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["create"]}]}`)
	admin.create(b, "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"cm-writers"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"cm-writer"},
		"subjects":[{"kind":"User","name":"flood"},{"kind":"User","name":"calm"}]}`)
	calm := newBenchAPI(b, env, "calm")
	for deadline := time.Now().Add(5 * time.Second); ; { // the binding reaches the RBAC index through a watch
		if code, _ := calm.post(servertest.CM("probe", "")); code == http.StatusCreated {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("calm's binding not in effect")
		}
		time.Sleep(20 * time.Millisecond)
	}

	unloaded, _ := calm.latencies(b, "unloaded", calmCreates, time.Minute)
	b.Logf("unloaded: %d creates, p99 %v", len(unloaded), p99(unloaded))

	var flood *floodRun
	if inChild {
		flood = startFloodProcess(b, env)
	} else {
		var floods []*benchAPI
		for range floodConns {
			floods = append(floods, newBenchAPI(b, env, "flood"))
		}
		flood = startFlood(floods)
	}
	time.Sleep(2 * time.Second) // the flood fills its slots
	start, startOK := time.Now(), flood.created()
	loaded, calm429 := calm.latencies(b, "loaded", calmCreates, calmLoadedFor)
	b.Logf("loaded: %d creates, p99 %v, %d 429s", len(loaded), p99(loaded), calm429)
	elapsed, floodDone := time.Since(start), flood.created()-startOK
	flood429 := flood.stop(b)

	u, l := p99(unloaded), p99(loaded)
	b.ReportMetric(ms(u), "unloaded-p99-ms")
	b.ReportMetric(ms(p50(unloaded)), "unloaded-p50-ms")
	b.ReportMetric(ms(l), "loaded-p99-ms")
	b.ReportMetric(ms(p50(loaded)), "loaded-p50-ms")
	b.ReportMetric(float64(l)/float64(u), "p99-ratio")
	b.ReportMetric(float64(calm429), "calm-429s")
	b.ReportMetric(float64(floodDone)/elapsed.Seconds(), "flood-creates/s")
	b.ReportMetric(float64(flood429), "flood-429s")
}

// floodRun is a running flood of creates by the user flood, in this
// process or in a child process.
type floodRun struct {
	created func() int64           // creates that succeeded so far
	stop    func(testing.TB) int64 // ends the flood; returns its 429s
}

// startFlood runs floodClients create loops over the given connections,
// each waiting Retry-After after a 429 as client-go does.
func startFlood(conns []*benchAPI) *floodRun {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ok, tooMany atomic.Int64
	for i := range floodClients {
		wg.Go(func() {
			c := conns[i%len(conns)]
			for n := 0; ctx.Err() == nil; n++ {
				switch code, retry := c.post(servertest.CM(fmt.Sprintf("flood-%d-%d", i, n), "")); code {
				case http.StatusCreated:
					ok.Add(1)
				case http.StatusTooManyRequests:
					tooMany.Add(1)
					select {
					case <-ctx.Done():
					case <-time.After(retry):
					}
				}
			}
		})
	}
	return &floodRun{
		created: ok.Load,
		stop: func(testing.TB) int64 {
			cancel()
			wg.Wait()
			return tooMany.Load()
		},
	}
}

// floodChildEnv names the settings of the flood child process: the
// server's URL and the PEM files of the flood user's credentials.
const floodChildEnv = "OBJWATCH_FLOOD"

// TestFloodProcess is the body of the flood child process of
// BenchmarkUserFairness (startFloodProcess); in a normal test run it
// skips. It prints "created N" after each second and "429s N" when its
// standard input closes, then ends.
func TestFloodProcess(t *testing.T) {
	spec := os.Getenv(floodChildEnv)
	if spec == "" {
		t.Skip("the flood process of BenchmarkUserFairness")
	}
	var host, ca, cert, key string
	if _, err := fmt.Sscan(spec, &host, &ca, &cert, &key); err != nil {
		t.Fatalf("%s=%q: %v", floodChildEnv, spec, err)
	}
	var conns []*benchAPI
	for range floodConns {
		cfg, err := tlsFromFiles(ca, cert, key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.NextProtos = []string{"h2"}
		tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		conns = append(conns, &benchAPI{host: host, c: &http.Client{Transport: tr}})
	}
	flood := startFlood(conns)
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin) // until the parent closes it
		close(done)
	}()
	for tick := time.NewTicker(100 * time.Millisecond); ; {
		select {
		case <-tick.C:
			fmt.Printf("created %d\n", flood.created())
			continue
		case <-done:
		}
		tick.Stop()
		break
	}
	fmt.Printf("429s %d\n", flood.stop(t))
}

// startFloodProcess runs the flood in a child process of this test binary
// (TestFloodProcess) at nice 19.
func startFloodProcess(b *testing.B, env *testenv.Env) *floodRun {
	c := env.User(b, "flood")
	dir := b.TempDir()
	files := []string{filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")}
	for i, data := range [][]byte{c.CAData, c.CertData, c.KeyData} {
		if err := os.WriteFile(files[i], data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFloodProcess$")
	cmd.Env = append(os.Environ(), floodChildEnv+"="+strings.Join(append([]string{env.Config.Host}, files...), " "))
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
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, cmd.Process.Pid, 19); err != nil {
		b.Logf("flood process keeps its priority: %v", err)
	}
	var created, tooMany atomic.Int64
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var n int64
			if _, err := fmt.Sscanf(sc.Text(), "created %d", &n); err == nil {
				created.Store(n)
			} else if _, err := fmt.Sscanf(sc.Text(), "429s %d", &n); err == nil {
				tooMany.Store(n)
			}
		}
	}()
	stopped := false
	stop := func(tb testing.TB) int64 {
		if !stopped {
			stopped = true
			stdin.Close()
			<-read
			if err := cmd.Wait(); err != nil {
				tb.Errorf("flood process: %v", err)
			}
		}
		return tooMany.Load()
	}
	b.Cleanup(func() { stop(b) })
	return &floodRun{created: created.Load, stop: stop}
}

// tlsFromFiles is a client TLS configuration from PEM files.
func tlsFromFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, ServerName: "127.0.0.1"}, nil
}

// benchAPI is one HTTP/2 connection's client of one user ("" is admin).
type benchAPI struct {
	host string
	c    *http.Client
}

func newBenchAPI(b *testing.B, env *testenv.Env, user string) *benchAPI {
	if user == "" {
		return &benchAPI{host: env.Config.Host, c: env.HTTPClient()}
	}
	cfg := servertest.UserTLS(b, env, user)
	cfg.NextProtos = []string{"h2"}
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	b.Cleanup(tr.CloseIdleConnections)
	return &benchAPI{host: env.Config.Host, c: &http.Client{Transport: tr}}
}

// post creates a ConfigMap in default; it returns the status code and,
// for a 429, the Retry-After.
func (a *benchAPI) post(body string) (int, time.Duration) {
	resp, err := a.c.Post(a.host+servertest.CMs, "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return resp.StatusCode, time.Duration(secs) * time.Second
}

func (a *benchAPI) create(b *testing.B, path, body string) {
	resp, err := a.c.Post(a.host+path, "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b.Fatalf("POST %s = %d", path, resp.StatusCode)
	}
}

// latencies creates n ConfigMaps one after the other (fewer if d passes
// first), each retried after a 429 once its Retry-After has passed, and
// returns how long each took, retries included, and how many 429s there
// were.
func (a *benchAPI) latencies(b *testing.B, phase string, n int, d time.Duration) (out []time.Duration, tooMany int) {
	end := time.Now().Add(d)
	for i := 0; i < n && time.Now().Before(end); i++ {
		start := time.Now()
		for {
			code, retry := a.post(servertest.CM(fmt.Sprintf("calm-%s-%d", phase, i), ""))
			if code == http.StatusCreated {
				break
			}
			if code != http.StatusTooManyRequests {
				b.Fatalf("calm's create = %d", code)
			}
			tooMany++
			time.Sleep(retry)
		}
		out = append(out, time.Since(start))
	}
	return out, tooMany
}

func p99(d []time.Duration) time.Duration { return quantile(d, 0.99) }
func p50(d []time.Duration) time.Duration { return quantile(d, 0.5) }

func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
