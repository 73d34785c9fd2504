package watchstream

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// BenchmarkFanout is the CPU per delivered ~1.2 KiB event of many watches
// of one TLS server, each sent batch events per round and flushing once
// (as serveWatch does at the end of a flush window): over HTTP/1.1, a
// connection per watch, and over HTTP/2, the watches multiplexed on
// connections of at most streams each (the client opens more as the
// server's MaxConcurrentStreams requires, as Go's and client-go's
// transports do). The CPU (cpu-ns/event) is the whole process's: the
// handlers, net/http and the readers, which read without parsing. At 32
// events per flush it is close to what moving the bytes costs (TLS on
// both sides, loopback TCP): the floor under any batching.
func BenchmarkFanout(b *testing.B) {
	const watches = 1000
	for _, c := range []struct {
		proto   string
		streams uint32 // HTTP/2 streams per connection
		sched   string // HTTP/2 write scheduler: "" net/http's, "random" golang.org/x/net's random one
	}{{"HTTP/1.1", 0, ""}, {"HTTP/2", 100, ""}, {"HTTP/2", 250, ""}, {"HTTP/2", 250, "random"}} {
		for _, batch := range []int{1, 8, 32} {
			name := fmt.Sprintf("%s/streams=%d/batch=%d", c.proto, c.streams, batch)
			if c.sched != "" {
				name = fmt.Sprintf("%s/streams=%d/sched=%s/batch=%d", c.proto, c.streams, c.sched, batch)
			}
			b.Run(name, func(b *testing.B) { benchFanout(b, c.proto, c.streams, c.sched, watches, batch) })
		}
	}
}

func benchFanout(b *testing.B, proto string, streams uint32, sched string, watches, batch int) {
	event := make([]byte, 1200)
	for i := range event {
		event[i] = 'x'
	}
	event[len(event)-1] = '\n'

	var (
		mu    sync.Mutex
		wakes []chan struct{}
	)
	ctx, stop := context.WithCancel(context.Background())
	var handlers sync.WaitGroup
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlers.Add(1)
		defer handlers.Done()
		wctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		ww := NewWriter(w, r, w.(http.Flusher), time.Minute, cancel)
		defer ww.Stop()
		ww.Start()
		wake := make(chan struct{}, 1)
		mu.Lock()
		wakes = append(wakes, wake)
		mu.Unlock()
		for {
			select {
			case <-wake:
			case <-wctx.Done():
				return
			case <-ctx.Done():
				return
			}
			for range batch {
				if _, err := ww.Write(event); err != nil {
					return
				}
			}
			ww.Flush()
		}
	}))
	srv.EnableHTTP2 = proto == "HTTP/2"
	srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: int(streams)}
	if sched == "random" {
		srv.TLS = &tls.Config{}
		srv.Config.TLSConfig = srv.TLS
		err := http2.ConfigureServer(srv.Config, &http2.Server{NewWriteScheduler: func() http2.WriteScheduler { return http2.NewRandomWriteScheduler() }})
		if err != nil {
			b.Fatal(err)
		}
	}
	srv.StartTLS()
	tr := srv.Client().Transport.(*http.Transport)
	tr.MaxIdleConnsPerHost = watches
	if proto == "HTTP/1.1" {
		tr.ForceAttemptHTTP2 = false
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	client := &http.Client{Transport: tr}

	var round sync.WaitGroup
	var readers sync.WaitGroup
	opened := make(chan error, watches)
	for range watches {
		readers.Add(1)
		go func() {
			defer readers.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			resp, err := client.Do(req)
			if err == nil && resp.ProtoMajor != map[string]int{"HTTP/1.1": 1, "HTTP/2": 2}[proto] {
				resp.Body.Close()
				err = fmt.Errorf("protocol %s, want %s", resp.Proto, proto)
			}
			opened <- err
			if err != nil {
				return
			}
			defer resp.Body.Close()
			buf := make([]byte, batch*len(event))
			for {
				if _, err := io.ReadFull(resp.Body, buf); err != nil {
					return
				}
				round.Done()
			}
		}()
	}
	for range watches {
		if err := <-opened; err != nil {
			b.Fatal(err)
		}
	}
	for {
		mu.Lock()
		n := len(wakes)
		mu.Unlock()
		if n == watches {
			break
		}
		time.Sleep(time.Millisecond)
	}
	defer func() {
		stop()
		readers.Wait()
		handlers.Wait()
		srv.Close()
	}()

	cpu0 := cpuTime()
	for b.Loop() {
		round.Add(watches)
		for _, w := range wakes {
			w <- struct{}{}
		}
		round.Wait()
	}
	events := float64(b.N * watches * batch)
	b.ReportMetric(float64(cpuTime()-cpu0)/events, "cpu-ns/event")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
}

// cpuTime is the user and system CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
