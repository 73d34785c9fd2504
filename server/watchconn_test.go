package server_test

import (
	"fmt"
	"io"
	"net/http"

	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// A watch's events of any size arrive whole and in order, batched or not,
// and at the watch's timeout the body ends cleanly, on the cache and the
// etcd paths. Over HTTP/1.1 the watch writes its connection itself
// (rawStream): the response says the connection closes and the body ends
// with the last chunk. Over HTTP/2 the watch hands each batch to net/http
// in one write, the big objects in several (watchstream.Writer).
func TestWatchStream(t *testing.T) {
	for _, proto := range []string{"HTTP/1.1", "HTTP/2"} {
		for _, cached := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/cache=%v", proto, cached), func(t *testing.T) {
				testWatchStream(t, proto == "HTTP/2", cached)
			})
		}
	}
}

func testWatchStream(t *testing.T, http2, cached bool) {
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = !cached }))
	a := servertest.NewAPI(t, env)
	start := servertest.RVOf(t, a.JSON("GET", servertest.CMs, ""))
	resp, err := servertest.Client(t, env, http2).Get(env.Config.Host + servertest.CMs + "?watch=true&timeoutSeconds=10&resourceVersion=" + start)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode != http.StatusOK:
		t.Fatalf("watch: %s", resp.Status)
	case http2 && resp.ProtoMajor != 2:
		t.Fatalf("watch over %s, want HTTP/2", resp.Proto)
	case !http2 && (resp.ProtoMajor != 1 || !resp.Close):
		t.Fatalf("watch: %s, Connection: close %v; want HTTP/1.1, true", resp.Proto, resp.Close)
	}
	if te := resp.TransferEncoding; !http2 && (len(te) != 1 || te[0] != "chunked") {
		t.Fatalf("Transfer-Encoding %v, want chunked", te)
	}
	// (The timeout leaves room for 30 creates on a loaded machine
	// under the race detector: 3 s did not.)
	// Small objects in quick succession (batched into one chunk)
	// and big ones (several chunks each).
	var want []string
	for i := range 30 {
		data := "small"
		if i%10 == 9 {
			data = servertest.BigPayload
		}
		r := a.JSON("POST", servertest.CMs, fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c%d"},"data":{"k":%q}}`, i, data))
		if r.Code != http.StatusCreated {
			t.Fatalf("create: %d %s", r.Code, r.Body)
		}
		want = append(want, servertest.RVOf(t, r))
	}
	evs := servertest.NewEvents(resp.Body)
	for i, rv := range want {
		ev, err := evs.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.Type != "ADDED" || ev.RV != rv {
			t.Fatalf("event %d: %s %s, want ADDED %s", i, ev.Type, ev.RV, rv)
		}
		if i%10 == 9 && !strings.Contains(string(ev.Line), servertest.BigPayload) {
			t.Fatalf("event %d: the big object did not arrive whole (%d bytes)", i, len(ev.Line))
		}
	}
	// The server counted what it sent.
	const sent = `objwatch_apiserver_watch_events_total{group="",resource="configmaps",type="ADDED"} `
	deadline := time.Now().Add(5 * time.Second)
	for n := servertest.MetricValue(a, sent); n < len(want); n = servertest.MetricValue(a, sent) {
		if time.Now().After(deadline) {
			t.Fatalf("ADDED events counted: %d, want at least %d", n, len(want))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Nothing else happens: the watch times out and the body
	// ends with the last chunk, not a broken connection.
	if ev, err := evs.Next(); err != io.EOF {
		t.Fatalf("after the timeout: %s %v, want io.EOF", ev.Type, err)
	}
}

// A client that closes an HTTP/1.1 watch ends it on the server at once,
// though net/http no longer reads that connection, on both paths.
func TestHTTP1WatchEndsWhenClientCloses(t *testing.T) {
	for _, cached := range []bool{true, false} {
		t.Run(fmt.Sprintf("cache=%v", cached), func(t *testing.T) {
			env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = !cached }))
			a := servertest.NewAPI(t, env)
			base := servertest.OpenWatches(a)
			c := servertest.Client(t, env, false)
			var bodies []io.Closer
			for range 3 {
				resp, err := c.Get(env.Config.Host + servertest.CMs + "?watch=true")
				if err != nil {
					t.Fatal(err)
				}
				bodies = append(bodies, resp.Body)
			}
			if err := servertest.WaitOpenWatches(a, base+3); err != nil {
				t.Fatal(err)
			}
			for _, b := range bodies {
				b.Close() // before the end of the body: the connection closes
			}
			if err := servertest.WaitOpenWatches(a, base); err != nil {
				t.Fatal(err)
			}
		})
	}
}
