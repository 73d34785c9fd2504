package bench_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkDeliveryFloor measures the least CPU a Go server and this
// harness's watchers spend to move one ~1.2 KiB watch event over loopback
// TLS, HTTP/1.1, one connection per watcher, as the fan-out scenario does:
// a bare handler per watch that wakes on a channel, writes its frames and
// flushes, and readers that scan lines like the fan-out watchers. Nothing
// else (no cache, no filters, no JSON). Each round every watcher gets
// `batch` events in one flush; ns/event-cpu is the process CPU (server and
// readers together) per delivered event. It is the floor under
// "server CPU per event" plus the load generator's share in the fan-out
// scenario:
//
//	go test ./bench -run '^$' -bench DeliveryFloor -benchtime 200x
func BenchmarkDeliveryFloor(b *testing.B) {
	for _, batch := range []int{1, 2, 4, 10} {
		b.Run(fmt.Sprintf("watchers=1000/batch=%d", batch), func(b *testing.B) {
			deliveryFloor(b, 1000, batch, false)
		})
	}
	for _, batch := range []int{1, 4, 10} {
		b.Run(fmt.Sprintf("watchers=1000/batch=%d/one-write", batch), func(b *testing.B) {
			deliveryFloor(b, 1000, batch, true)
		})
	}
}

func deliveryFloor(b *testing.B, watchers, batch int, oneWrite bool) {
	frame := append(bytes.Repeat([]byte("x"), 1200), '\n')
	wake := make([]chan int, watchers)
	for i := range wake {
		wake[i] = make(chan int, 1)
	}
	var next atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ch := wake[next.Add(1)-1]
		if oneWrite {
			hijacked(w, r, ch, frame)
			return
		}
		f := w.(http.Flusher)
		w.WriteHeader(http.StatusOK)
		f.Flush()
		for {
			select {
			case n := <-ch:
				for range n {
					w.Write(frame)
				}
				f.Flush()
			case <-r.Context().Done():
				return
			}
		}
	}))
	srv.StartTLS()
	defer srv.Close()
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // HTTP/1.1
	tr.MaxIdleConnsPerHost = 64
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	ctx, cancel := context.WithCancel(context.Background())
	var got atomic.Int64
	var readers sync.WaitGroup
	for range watchers {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		readers.Add(1)
		go func() {
			defer readers.Done()
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 8<<20)
			for sc.Scan() {
				got.Add(1)
			}
		}()
	}
	for next.Load() < int64(watchers) {
		time.Sleep(time.Millisecond)
	}
	defer func() { cancel(); readers.Wait() }()

	cpu0 := processCPU(b)
	b.ResetTimer()
	for round := 1; round <= b.N; round++ {
		for _, ch := range wake {
			ch <- batch
		}
		for got.Load() < int64(round*watchers*batch) {
			time.Sleep(100 * time.Microsecond)
		}
	}
	b.StopTimer()
	events := float64(b.N * watchers * batch)
	b.ReportMetric((processCPU(b)-cpu0).Seconds()*1e9/events, "ns/event-cpu")
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// hijacked serves the stream on the bare connection, each batch as one
// chunk in one write.
func hijacked(w http.ResponseWriter, r *http.Request, ch chan int, frame []byte) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"))
	var buf []byte
	for {
		select {
		case n := <-ch:
			buf = fmt.Appendf(buf[:0], "%x\r\n", n*len(frame))
			for range n {
				buf = append(buf, frame...)
			}
			buf = append(buf, "\r\n"...)
			if _, err := conn.Write(buf); err != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}
