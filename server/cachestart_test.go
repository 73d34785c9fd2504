package server_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestRequestsWhileWatchCachesLoad: after a (re)start, until a resource's
// watch cache has loaded, its gets and pages (a limit, no selector) are
// served from etcd, its watches answered as kube-apiserver answers them
// (429 "storage is (re)initializing" with Retry-After), and its other
// lists wait for the cache; once loaded, watches are served.
// The caches are slowed by WatchCacheStartDelay, standing in for a large
// store.
func TestRequestsWhileWatchCachesLoad(t *testing.T) {
	const delay = 8 * time.Second
	started := time.Now()
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) {
		c.WatchCacheStartDelay = delay
		c.StorageInitializationTimeout = time.Millisecond // ready at once: the requests are the test
	}))
	a := servertest.NewAPI(t, env)
	cache := server.WatchCache(env.Server, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	if cache == nil || cache.Ready() {
		t.Fatalf("configmaps cache %v ready %v after %v, want loading (the start took longer than the delay)", cache, cache != nil && cache.Ready(), time.Since(started))
	}

	servertest.MustCode(t, "create", a.JSON("POST", servertest.CMs, servertest.CM("loading", `,"labels":{"app":"x"}`)), http.StatusCreated)
	for _, path := range []string{
		servertest.CMs + "/loading?resourceVersion=0",
		servertest.CMs + "/loading",
	} {
		r := a.JSON("GET", path, "")
		servertest.MustCode(t, "GET "+path, r, http.StatusOK)
	}
	for _, path := range []string{
		servertest.CMs + "?resourceVersion=0&limit=500",
		servertest.CMs + "?limit=500",
		"/api/v1/configmaps?limit=500",
	} {
		r := a.JSON("GET", path, "")
		servertest.MustCode(t, "GET "+path, r, http.StatusOK)
		if !strings.Contains(string(r.Body), `"name":"loading"`) {
			t.Errorf("GET %s while the cache loads = %s, want the object (from etcd)", path, servertest.Truncate(r.Body))
		}
	}
	r := a.JSON("GET", servertest.CMs+"?watch=1&resourceVersion=0&timeoutSeconds=5", "")
	servertest.MustCode(t, "watch while the cache loads", r, http.StatusTooManyRequests)
	st := r.Status()
	if st.Reason != "TooManyRequests" || st.Message != "storage is (re)initializing" || st.Details == nil || st.Details.RetryAfterSeconds < 1 {
		t.Errorf("watch refusal = %+v, want kube-apiserver's (TooManyRequests, storage is (re)initializing, retryAfterSeconds >= 1)", st)
	}
	if got := r.Header.Get("Retry-After"); got == "" || got == "0" {
		t.Errorf("watch refusal Retry-After = %q, want seconds", got)
	}
	if cache.Ready() {
		t.Fatalf("configmaps cache loaded during the checks (%v after start): they may have been served by it", time.Since(started))
	}

	// A list without a limit, or with a selector, at any resourceVersion
	// (consistent, or not older than one), waits for the cache rather than
	// read the whole collection from etcd while it loads. They are sent
	// together: each waits longer than a consistent read waits for a
	// cache to catch up (FutureRVWait, 3 s).
	var wg sync.WaitGroup
	for _, path := range []string{
		servertest.CMs + "?resourceVersion=0",
		servertest.CMs + "?labelSelector=app%3Dx&limit=500",
		servertest.CMs,
		servertest.CMs + "?resourceVersion=1&resourceVersionMatch=NotOlderThan",
	} {
		wg.Go(func() {
			r := a.JSON("GET", path, "")
			if r.Code != http.StatusOK || !strings.Contains(string(r.Body), `"name":"loading"`) {
				t.Errorf("GET %s = %d %s, want the object", path, r.Code, servertest.Truncate(r.Body))
			}
			if !cache.Ready() {
				t.Errorf("GET %s answered %v after start, before the cache loaded: from etcd", path, time.Since(started))
			}
		})
	}
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 4*delay)
	defer cancel()
	if err := cache.WaitFor(ctx, 0); err != nil {
		t.Fatalf("configmaps cache not loaded %v after start: %v", time.Since(started), err)
	}
	lines := servertest.WatchLines(t, a, servertest.CMs+"?watch=1&resourceVersion=0&timeoutSeconds=5", 1)
	if len(lines) != 1 || !strings.Contains(lines[0], `"type":"ADDED"`) || !strings.Contains(lines[0], `"name":"loading"`) {
		t.Fatalf("watch once loaded = %q, want ADDED loading", lines)
	}
}

// TestReadyzChecks: /readyz lists its checks as kube-apiserver's, the
// watch caches' storage-readiness among them, and answers one by name.
func TestReadyzChecks(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	r := a.JSON("GET", "/readyz?verbose", "")
	servertest.MustCode(t, "readyz?verbose", r, http.StatusOK)
	for _, want := range []string{"[+]ping ok\n", "[+]etcd ok\n", "[+]poststarthook/storage-readiness ok\n", "readyz check passed\n"} {
		if !strings.Contains(string(r.Body), want) {
			t.Errorf("/readyz?verbose = %q, want a line %q", r.Body, want)
		}
	}
	if r := a.JSON("GET", "/readyz", ""); r.Code != http.StatusOK || string(r.Body) != "ok" {
		t.Errorf("/readyz = %d %q, want 200 ok", r.Code, r.Body)
	}
	servertest.MustCode(t, "readyz/poststarthook/storage-readiness", a.JSON("GET", "/readyz/poststarthook/storage-readiness", ""), http.StatusOK)
	servertest.MustCode(t, "readyz/nosuch", a.JSON("GET", "/readyz/nosuch", ""), http.StatusNotFound)
}
