package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
	"github.com/objwatch/objwatch/internal/instance"
	"github.com/objwatch/objwatch/testenv"
)

// servers starts n servers sharing one etcd and one set of credentials
// (CA, admin token, service-account key), as servers of one cluster do.
func servers(t *testing.T, n int) []*testenv.Env {
	t.Helper()
	etcd := testenv.StartEtcd(t)
	first := t.TempDir()
	envs := make([]*testenv.Env, n)
	for i := range envs {
		envs[i] = testenv.Start(t, testenv.WithEtcd(etcd), func(o *instance.Options) {
			if i == 0 {
				o.DataDir = first
			} else if err := os.CopyFS(filepath.Join(o.DataDir, "pki"), os.DirFS(filepath.Join(first, "pki"))); err != nil {
				t.Fatal(err)
			}
		})
	}
	return envs
}

// restFor is a REST for the admin of envs' cluster at hosts (the first
// preferred).
func restFor(t *testing.T, env *testenv.Env, hosts []string, f func(*client.Config)) *client.REST {
	t.Helper()
	cfg := &client.Config{Host: hosts[0], Hosts: hosts[1:], CAData: env.Config.CAData, BearerToken: env.Config.BearerToken}
	if f != nil {
		f(cfg)
	}
	rc, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.CloseIdleConnections)
	return rc
}

// requests counts the requests a transport sends, by host and kind.
type requests struct {
	mu sync.Mutex
	n  map[string]int // "host list", "host watch", "host POST", ...
}

