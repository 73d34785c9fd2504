package ui_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/internal/ui"
	"github.com/objwatch/objwatch/testenv"
)

// uiEnv is an objwatch ui served over a real in-process objwatch.
type uiEnv struct {
	env  *testenv.Env
	rc   *client.REST // admin, straight to the server
	s    *ui.Server
	addr string // host:port of the page
	// web is a client holding the page's cookie (after login).
	web *http.Client
	cms *client.Client[*unstructured.Unstructured]
	// proxy is between the page and the server (uiSetup.proxy), else nil.
	proxy *cutProxy
}

// startUI serves objwatch ui over an objwatch that keeps a history
// store, reading it as admin.
func startUI(t testing.TB, opts ...func(*ui.Config)) *uiEnv {
	t.Helper()
	return startUIWith(t, uiSetup{env: []testenv.Option{testenv.WithHistoryStore()}, cfg: opts})
}

// uiSetup says how startUIWith builds the server and the page.
type uiSetup struct {
	env []testenv.Option
	// user, when set, is who the page reads the server as (a client
	// certificate, with only the rights RBAC gives it); else admin.
	user string
	// proxy puts a cuttable TCP proxy between the page and the server.
	proxy bool
	// kubeHistory puts a reverse proxy between the page and the server
	// that answers every .../history request as kube-apiserver answers a
	// subresource it does not have (404 NotFound) and forwards the rest,
	// as admin: objwatch as a server without objwatch's history.
	kubeHistory bool
	cfg         []func(*ui.Config)
}

func startUIWith(t testing.TB, setup uiSetup) *uiEnv {
	t.Helper()
	env := testenv.Start(t, setup.env...)
	admin, err := client.New(env.Config.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.CloseIdleConnections)
	pageCfg := env.Config
	if setup.user != "" {
		pageCfg = env.User(t, setup.user)
	}
	var px *cutProxy
	if setup.proxy {
		px = startProxy(t, strings.TrimPrefix(pageCfg.Host, "https://"))
		pageCfg.Host = "https://" + px.addr
	}
	rc := admin
	switch {
	case setup.kubeHistory:
		if rc, err = client.New(&client.Config{Host: startNoHistoryProxy(t, env)}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rc.CloseIdleConnections)
	case setup.user != "" || setup.proxy:
		if rc, err = client.New(pageCfg.ClientConfig()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rc.CloseIdleConnections)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	token, err := ui.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	cfg := ui.Config{REST: rc, Addr: l.Addr().String(), Token: token}
	for _, o := range setup.cfg {
		o(&cfg)
	}
	s, err := ui.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s.Handler()}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
		<-done
		noUIGoroutines(t)
	})
	jar, _ := cookiejar.New(nil)
	e := &uiEnv{env: env, rc: admin, s: s, addr: cfg.Addr, web: &http.Client{Jar: jar, Timeout: 30 * time.Second}, proxy: px}
	e.cms = client.NewUnstructured(admin, client.Resource{GVR: configMapsGVR, Namespaced: true, Kind: "ConfigMap"})
	resp, err := e.web.Get(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("login: %s", resp.Status)
	}
	return e
}

// noUIGoroutines fails when a goroutine of package ui is still running
// after its Server closed (give them a moment to return).
func noUIGoroutines(t testing.TB) {
	t.Helper()
	var stacks string
	for range 100 {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "objwatch/internal/ui.") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("goroutines of package ui left after Close:\n%s", stacks)
}

func (e *uiEnv) url(path string, q url.Values) string {
	u := "http://" + e.addr + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// sse reads a live stream's events.
type sse struct {
	resp *http.Response
	ch   chan sseEvent
}

type sseEvent struct {
	id  string
	ev  ui.LiveEvent
	err error
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var errClosed = errors.New("stream closed")

var deleteOptions = metav1.DeleteOptions{}
