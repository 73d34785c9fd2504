package server_test

import (
	"context"

	"errors"
	"fmt"
	"io"

	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/storage/watchcache"
	"github.com/objwatch/objwatch/testenv"
)

var configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// openWatch starts a watch of the default namespace's ConfigMaps after rv.
// The server registers the watch before it answers, so the watch counts
// in the cache's Watchers once this returns.
func openWatch(t *testing.T, c *http.Client, host, rv string) *http.Response {
	t.Helper()
	resp, err := c.Get(host + servertest.CMs + "?watch=true&resourceVersion=" + rv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch = %d, want 200", resp.StatusCode)
	}
	return resp
}

// writer creates big ConfigMaps and, with a cache, waits until it has seen
// each, so that its watchers have been offered it.
type writer struct {
	t     *testing.T
	a     *servertest.API
	cache *watchcache.Cache
	rvs   []string
}

func (w *writer) write() {
	w.t.Helper()
	r := w.a.JSON("POST", servertest.CMs, fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"big-"},"data":{"k":%q}}`, servertest.BigPayload))
	rv := servertest.ResourceVersion(r.Body)
	if r.Code != http.StatusCreated || rv == "" {
		w.t.Fatalf("create = %d %.200s", r.Code, r.Body)
	}
	w.rvs = append(w.rvs, rv)
	if w.cache == nil {
		return
	}
	n, _ := strconv.ParseInt(rv, 10, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.cache.WaitFor(ctx, n); err != nil {
		w.t.Fatalf("watch cache never reached %s: %v", rv, err)
	}
}

// A watch whose client stops reading falls behind; once more than
// WatchBufferEvents are queued for it, it is ended and its queue dropped,
// while another watch of the same resource gets every event. When the
// client reads again it gets the events the server had already taken from
// the queue, in order, then an ERROR event with a 410 Expired Status.
func TestSlowWatchEndedWithExpired(t *testing.T) {
	const buffer = 50
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.WatchBufferEvents = buffer }))
	a := servertest.NewAPI(t, env)
	cache := server.WatchCache(env.Server, configMapsGVR)
	start := servertest.RVOf(t, a.JSON("GET", servertest.CMs, ""))
	base := cache.Watchers()

	slow := openWatch(t, servertest.Client(t, env, false), env.Config.Host, start)
	normal := openWatch(t, env.HTTPClient(), env.Config.Host, start)
	if n := cache.Watchers(); n != base+2 {
		t.Fatalf("cache watchers = %d, want %d", n, base+2)
	}
	normalEvents := make(chan servertest.WireEvent)
	go func() {
		defer close(normalEvents)
		es := servertest.NewEvents(normal.Body)
		for {
			ev, err := es.Next()
			if err != nil {
				return
			}
			normalEvents <- ev
		}
	}()
	defer func() {
		normal.Body.Close()
		for range normalEvents {
		}
	}()

	// Write until the slow watch is ended: the first event that finds its
	// queue full is the one that ends it.
	w := &writer{t: t, a: a, cache: cache}
	var got []servertest.WireEvent
	for cache.Watchers() == base+2 {
		if len(w.rvs) == 1000 {
			t.Fatalf("the slow watch was not ended after %d events", len(w.rvs))
		}
		w.write()
		// Keep up with the normal watch, as its client would.
		for len(got) < len(w.rvs) {
			got = append(got, <-normalEvents)
		}
	}
	ended := len(w.rvs)
	if n := cache.Watchers(); n != base+1 {
		t.Fatalf("cache watchers = %d after the slow watch ended, want %d", n, base+1)
	}
	for range 3 {
		w.write()
	}
	timeout := time.After(10 * time.Second)
	for len(got) < len(w.rvs) {
		select {
		case ev, ok := <-normalEvents:
			if !ok {
				t.Fatalf("normal watch ended after %d of %d events", len(got), len(w.rvs))
			}
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("normal watch got %d of %d events", len(got), len(w.rvs))
		}
	}
	for i, ev := range got {
		if ev.Type != "ADDED" || ev.RV != w.rvs[i] {
			t.Fatalf("normal watch event %d = %s@%s, want ADDED@%s", i, ev.Type, ev.RV, w.rvs[i])
		}
	}

	// The slow client reads again. Of the events up to the one that ended
	// it, it gets all but the buffer's worth that were queued (dropped) and
	// that one.
	want := ended - 1 - buffer
	es := servertest.NewEvents(slow.Body)
	for i := 0; ; i++ {
		ev, err := es.Next()
		if err != nil {
			t.Fatalf("slow watch after %d events: %v, want an ERROR event", i, err)
		}
		if ev.Type == "ERROR" {
			if s := ev.Status(); s.Code != http.StatusGone || s.Reason != metav1.StatusReasonExpired {
				t.Fatalf("slow watch ERROR = %d %s, want 410 Expired", s.Code, s.Reason)
			}
			if i != want {
				t.Fatalf("slow watch got %d events before the ERROR, want %d (%d written before it ended, buffer %d)", i, want, ended, buffer)
			}
			break
		}
		if i >= len(w.rvs) || ev.Type != "ADDED" || ev.RV != w.rvs[i] {
			t.Fatalf("slow watch event %d = %s@%s, want ADDED@%s", i, ev.Type, ev.RV, w.rvs[min(i, len(w.rvs)-1)])
		}
	}
	if ev, err := es.Next(); err != io.EOF {
		t.Fatalf("after the ERROR event: %s, %v; want the end of the response", ev.Type, err)
	}
}

// A watch whose client accepts no data is ended after WatchWriteTimeout,
// over HTTP/1.1 by closing its connection, over HTTP/2 by resetting its
// stream, whether served from the watch cache or from etcd; it gets no
// ERROR event (the server cannot send one).
func TestStuckWatchEndedByWriteTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, path := range []struct {
		name    string
		noCache bool
	}{{"cache", false}, {"etcd", true}} {
		t.Run(path.name, func(t *testing.T) {
			env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) {
				c.WatchWriteTimeout, c.DisableWatchCache = timeout, path.noCache
			}))
			a := servertest.NewAPI(t, env)
			var cache *watchcache.Cache
			if !path.noCache {
				cache = server.WatchCache(env.Server, configMapsGVR)
			}
			for _, proto := range []struct {
				name  string
				http2 bool
			}{{"HTTP/1.1", false}, {"HTTP/2", true}} {
				t.Run(proto.name, func(t *testing.T) {
					start := servertest.RVOf(t, a.JSON("GET", servertest.CMs, ""))
					resp := openWatch(t, servertest.Client(t, env, proto.http2), env.Config.Host, start)
					if got := resp.ProtoMajor == 2; got != proto.http2 {
						t.Fatalf("watch protocol = %s, want %s", resp.Proto, proto.name)
					}
					stuckWatchEnds(t, a, cache, resp, timeout)
				})
			}
		})
	}
}

func stuckWatchEnds(t *testing.T, a *servertest.API, cache *watchcache.Cache, resp *http.Response, timeout time.Duration) {
	if n := servertest.OpenWatches(a); n != 1 {
		t.Fatalf("open watches = %d, want 1", n)
	}
	// Write until the server gives up on the watch: once the socket (or
	// the HTTP/2 stream window) is full, its handler blocks in a write
	// until the deadline. A few MiB fill them. On HTTP/1.1 net/http then
	// closes the connection, and crypto/tls may spend up to 5 s trying to
	// send its close_notify alert first.
	w := &writer{t: t, a: a, cache: cache}
	for servertest.OpenWatches(a) > 0 && len(w.rvs) < 200 {
		w.write()
	}
	wrote := time.Now()
	for servertest.OpenWatches(a) > 0 {
		if time.Since(wrote) > timeout+5*time.Second+2*time.Second {
			t.Fatalf("watch still open %v after %d events", time.Since(wrote), len(w.rvs))
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The client reads what reached it, then an error: the response was
	// cut off, not ended.
	es := servertest.NewEvents(resp.Body)
	n := 0
	var err error
	for {
		var ev servertest.WireEvent
		if ev, err = es.Next(); err != nil {
			break
		}
		if n >= len(w.rvs) || ev.Type != "ADDED" || ev.RV != w.rvs[n] {
			t.Fatalf("event %d = %s@%s, want ADDED@%s", n, ev.Type, ev.RV, w.rvs[min(n, len(w.rvs)-1)])
		}
		n++
	}
	if err == io.EOF || n >= len(w.rvs) {
		t.Fatalf("read %d of %d events, then %v; want fewer and an error", n, len(w.rvs), err)
	}
	// The connection is closed: the client sees it end mid-response, or,
	// when the deadline cut a TLS record short and crypto/tls then sent
	// its close_notify after the partial record, a record that fails its
	// MAC. Either way the stream was cut off, not ended.
	if resp.ProtoMajor == 1 && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "bad record MAC") {
		t.Fatalf("read %d events, then %v; want an unexpected EOF (connection closed)", n, err)
	}
}

// The write deadline only ends watches that cannot be written to: idle
// watches outlive it many times over. (HTTP/2 resets a stream when its
// deadline passes even with nothing to write, so the server keeps moving
// it.)
func TestIdleWatchOutlivesWriteTimeout(t *testing.T) {
	const timeout = 400 * time.Millisecond
	type watch struct {
		name string
		a    *servertest.API
		resp *http.Response
	}
	var watches []watch
	for _, noCache := range []bool{false, true} {
		env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) {
			c.WatchWriteTimeout, c.DisableWatchCache = timeout, noCache
		}))
		a := servertest.NewAPI(t, env)
		start := servertest.RVOf(t, a.JSON("GET", servertest.CMs, ""))
		path := map[bool]string{false: "cache", true: "etcd"}[noCache]
		watches = append(watches,
			watch{path + " HTTP/1.1", a, openWatch(t, servertest.Client(t, env, false), env.Config.Host, start)},
			watch{path + " HTTP/2", a, openWatch(t, servertest.Client(t, env, true), env.Config.Host, start)})
	}
	time.Sleep(4 * timeout) // idle, the point of the test
	rvs := map[*servertest.API]string{}
	for _, w := range watches {
		if _, ok := rvs[w.a]; !ok {
			rvs[w.a] = servertest.RVOf(t, w.a.JSON("POST", servertest.CMs, servertest.CM("after-idle", "")))
		}
		if ev, err := servertest.NewEvents(w.resp.Body).Next(); err != nil || ev.Type != "ADDED" || ev.RV != rvs[w.a] {
			t.Errorf("%s watch after idling: %s@%s, %v; want ADDED@%s", w.name, ev.Type, ev.RV, err, rvs[w.a])
		}
	}
}