func (c *requests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		kind := r.Method
		q := r.URL.Query()
		switch {
		case r.Method == http.MethodGet && q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true":
			kind = "list" // a streaming list
		case r.Method == http.MethodGet && q.Get("watch") == "true":
			kind = "watch"
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/configmaps"):
			kind = "list"
		}
		c.mu.Lock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[r.URL.Host+" "+kind]++
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

func (c *requests) get(host, kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, _ := url.Parse(host)
	return c.n[u.Host+" "+kind]
}

func (c *requests) total(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, v := range c.n {
		if strings.HasSuffix(k, " "+kind) {
			n += v
		}
	}
	return n
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// event is a change as a handler or watch saw it.
type event struct {
	typ, name, rv string
}

// TestInformerFailsOver: an informer configured with two servers keeps
// its watch across the loss of the server it watches: it resumes on the
// other from its last resourceVersion, without a relist, and delivers
// every change exactly once and in order, as a watch on the other server
// that never broke saw them.
func TestInformerFailsOver(t *testing.T) {
	envs := servers(t, 2)
	a, b := envs[0], envs[1]
	ctx := ctxFor(t)
	var counts requests
	rc := restFor(t, a, []string{a.Config.Host, b.Config.Host}, func(c *client.Config) { c.WrapTransport = counts.wrap })
	writer := client.NewClient[*corev1.ConfigMap](restFor(t, b, []string{b.Config.Host}, nil), configMaps)
	sel := "app=failover"

	// The reference: a watch on B from before the first write.
	l, err := writer.List(ctx, "default", metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := writer.Watch(ctx, "default", metav1.ListOptions{LabelSelector: sel, ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Stop()

	inf, err := informer.New(client.NewClient[*corev1.ConfigMap](rc, configMaps), informer.Options[*corev1.ConfigMap]{Namespace: "default", LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []event
	record := func(typ string, cm *corev1.ConfigMap) {
		mu.Lock()
		got = append(got, event{typ, cm.Name, cm.ResourceVersion})
		mu.Unlock()
	}
	reg, err := inf.AddHandler(informer.HandlerFuncs[*corev1.ConfigMap]{
		Add:    func(cm *corev1.ConfigMap, _ bool) { record("ADDED", cm) },
		Update: func(_, cm *corev1.ConfigMap) { record("MODIFIED", cm) },
		Delete: func(cm *corev1.ConfigMap, unknown bool) {
			if unknown {
				t.Errorf("OnDelete(%s, finalStateUnknown): a deletion was missed", cm.Name)
			}
			record("DELETED", cm)
		},
	}, informer.HandlerOptions{Name: "record"})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); inf.Run(runCtx) }()
	defer func() { stop(); <-done }()
	if err := informer.WaitForSync(ctx, reg.HasSynced); err != nil {
		t.Fatal(err)
	}
	if rc.Server() != a.Config.Host {
		t.Fatalf("Server() = %s, want the preferred %s", rc.Server(), a.Config.Host)
	}

	// Writes through B, before and after A stops.
	write := func(i int) {
		name := fmt.Sprintf("cm-%d", i%7)
		cm := newCM("default", name, map[string]string{"i": strconv.Itoa(i)})
		cm.Labels = map[string]string{"app": "failover"}
		switch cur, err := writer.Get(ctx, "default", name, metav1.GetOptions{}); {
		case errors.Is(err, client.ErrNotFound):
			_, err = writer.Create(ctx, cm, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		case err != nil:
			t.Fatal(err)
		case i%5 == 0:
			if err := writer.Delete(ctx, "default", name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		default:
			cur.Data = cm.Data
			if _, err := writer.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 40 {
		write(i)
	}
	a.Stop()
	for i := 40; i < 100; i++ {
		write(i)
		if i == 60 {
			time.Sleep(300 * time.Millisecond) // let the informer come back mid-stream
		}
	}

	// Every change the reference saw, the handler saw once, in order.
	var want []event
	final, err := writer.List(ctx, "default", metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	finalRV, _ := strconv.ParseInt(final.ResourceVersion, 10, 64)
	for {
		ev, err := ref.Next()
		if err != nil {
			t.Fatalf("reference watch: %v", err)
		}
		if ev.Type == client.Bookmark {
			continue
		}
		want = append(want, event{string(ev.Type), ev.Object.Name, ev.Object.ResourceVersion})
		if rv, _ := strconv.ParseInt(ev.Object.ResourceVersion, 10, 64); rv >= finalRV {
			break
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	if !slices.Equal(got, want) {
		t.Errorf("handler saw %d changes, the reference watch %d; first difference at %d:\n got %v\nwant %v", len(got), len(want), firstDiff(got, want), got, want)
	}
	mu.Unlock()

	// The cache is the state a fresh list has.
	cached := map[string]string{}
	for _, cm := range inf.Lister().List("default", labels.Everything()) {
		cached[cm.Name] = cm.ResourceVersion
	}
	listed := map[string]string{}
	for _, cm := range final.Items {
		listed[cm.Name] = cm.ResourceVersion
	}
	if fmt.Sprint(cached) != fmt.Sprint(listed) {
		t.Errorf("informer cache %v, fresh list %v", cached, listed)
	}
	if n := counts.total("list"); n != 1 {
		t.Errorf("%d lists, want 1: the informer relisted after the failover", n)
	}
	if n := counts.get(b.Config.Host, "watch"); n == 0 {
		t.Errorf("no watch on B after A stopped")
	}
	if rc.Server() != b.Config.Host || rc.Failovers() == 0 {
		t.Errorf("Server() = %s, Failovers() = %d; want %s and at least one", rc.Server(), rc.Failovers(), b.Config.Host)
	}
}

func firstDiff(a, b []event) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// faultProxy is an HTTP front of a real server that can refuse requests
// (503, as a server that is not ready), lose the answer of a request it
// passed on (502, as a gateway whose backend reset), or hold requests (a
// slow server: each is announced on held and passed on when release
// receives).
type faultProxy struct {
	*httptest.Server
	mode    atomic.Value // "", "503", "502" or "hold"
	posts   atomic.Int32 // POSTs that reached the server
	held    chan struct{}
	release chan struct{}
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	rp.Transport = tr
	p := &faultProxy{held: make(chan struct{}), release: make(chan struct{})}
	p.mode.Store("")
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mode := p.mode.Load().(string)
		if mode == "hold" {
			select {
			case p.held <- struct{}{}:
			case <-r.Context().Done():
				return
			}
			select {
			case <-p.release:
			case <-r.Context().Done():
				return
			}
		}
		if mode == "503" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"ServiceUnavailable","code":503,"message":"not ready"}`)
			return
		}
		if r.Method == http.MethodPost {
			p.posts.Add(1)
		}
		if mode == "502" {
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r) // processed; the answer is lost
			http.Error(w, "upstream connection reset", http.StatusBadGateway)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { p.Close(); tr.CloseIdleConnections() })
	return p
}

// TestFailoverOn503: a request a server refuses with 503 goes to the next
// server at once, writes included (a 503 was not processed); a write whose
// answer is another 5xx may have been processed and is not sent again,
// but the next request goes elsewhere.
func TestFailoverOn503(t *testing.T) {
	envs := servers(t, 2)
	pa, pb := newFaultProxy(t, envs[0].Config.Host), newFaultProxy(t, envs[1].Config.Host)
	rc := restFor(t, envs[0], []string{pa.URL, pb.URL}, nil)
	cms := client.NewClient[*corev1.ConfigMap](rc, configMaps)
	ctx := ctxFor(t)

	pa.mode.Store("503")
	if _, err := cms.Create(ctx, newCM("default", "refused", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("Create with A refusing = %v, want it created through B", err)
	}
	if pa.posts.Load() != 0 || pb.posts.Load() != 1 {
		t.Errorf("POSTs reaching A, B = %d, %d; want 0, 1", pa.posts.Load(), pb.posts.Load())
	}
	if rc.Server() != pb.URL || rc.Failovers() != 1 {
		t.Errorf("Server() = %s, Failovers() = %d; want %s, 1", rc.Server(), rc.Failovers(), pb.URL)
	}
	// Sticky: B answered, so B serves the next ones, even with A back
	// (until the failback delay of 30 s).
	pa.mode.Store("")
	if _, err := cms.Get(ctx, "default", "refused", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if rc.Server() != pb.URL {
		t.Errorf("Server() after a success on B = %s, want B", rc.Server())
	}

	// B loses a POST's answer: 502, not sent again, but A is next.
	pb.mode.Store("502")
	createLost(ctx, t, cms)
	if pa.posts.Load() != 0 || pb.posts.Load() != 2 {
		t.Errorf("POSTs reaching A, B = %d, %d; want 0, 2 (the lost one not resent)", pa.posts.Load(), pb.posts.Load())
	}
	if rc.Server() != pa.URL || rc.Failovers() != 2 {
		t.Errorf("Server() = %s, Failovers() = %d after the 502; want %s, 2", rc.Server(), rc.Failovers(), pa.URL)
	}
	// It was created (once): the caller finds it, through A.
	if _, err := cms.Create(ctx, newCM("default", "lost", nil), metav1.CreateOptions{}); !errors.Is(err, client.ErrAlreadyExists) {
		t.Errorf("Create(lost) again = %v, want AlreadyExists", err)
	}
	// A GET answered 502 is retried on the other server.
	pb.mode.Store("")
	pa.mode.Store("502")
	if _, err := cms.Get(ctx, "default", "lost", metav1.GetOptions{}); err != nil {
		t.Errorf("Get with A answering 502 = %v, want it read from B", err)
	}
	if rc.Server() != pb.URL {
		t.Errorf("Server() = %s, want B", rc.Server())
	}
}

// TestFailoverOnRefusedConnection: with the current server gone, writes
// and reads go to the next (nothing was sent).
func TestFailoverOnRefusedConnection(t *testing.T) {
	envs := servers(t, 3)
	hosts := []string{envs[0].Config.Host, envs[1].Config.Host, envs[2].Config.Host}
	rc := restFor(t, envs[0], hosts, nil)
	cms := client.NewClient[*corev1.ConfigMap](rc, configMaps)
	ctx := ctxFor(t)
	envs[0].Stop()
	envs[1].Stop()
	if _, err := cms.Create(ctx, newCM("default", "c", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("Create with two of three servers gone = %v", err)
	}
	if rc.Server() != hosts[2] || rc.Failovers() != 2 {
		t.Errorf("Server() = %s, Failovers() = %d; want %s, 2", rc.Server(), rc.Failovers(), hosts[2])
	}
	envs[2].Stop()
	if _, err := cms.Get(ctx, "default", "c", metav1.GetOptions{}); err == nil {
		t.Errorf("Get with every server gone succeeded")
	}
}

// freezerFor puts a freezer in front of env's server and returns it with
// the URL that reaches the server through it.
func freezerFor(t *testing.T, env *testenv.Env) (*freezer, string) {
	t.Helper()
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	f := newFreezer(t, u.Host)
	return f, "https://" + f.ln.Addr().String()
}

// TestStalledWatchFailsOver: a watch with bookmarks that receives nothing
// for StallTimeout ends with ErrStalled, and its resumption goes to the
// other server and misses nothing.
func TestStalledWatchFailsOver(t *testing.T) {
	envs := servers(t, 2)
	f, frozen := freezerFor(t, envs[0])
	rc := restFor(t, envs[0], []string{frozen, envs[1].Config.Host}, func(c *client.Config) {
		c.StallTimeout = 700 * time.Millisecond
	})
	cms := client.NewClient[*corev1.ConfigMap](rc, configMaps)
	writer := client.NewClient[*corev1.ConfigMap](restFor(t, envs[1], []string{envs[1].Config.Host}, nil), configMaps)
	ctx := ctxFor(t)
	l, err := cms.List(ctx, "default", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cms.Watch(ctx, "default", metav1.ListOptions{ResourceVersion: l.ResourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	first, err := writer.Create(ctx, newCM("default", "before", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := w.Next(); err != nil || ev.Object.Name != "before" {
		t.Fatalf("Next() = %v, %v; want ADDED before", ev, err)
	}
	f.freeze()
	second, err := writer.Create(ctx, newCM("default", "during", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = w.Next()
	if !errors.Is(err, client.ErrStalled) {
		t.Fatalf("Next() on a stalled watch = %v, want ErrStalled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stall detected after %v, want about 700ms", d)
	}
	w.Stop()
	w, err = cms.Watch(ctx, "default", metav1.ListOptions{ResourceVersion: first.ResourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev, err := w.Next()
	if err != nil || ev.Object.Name != "during" || ev.Object.ResourceVersion != second.ResourceVersion {
		t.Fatalf("resumed Next() = %v, %v; want ADDED during at %s", ev.Object, err, second.ResourceVersion)
	}
	if rc.Server() != envs[1].Config.Host || rc.Failovers() != 1 {
		t.Errorf("Server() = %s, Failovers() = %d; want %s, 1", rc.Server(), rc.Failovers(), envs[1].Config.Host)
	}
}

// TestKubeconfigServers: the objwatch.io/servers extension of the cluster
// lists the other servers; bad ones are errors naming the file.
func TestKubeconfigServers(t *testing.T) {
	write := func(ext string) string {
		p := filepath.Join(t.TempDir(), "config")
		kc := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://a.example:6443
` + ext + `
users:
- name: u
  user:
    token: t
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`
		if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := client.FromKubeconfig(write(`    extensions:
    - name: objwatch.io/servers
      extension:
        servers: [https://a.example:6443, https://b.example:6443, "c.example:6443"]`), "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://a.example:6443" || !slices.Equal(cfg.Hosts, []string{"https://b.example:6443", "c.example:6443"}) {
		t.Errorf("Host, Hosts = %s, %v; want a, [b c]", cfg.Host, cfg.Hosts)
	}
	rc, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s := rc.Servers(); !slices.Equal(s, []string{"https://a.example:6443", "https://b.example:6443", "https://c.example:6443"}) {
		t.Errorf("Servers() = %v", s)
	}
	if cfg, err := client.FromKubeconfig(write(""), ""); err != nil || len(cfg.Hosts) != 0 {
		t.Errorf("one server: Hosts = %v, %v; want none", cfg.Hosts, err)
	}
	for _, bad := range []string{
		"servers: https://b.example",  // not a list
		"servers: [ftp://b.example]",  // not http(s)
		"servers: [\"https://\"]",     // no host
		"server: [https://b.example]", // misspelt
		"servers: [{url: https://b}]", // not a string
	} {
		p := write("    extensions:\n    - name: objwatch.io/servers\n      extension: {" + strings.TrimSpace(bad) + "}")
		_, err := client.FromKubeconfig(p, "")
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("extension {%s}: error %v, want one naming %s", bad, err, p)
		}
	}
}

// restartable starts servers A and B of one cluster (one etcd, one set of
// credentials) and returns a function that starts A again, after
// A.Stop, at its address and with its data directory, as a restarted
// process.
func restartable(t *testing.T) (a, b *testenv.Env, restartA func() *testenv.Env) {
	t.Helper()
	etcd := testenv.StartEtcd(t)
	dirA := t.TempDir()
	a = testenv.Start(t, testenv.WithEtcd(etcd), func(o *instance.Options) { o.DataDir = dirA })
	b = testenv.Start(t, testenv.WithEtcd(etcd), func(o *instance.Options) {
		if err := os.CopyFS(filepath.Join(o.DataDir, "pki"), os.DirFS(filepath.Join(dirA, "pki"))); err != nil {
			t.Fatal(err)
		}
	})
	u, err := url.Parse(a.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	restartA = func() *testenv.Env {
		t.Helper()
		env := testenv.Start(t, testenv.WithEtcd(etcd), func(o *instance.Options) { o.DataDir, o.Listen = dirA, u.Host })
		if env.Config.Host != a.Config.Host {
			t.Fatalf("restarted A at %s, want %s", env.Config.Host, a.Config.Host)
		}
		return env
	}
	return a, b, restartA
}

// TestFailback: after a failover away from the preferred server, requests
// go back to it once it is up again, its backoff has ended and the
// failback delay has passed, not before; the first request then (here a
// watch resumption) is the one that moves. A watch streaming from the
// other server is not cut by the move.
func TestFailback(t *testing.T) {
	defer client.SetFailoverTimes(50*time.Millisecond, 200*time.Millisecond, time.Hour)()
	a, b, restartA := restartable(t)
	ctx := ctxFor(t)
	var counts requests
	rc := restFor(t, a, []string{a.Config.Host, b.Config.Host}, func(c *client.Config) { c.WrapTransport = counts.wrap })
	cms := client.NewClient[*corev1.ConfigMap](rc, configMaps)
	writer := client.NewClient[*corev1.ConfigMap](restFor(t, b, []string{b.Config.Host}, nil), configMaps)
	l, err := cms.List(ctx, "default", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if counts.get(a.Config.Host, "list") != 1 {
		t.Fatalf("the first list did not go to the preferred server A")
	}

	// A stops: requests move to B.
	a.Stop()
	x, err := cms.Create(ctx, newCM("default", "x", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("Create with A stopped = %v", err)
	}
	if rc.Server() != b.Config.Host || rc.Failovers() != 1 || rc.Failbacks() != 0 {
		t.Fatalf("Server() = %s, Failovers() = %d, Failbacks() = %d; want B, 1, 0", rc.Server(), rc.Failovers(), rc.Failbacks())
	}
	// Two watches on B: one streams throughout, one is resumed later.
	watch := func(rv string) *client.Watcher[*corev1.ConfigMap] {
		w, err := cms.Watch(ctx, "default", metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		return w
	}
	next := func(w *client.Watcher[*corev1.ConfigMap], name string) *corev1.ConfigMap {
		t.Helper()
		ev, err := w.Next()
		if err != nil || ev.Type != client.Added || ev.Object.Name != name {
			t.Fatalf("Next() = %s %v, %v; want ADDED %s", ev.Type, ev.Object, err, name)
		}
		return ev.Object
	}
	streaming, resumed := watch(l.ResourceVersion), watch(l.ResourceVersion)
	next(streaming, "x")
	next(resumed, "x")

	// A is back, and its backoff (at most 200ms) is over, but the
	// failback delay is not: requests stay on B.
	a = restartA()
	time.Sleep(300 * time.Millisecond)
	gets := counts.get(a.Config.Host, "GET")
	for range 5 {
		if _, err := cms.Get(ctx, "default", "x", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := counts.get(a.Config.Host, "GET") - gets; n != 0 || rc.Server() != b.Config.Host {
		t.Errorf("within the failback delay: %d GETs to A, Server() = %s; want 0, B", n, rc.Server())
	}

	// With the delay over, the next request, a watch resumption, goes to
	// A, which answers: requests are back on A.
	client.SetFailoverTimes(50*time.Millisecond, 200*time.Millisecond, 0)
	resumed.Stop()
	resumed = watch(x.ResourceVersion)
	if counts.get(a.Config.Host, "watch") != 1 || rc.Server() != a.Config.Host || rc.Failbacks() != 1 {
		t.Fatalf("resumed watch: %d watches on A, Server() = %s, Failbacks() = %d; want 1, A, 1", counts.get(a.Config.Host, "watch"), rc.Server(), rc.Failbacks())
	}
	gets = counts.get(a.Config.Host, "GET")
	if _, err := cms.Get(ctx, "default", "x", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if counts.get(a.Config.Host, "GET") != gets+1 {
		t.Errorf("a GET after the failback did not go to A")
	}

	// The watch on B was not cut: it streams on, as does the resumed one
	// on A, from where it left off.
	if _, err := writer.Create(ctx, newCM("default", "y", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	next(streaming, "y")
	next(resumed, "y")
	if n := counts.get(b.Config.Host, "watch"); n != 2 {
		t.Errorf("%d watches sent to B, want the 2 started there: one was cut and restarted", n)
	}
	if rc.Failovers() != 1 || rc.Failbacks() != 1 {
		t.Errorf("Failovers() = %d, Failbacks() = %d; want 1, 1", rc.Failovers(), rc.Failbacks())
	}
}

// TestFailbackWhileDown: a preferred server that stays down is tried
// again, by requests from several goroutines, no more often than its
// doubling backoff allows, and every request is served by the other
// server meanwhile; a write that a failback attempt finds refused (not
// sent) is sent to the other server, once.
func TestFailbackWhileDown(t *testing.T) {
	const first, most = 50 * time.Millisecond, 200 * time.Millisecond
	defer client.SetFailoverTimes(first, most, 0)()
	envs := servers(t, 2)
	a, b := envs[0], envs[1]
	ctx := ctxFor(t)
	var counts requests
	rc := restFor(t, a, []string{a.Config.Host, b.Config.Host}, func(c *client.Config) { c.WrapTransport = counts.wrap })
	cms := client.NewClient[*corev1.ConfigMap](rc, configMaps)
	a.Stop()
	start := time.Now()
	if _, err := cms.List(ctx, "default", metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if rc.Server() != b.Config.Host {
		t.Fatalf("Server() = %s, want B", rc.Server())
	}
	var wg sync.WaitGroup
	var lists, failed atomic.Int32
	for range 4 {
		wg.Go(func() {
			for time.Since(start) < 2*time.Second {
				lists.Add(1)
				if _, err := cms.List(ctx, "default", metav1.ListOptions{}); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	// The attempts the backoff allows in elapsed: the first, then one
	// after each backoff (first, doubling up to most).
	allowed, at := 1, time.Duration(0)
	for d := first; ; d = min(2*d, most) {
		if at += d; at > elapsed {
			break
		}
		allowed++
	}
	n := counts.get(a.Config.Host, "list")
	if n > allowed {
		t.Errorf("A, down, was tried %d times in %v; its backoff allows %d", n, elapsed, allowed)
	}
	if n < 3 {
		t.Errorf("A was tried %d times in %v: no failback attempts", n, elapsed)
	}
	if failed.Load() != 0 || rc.Failbacks() != 0 || rc.Server() != b.Config.Host {
		t.Errorf("%d of %d lists failed, Failbacks() = %d, Server() = %s; want 0, 0, B", failed.Load(), lists.Load(), rc.Failbacks(), rc.Server())
	}
	t.Logf("A tried %d times in %v (%d allowed), %d lists", n, elapsed, allowed, lists.Load())

	// A failback attempt of a write, refused: sent to B, once.
	time.Sleep(most + 50*time.Millisecond)
	if _, err := cms.Create(ctx, newCM("default", "w", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("Create = %v, want it created through B", err)
	}
	if pa, pb := counts.get(a.Config.Host, "POST"), counts.get(b.Config.Host, "POST"); pa != 1 || pb != 1 {
		t.Errorf("POSTs sent to A, B = %d, %d; want 1 (refused), 1", pa, pb)
	}
	if rc.Failovers() != 1 || rc.Server() != b.Config.Host {
		t.Errorf("Failovers() = %d, Server() = %s; want 1, B: a failed failback is no failover", rc.Failovers(), rc.Server())
	}
}

// createLost creates ConfigMap "lost" through a proxy that answers the
// POST 502 after forwarding it, and checks the caller gets the 502: a
// write that may have been processed is not sent again.
func createLost(ctx context.Context, t *testing.T, cms *client.Client[*corev1.ConfigMap]) {
	t.Helper()
	_, err := cms.Create(ctx, newCM("default", "lost", nil), metav1.CreateOptions{})
	var se *client.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Code != http.StatusBadGateway {
		t.Fatalf("Create answered 502 = %v, want the 502 returned", err)
	}
}

// failedOverFromA starts two servers behind fault proxies, A preferred,
// and has A refuse a list with 503 so that requests move to B (A keeps
// refusing until the caller changes its mode).
func failedOverFromA(t *testing.T) (*client.REST, *client.Client[*corev1.ConfigMap], *faultProxy, *faultProxy) {
	t.Helper()
	envs := servers(t, 2)
	pa, pb := newFaultProxy(t, envs[0].Config.Host), newFaultProxy(t, envs[1].Config.Host)
	rc := restFor(t, envs[0], []string{pa.URL, pb.URL}, nil)
	cms := client.NewClient[*corev1.ConfigMap](rc, configMaps)
	pa.mode.Store("503")
	if _, err := cms.List(ctxFor(t), "default", metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	return rc, cms, pa, pb
}

// TestFailbackWrites: a failback attempt of a write follows the failover
// rules: refused with 503, it goes to the other server; answered 502 (it
// may have been processed), its error is returned and it is not sent
// again; answered, it brings requests back.
func TestFailbackWrites(t *testing.T) {
	const most = 200 * time.Millisecond
	defer client.SetFailoverTimes(50*time.Millisecond, most, 0)()
	rc, cms, pa, pb := failedOverFromA(t)
	ctx := ctxFor(t)
	if rc.Server() != pb.URL {
		t.Fatalf("Server() = %s, want B", rc.Server())
	}
	backoff := func() { time.Sleep(most + 50*time.Millisecond) } // A's backoff is over

	backoff()
	if _, err := cms.Create(ctx, newCM("default", "refused", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("Create with A refusing = %v, want it created through B", err)
	}
	if pa.posts.Load() != 0 || pb.posts.Load() != 1 {
		t.Errorf("POSTs reaching A, B = %d, %d; want 0, 1", pa.posts.Load(), pb.posts.Load())
	}

	backoff()
	pa.mode.Store("502")
	createLost(ctx, t, cms)
	if pa.posts.Load() != 1 || pb.posts.Load() != 1 {
		t.Errorf("POSTs reaching A, B = %d, %d; want 1, 1 (the lost one not resent)", pa.posts.Load(), pb.posts.Load())
	}
	if _, err := cms.Get(ctx, "default", "lost", metav1.GetOptions{}); err != nil {
		t.Errorf("Get(lost) = %v: A did not create it", err)
	}
	if rc.Server() != pb.URL || rc.Failbacks() != 0 {
		t.Errorf("Server() = %s, Failbacks() = %d; want B, 0", rc.Server(), rc.Failbacks())
	}

	backoff()
	pa.mode.Store("")
	if _, err := cms.Create(ctx, newCM("default", "back", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if pa.posts.Load() != 2 || pb.posts.Load() != 1 || rc.Server() != pa.URL || rc.Failbacks() != 1 {
		t.Errorf("POSTs reaching A, B = %d, %d, Server() = %s, Failbacks() = %d; want 2, 1, A, 1", pa.posts.Load(), pb.posts.Load(), rc.Server(), rc.Failbacks())
	}
}

// TestFailbackStays: a request that was running on the other server and
// answers after the failback does not move requests off the preferred
// server again.
func TestFailbackStays(t *testing.T) {
	const most = 200 * time.Millisecond
	defer client.SetFailoverTimes(50*time.Millisecond, most, 0)()
	rc, cms, pa, pb := failedOverFromA(t)
	ctx := ctxFor(t)
	pb.mode.Store("hold")
	slow := make(chan error, 1)
	go func() {
		_, err := cms.List(ctx, "default", metav1.ListOptions{})
		slow <- err
	}()
	<-pb.held
	pb.mode.Store("")
	pa.mode.Store("")
	time.Sleep(most + 50*time.Millisecond) // A's backoff is over
	if _, err := cms.List(ctx, "default", metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if rc.Server() != pa.URL || rc.Failbacks() != 1 {
		t.Fatalf("Server() = %s, Failbacks() = %d; want A, 1", rc.Server(), rc.Failbacks())
	}
	pb.release <- struct{}{}
	if err := <-slow; err != nil {
		t.Fatalf("the list held on B = %v", err)
	}
	if rc.Server() != pa.URL {
		t.Errorf("Server() = %s after B answered a list sent before the failback, want A", rc.Server())
	}
}

// TestFailbackOneProbe: while a failback attempt hangs on a preferred
// server that vanished from the network, the other requests are not sent
// to it: they are served by the current server. A failback attempt cut
// off by its caller's deadline counts against the preferred server too.
func TestFailbackOneProbe(t *testing.T) {
	const backoff = 500 * time.Millisecond
	defer client.SetFailoverTimes(backoff, backoff, 0)()
	envs := servers(t, 2)
	f, frozen := freezerFor(t, envs[0])
	var counts requests
	rc := restFor(t, envs[0], []string{frozen, envs[1].Config.Host}, func(c *client.Config) {
		c.WrapTransport = counts.wrap
		c.AttemptTimeout = 2 * time.Second
	})
	cms := client.NewClient[*corev1.ConfigMap](rc, configMaps)
	ctx := ctxFor(t)
	if _, err := cms.List(ctx, "default", metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	f.freeze()
	if _, err := cms.List(ctx, "default", metav1.ListOptions{}); err != nil {
		t.Fatalf("List with A frozen = %v, want it read from B after the attempt timeout", err)
	}
	if rc.Server() != envs[1].Config.Host || counts.get(frozen, "list") != 2 {
		t.Fatalf("Server() = %s, %d lists to A; want B, 2", rc.Server(), counts.get(frozen, "list"))
	}
	time.Sleep(backoff + 50*time.Millisecond) // A's backoff is over

	// One list is the failback attempt and hangs on A.
	probe := make(chan error, 1)
	go func() {
		_, err := cms.List(ctx, "default", metav1.ListOptions{})
		probe <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); counts.get(frozen, "list") < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no failback attempt to A")
		}
	}
	for range 10 {
		if _, err := cms.List(ctx, "default", metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := counts.get(frozen, "list"); n != 3 {
		t.Errorf("%d lists sent to A, want 3: another request joined the hanging failback attempt", n)
	}
	var err error
	select {
	case err = <-probe:
		t.Errorf("the failback attempt ended (%v) before its attempt timeout", err)
	default:
		err = <-probe
	}
	if err != nil {
		t.Errorf("the failback attempt's list = %v, want it read from B after the timeout", err)
	}
	if rc.Server() != envs[1].Config.Host || rc.Failbacks() != 0 {
		t.Errorf("Server() = %s, Failbacks() = %d; want B, 0", rc.Server(), rc.Failbacks())
	}

	// A failback attempt whose caller gives up first: A backs off, so the
	// next request is not another attempt on it.
	time.Sleep(backoff + 50*time.Millisecond)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := cms.List(short, "default", metav1.ListOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("List with a 300ms deadline, A frozen = %v, want the deadline", err)
	}
	if n := counts.get(frozen, "list"); n != 4 {
		t.Fatalf("%d lists sent to A, want 4", n)
	}
	if _, err := cms.List(ctx, "default", metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := counts.get(frozen, "list"); n != 4 {
		t.Errorf("%d lists sent to A, want 4: the failback attempt the caller gave up on did not back A off", n)
	}
}
