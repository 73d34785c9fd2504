package watchstream

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkWatchWriter is the cost per 1 KiB watch event of bounding
// writes, over TLS with HTTP/1.1 and HTTP/2: no deadline, the deadline
// moved at most once a second (what watches do), and moved before every
// write.
func BenchmarkWatchWriter(b *testing.B) {
	frame := make([]byte, 1<<10)
	frame[len(frame)-1] = '\n'
	for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
		for _, mode := range []struct {
			name          string
			timeout, step time.Duration
		}{
			{"none", 0, 0},
			{"per-second", time.Minute, time.Second},
			{"per-write", time.Minute, 0},
		} {
			b.Run(proto+"/"+mode.name, func(b *testing.B) {
				resp := serveOnce(b, proto, func(w http.ResponseWriter, r *http.Request) {
					ww := NewWriter(w, nil, w.(http.Flusher), mode.timeout, nil)
					ww.step = mode.step
					defer ww.Stop()
					ww.Start()
					for i := 0; b.Loop(); i++ {
						if _, err := ww.Write(frame); err != nil {
							b.Error(err)
							return
						}
						if i%16 == 15 {
							ww.Flush()
						}
					}
				})
				defer resp.Body.Close()
				b.SetBytes(int64(len(frame)))
				io.Copy(io.Discard, resp.Body)
			})
		}
	}
}

// BenchmarkSetWriteDeadline is the cost of one deadline move, which
// Writer makes at most once a second per watch.
func BenchmarkSetWriteDeadline(b *testing.B) {
	for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
		b.Run(proto, func(b *testing.B) {
			resp := serveOnce(b, proto, func(w http.ResponseWriter, r *http.Request) {
				rc := http.NewResponseController(w)
				for b.Loop() {
					if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			resp.Body.Close()
		})
	}
}

// serveOnce serves handler over TLS with proto ("HTTP/1.1" or "HTTP/2")
// until the benchmark ends and returns the response to one GET; the
// caller closes its body.
func serveOnce(b *testing.B, proto string, handler http.HandlerFunc) *http.Response {
	srv := httptest.NewUnstartedServer(handler)
	srv.EnableHTTP2 = proto == "HTTP/2"
	srv.StartTLS()
	b.Cleanup(srv.Close)
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	if want := map[string]int{"HTTP/1.1": 1, "HTTP/2": 2}[proto]; resp.ProtoMajor != want {
		resp.Body.Close()
		b.Fatalf("protocol %s, want %s", resp.Proto, proto)
	}
	return resp
}
