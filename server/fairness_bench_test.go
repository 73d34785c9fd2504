package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server"
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
func BenchmarkUserFairness(b *testing.B) {
	for _, seats := range []int{1, 2, 0, 8, 16, 32, 1000} {
		b.Run(fmt.Sprintf("seats=%d", seats), func(b *testing.B) {
			for b.Loop() {
				userFairness(b, seats)
			}
		})
	}
}

const (
	floodClients = 400 // twice the default mutating limit of 200
	floodConns   = 8
	calmCreates  = 300
	// calmLoadedFor bounds the loaded phase: without a share, each of
	// calm's creates waits out 429s.
	calmLoadedFor = 30 * time.Second
)

func userFairness(b *testing.B, seats int) {
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
	var floods []*benchAPI
	for range floodConns {
		floods = append(floods, newBenchAPI(b, env, "flood"))
	}
	for deadline := time.Now().Add(5 * time.Second); ; { // the binding reaches the RBAC index through a watch
		if code, _ := calm.post(cm("probe", "")); code == http.StatusCreated {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("calm's binding not in effect")
		}
		time.Sleep(20 * time.Millisecond)
	}

	unloaded, _ := calm.latencies(b, "unloaded", calmCreates, time.Minute)
	b.Logf("unloaded: %d creates, p99 %v", len(unloaded), p99(unloaded))

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var floodOK, flood429 atomic.Int64
	for i := range floodClients {
		wg.Go(func() {
			c := floods[i%floodConns]
			for n := 0; ctx.Err() == nil; n++ {
				switch code, retry := c.post(cm(fmt.Sprintf("flood-%d-%d", i, n), "")); code {
				case http.StatusCreated:
					floodOK.Add(1)
				case http.StatusTooManyRequests:
					flood429.Add(1)
					select {
					case <-ctx.Done():
					case <-time.After(retry):
					}
				}
			}
		})
	}
	time.Sleep(2 * time.Second) // the flood fills its slots
	start, startOK := time.Now(), floodOK.Load()
	loaded, calm429 := calm.latencies(b, "loaded", calmCreates, calmLoadedFor)
	b.Logf("loaded: %d creates, p99 %v, %d 429s", len(loaded), p99(loaded), calm429)
	elapsed, floodDone := time.Since(start), floodOK.Load()-startOK
	stop()
	wg.Wait()

	u, l := p99(unloaded), p99(loaded)
	b.ReportMetric(ms(u), "unloaded-p99-ms")
	b.ReportMetric(ms(p50(unloaded)), "unloaded-p50-ms")
	b.ReportMetric(ms(l), "loaded-p99-ms")
	b.ReportMetric(ms(p50(loaded)), "loaded-p50-ms")
	b.ReportMetric(float64(l)/float64(u), "p99-ratio")
	b.ReportMetric(float64(calm429), "calm-429s")
	b.ReportMetric(float64(floodDone)/elapsed.Seconds(), "flood-creates/s")
	b.ReportMetric(float64(flood429.Load()), "flood-429s")
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
	cfg := userTLS(b, env, user)
	cfg.NextProtos = []string{"h2"}
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	b.Cleanup(tr.CloseIdleConnections)
	return &benchAPI{host: env.Config.Host, c: &http.Client{Transport: tr}}
}

// post creates a ConfigMap in default; it returns the status code and,
// for a 429, the Retry-After.
func (a *benchAPI) post(body string) (int, time.Duration) {
	resp, err := a.c.Post(a.host+cms, "application/json", bytes.NewReader([]byte(body)))
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
			code, retry := a.post(cm(fmt.Sprintf("calm-%s-%d", phase, i), ""))
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
