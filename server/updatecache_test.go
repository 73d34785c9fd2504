package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// guessCounts is a snapshot of server.UpdateGuesses.
type guessCounts struct{ used, stale, rechecked int64 }

// guesses sums the counts of the servers of envs.
func guesses(envs ...*testenv.Env) guessCounts {
	var g guessCounts
	for _, e := range envs {
		u, s, r := server.UpdateGuesses(e.Server)
		g = guessCounts{g.used + u, g.stale + s, g.rechecked + r}
	}
	return g
}

func conflictReadsOf(envs []*testenv.Env) int64 {
	var n int64
	for _, e := range envs {
		n += server.UpdateConflictReads(e.Server)
	}
	return n
}

func (g guessCounts) since(before guessCounts) guessCounts {
	return guessCounts{g.used - before.used, g.stale - before.stale, g.rechecked - before.rechecked}
}

// waitCache waits until the server's watch cache of gvr has revision rv.
func waitCache(t *testing.T, env *testenv.Env, gvr schema.GroupVersionResource, rv string) {
	t.Helper()
	c := server.WatchCache(env.Server, gvr)
	if c == nil {
		t.Fatalf("no watch cache for %v", gvr)
	}
	n, _ := strconv.ParseInt(rv, 10, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitFor(ctx, n); err != nil {
		t.Fatalf("watch cache of %v never reached %s: %v", gvr, rv, err)
	}
}

func rvNum(t *testing.T, r servertest.Response) int64 {
	t.Helper()
	n, err := strconv.ParseInt(servertest.RVOf(t, r), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Sequential updates and patches of one object through one server start
// from the watch cache (each waits for the cache to have the one before),
// answer what reading etcd would, and produce the same watch events.
func TestUpdateGuessSequence(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	t.Cleanup(a.C.CloseIdleConnections)
	created := a.JSON("POST", servertest.CMs, servertest.CM("seq", ""))
	servertest.MustCode(t, "create", created, http.StatusCreated)
	waitCache(t, env, servertest.CMGVR, servertest.RVOf(t, created))

	resp, err := a.C.Get(env.Config.Host + servertest.CMs + "?watch=true&resourceVersion=" + servertest.RVOf(t, created))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	evs := servertest.NewEvents(resp.Body)

	before := guesses(env)
	const n = 40
	rv, last := rvNum(t, created), created
	var want []servertest.Response
	for i := range n {
		var r servertest.Response
		v := fmt.Sprint("v", i)
		switch i % 4 {
		case 0:
			r = a.Do("PATCH", servertest.CMs+"/seq", "application/merge-patch+json", []byte(`{"data":{"k":"`+v+`"}}`))
		case 1:
			r = a.Do("PATCH", servertest.CMs+"/seq", "application/json-patch+json", []byte(`[{"op":"replace","path":"/data/k","value":"`+v+`"}]`))
		case 2:
			r = a.Do("PATCH", servertest.CMs+"/seq", "application/strategic-merge-patch+json", []byte(`{"metadata":{"labels":{"i":"`+v+`"}},"data":{"k":"`+v+`"}}`))
		case 3:
			// An update pinned at the last resourceVersion.
			o := last.Object()
			o["data"].(map[string]any)["k"] = v
			b, _ := json.Marshal(o)
			r = a.Do("PUT", servertest.CMs+"/seq", "application/json", b)
		}
		servertest.MustCode(t, fmt.Sprint("write ", i), r, http.StatusOK)
		if got := servertest.DataOf(r)["k"]; got != v {
			t.Fatalf("write %d: data.k = %v, want %s", i, got, v)
		}
		next := rvNum(t, r)
		if next <= rv {
			t.Fatalf("write %d: resourceVersion %d, not after %d", i, next, rv)
		}
		rv = next
		last = r
		want = append(want, r)
	}
	got := guesses(env).since(before)
	t.Logf("guesses: %+v", got)
	// Under load the cache may lag past guessWait, and guesses pause: some
	// writes then read etcd. None may be stale, and on a quiet machine most
	// are guesses.
	if got.used == 0 || got.stale != 0 {
		t.Errorf("guesses over %d sequential writes = %+v, want some used and none stale", n, got)
	}
	// A patch that changes nothing writes nothing; when it was answered
	// from a guess, the answer is re-checked against etcd. (Repeated until
	// a guess is used, as a paused or lagging cache makes it read etcd.)
	for deadline := time.Now().Add(10 * time.Second); ; {
		before := guesses(env)
		r := a.Do("PATCH", servertest.CMs+"/seq", "application/merge-patch+json", []byte(`{"data":{"k":"v39"}}`))
		servertest.MustCode(t, "no-op patch", r, http.StatusOK)
		if servertest.RVOf(t, r) != servertest.RVOf(t, last) {
			t.Fatalf("no-op patch: resourceVersion %s, want %s unchanged", servertest.RVOf(t, r), servertest.RVOf(t, last))
		}
		if g := guesses(env).since(before); g.used > 0 {
			if g.rechecked != 1 || g.stale != 0 {
				t.Errorf("a no-op patch from a guess: %+v, want one re-checked, none stale", g)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no no-op patch used a guess in 10 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if g := a.JSON("GET", servertest.CMs+"/seq", ""); !bytes.Equal(g.Body, last.Body) {
		t.Errorf("GET after the writes = %s\nwant the last answer %s", g.Body, last.Body)
	}

	// Every write is one MODIFIED event carrying what the write answered.
	for i, w := range want {
		ev, err := evs.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		var e struct {
			Type   string
			Object map[string]any
		}
		if err := json.Unmarshal(ev.Line, &e); err != nil {
			t.Fatal(err)
		}
		if e.Type != "MODIFIED" || !reflect.DeepEqual(e.Object, w.Object()) {
			t.Fatalf("event %d = %s %s\nwant MODIFIED %s", i, e.Type, ev.Line, w.Body)
		}
	}
}

// Without a watch cache, updates read etcd.
func TestUpdateGuessNeedsCache(t *testing.T) {
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = true }))
	a := servertest.NewAPI(t, env)
	t.Cleanup(a.C.CloseIdleConnections)
	servertest.MustCode(t, "create", a.JSON("POST", servertest.CMs, servertest.CM("nocache", "")), http.StatusCreated)
	before := guesses(env)
	for i := range 3 {
		r := a.Do("PATCH", servertest.CMs+"/nocache", "application/merge-patch+json", []byte(fmt.Sprintf(`{"data":{"k":"%d"}}`, i)))
		servertest.MustCode(t, "PATCH", r, http.StatusOK)
	}
	if g := guesses(env).since(before); g != (guessCounts{}) {
		t.Errorf("guesses without a cache = %+v, want none", g)
	}
}

func mustInt(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic(err)
	}
	return n
}

// Concurrent patches of one object through two servers lose nothing.
func TestUpdateGuessConcurrentPatches(t *testing.T) {
	ep := testenv.StartEtcd(t)
	envs := []*testenv.Env{testenv.Start(t, testenv.WithEtcd(ep)), testenv.Start(t, testenv.WithEtcd(ep))}
	clients := []*http.Client{envs[0].HTTPClient(), envs[1].HTTPClient()}
	a := servertest.NewAPI(t, envs[0])
	created := a.JSON("POST", servertest.CMs, servertest.CM("conc", ""))
	servertest.MustCode(t, "create", created, http.StatusCreated)
	waitCache(t, envs[0], servertest.CMGVR, servertest.RVOf(t, created))
	waitCache(t, envs[1], servertest.CMGVR, servertest.RVOf(t, created))

	resp, err := a.C.Get(envs[0].Config.Host + servertest.CMs + "?watch=true&resourceVersion=" + servertest.RVOf(t, created))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	before, conflictReads := guesses(envs...), conflictReadsOf(envs)
	const goroutines, patches = 16, 20
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*patches)
	rvs := make(chan string, goroutines*patches)
	for g := range goroutines {
		wg.Go(func() {
			env, c := envs[g%2], clients[g%2]
			for i := range patches {
				code, b, err := mergePatch(c, env.Config.Host+servertest.CMs+"/conc", fmt.Sprintf(`{"data":{"g%d-%d":"x"}}`, g, i))
				if err != nil {
					errs <- err
					return
				}
				if code != http.StatusOK {
					errs <- fmt.Errorf("patch %d of %d = %d %s", i, g, code, b)
					return
				}
				rvs <- servertest.ResourceVersion(b)
			}
		})
	}
	wg.Wait()
	close(errs)
	close(rvs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for rv := range rvs {
		if seen[rv] {
			t.Errorf("two patches answered resourceVersion %s", rv)
		}
		seen[rv] = true
	}
	final := a.JSON("GET", servertest.CMs+"/conc", "")
	data := servertest.DataOf(final)
	for g := range goroutines {
		for i := range patches {
			if data[fmt.Sprintf("g%d-%d", g, i)] != "x" {
				t.Errorf("patch %d of goroutine %d lost", i, g)
			}
		}
	}
	// The watch has each patch once, in order, ending with the final state.
	evs := servertest.NewEvents(resp.Body)
	prev := mustInt(servertest.RVOf(t, created))
	for i := range goroutines * patches {
		ev, err := evs.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		n := mustInt(ev.RV)
		if ev.Type != "MODIFIED" || n <= prev || !seen[ev.RV] {
			t.Fatalf("event %d = %s at %s after %d", i, ev.Type, ev.RV, prev)
		}
		prev = n
	}
	if strconv.FormatInt(prev, 10) != servertest.RVOf(t, final) {
		t.Errorf("last event at %d, object at %s", prev, servertest.RVOf(t, final))
	}
	t.Logf("guesses: %+v", guesses(envs...).since(before))
	// The two servers' patches conflict in etcd; a retry starts from the
	// state the failed write found, not from another read.
	if stale, reads := guesses(envs...).since(before).stale, conflictReadsOf(envs)-conflictReads; stale > 0 && reads == 0 {
		t.Errorf("%d stale guesses and no retry from the conflicting write's state", stale)
	}
}

// mergePatch sends a JSON merge patch from any goroutine (the api helper
// fails the test, which only the test's goroutine may do).
func mergePatch(c *http.Client, url, body string) (code int, out []byte, err error) {
	req, err := http.NewRequest("PATCH", url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/merge-patch+json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err = io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// versionsCRD stores v1; v2 is served too, with a default v1 lacks.
const versionsCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"things.guess.objwatch.io"},
 "spec":{"group":"guess.objwatch.io","scope":"Namespaced",
  "names":{"plural":"things","singular":"thing","kind":"Thing","listKind":"ThingList"},
  "versions":[
   {"name":"v1","served":true,"storage":true,"subresources":{"status":{}},
    "schema":{"openAPIV3Schema":{"type":"object","properties":{
     "spec":{"type":"object","properties":{"size":{"type":"integer"},"color":{"type":"string"}}},
     "status":{"type":"object","properties":{"ok":{"type":"boolean"}}}}}}},
   {"name":"v2","served":true,"storage":false,"subresources":{"status":{}},
    "schema":{"openAPIV3Schema":{"type":"object","properties":{
     "spec":{"type":"object","properties":{"size":{"type":"integer","default":3},"color":{"type":"string","default":"blue"}}},
     "status":{"type":"object","properties":{"ok":{"type":"boolean"}}}}}}}]}}`

// A custom resource stored in one version and updated through another
// (converted, defaulted, pruned) gets, from the cache, exactly the answers
// and stored values reading etcd gives: the same writes through a server
// without a watch cache (whose updates read etcd) are the reference.
func TestUpdateGuessCustomResourceVersions(t *testing.T) {
	ep := testenv.StartEtcd(t)
	env := testenv.Start(t, testenv.WithEtcd(ep))
	ref := testenv.Start(t, testenv.WithEtcd(ep), testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = true }))
	a, fromEtcd := servertest.NewAPI(t, env), servertest.NewAPI(t, ref)
	t.Cleanup(a.C.CloseIdleConnections)
	t.Cleanup(fromEtcd.C.CloseIdleConnections)
	servertest.MustCode(t, "create CRD", a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", versionsCRD), http.StatusCreated)
	base := "/apis/guess.objwatch.io/%s/namespaces/default/things"
	v1, v2 := fmt.Sprintf(base, "v1"), fmt.Sprintf(base, "v2")
	servertest.EventuallyWithin(t, 10*time.Second, func() bool {
		for _, c := range []*servertest.API{a, fromEtcd} {
			if c.JSON("GET", v1, "").Code != http.StatusOK || c.JSON("GET", v2, "").Code != http.StatusOK {
				return false
			}
		}
		return true
	})
	// The caches exist once something reads from them.
	for _, p := range []string{v1, v2} {
		servertest.MustCode(t, "list", a.JSON("GET", p+"?resourceVersion=0", ""), http.StatusOK)
	}
	gvr := func(v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "guess.objwatch.io", Version: v, Resource: "things"}
	}
	steps := []struct {
		version, method, sub, ctype, body string
	}{
		{"v2", "PATCH", "", "application/merge-patch+json", `{}`},
		{"v2", "PATCH", "", "application/merge-patch+json", `{}`},
		{"v2", "PATCH", "", "application/merge-patch+json", `{"metadata":{"labels":{"a":"b"}}}`},
		{"v1", "PATCH", "", "application/merge-patch+json", `{}`},
		{"v1", "PATCH", "", "application/merge-patch+json", `{"spec":{"size":5,"extra":1}}`},
		{"v2", "PATCH", "/status", "application/merge-patch+json", `{"status":{"ok":true}}`},
		{"v1", "PATCH", "", "application/json-patch+json", `[{"op":"remove","path":"/spec/color"}]`},
		{"v2", "PATCH", "", "application/json-patch+json", `[{"op":"remove","path":"/spec/color"}]`},
		{"v2", "PATCH", "", "application/merge-patch+json", `{"spec":{"size":"big"}}`},
	}
	// run applies the steps to a new object through c and returns the
	// answers, with what differs between objects taken out.
	run := func(c *servertest.API, name string) []string {
		r := c.JSON("POST", v1, `{"apiVersion":"guess.objwatch.io/v1","kind":"Thing","metadata":{"name":"`+name+`"},"spec":{"size":1}}`)
		servertest.MustCode(t, "create", r, http.StatusCreated)
		if c == a {
			for _, v := range []string{"v1", "v2"} {
				waitCache(t, env, gvr(v), servertest.RVOf(t, r))
			}
		}
		var out []string
		last := mustInt(servertest.RVOf(t, r))
		for i, s := range steps {
			p := fmt.Sprintf(base, s.version)
			r := c.Do(s.method, p+"/"+name+s.sub, s.ctype, []byte(s.body))
			o := r.Object()
			if md, ok := o["metadata"].(map[string]any); ok {
				delete(md, "uid")
				delete(md, "creationTimestamp")
				delete(md, "name")
				dropManagedFieldsTimes(md)
				if rv, ok := md["resourceVersion"].(string); ok {
					switch n := mustInt(rv); {
					case n == last:
						md["resourceVersion"] = "unchanged"
					case n > last:
						md["resourceVersion"], last = "written", n
					default:
						t.Fatalf("step %d: resourceVersion %d before %d", i, n, last)
					}
				}
			}
			b, _ := json.Marshal(o)
			b = bytes.ReplaceAll(b, []byte(name), []byte("NAME"))
			out = append(out, fmt.Sprintf("step %d: %d %s", i, r.Code, b))
		}
		return out
	}
	want := run(fromEtcd, "from-etcd")
	if got := guesses(ref); got.used != 0 {
		t.Fatalf("guesses used without a watch cache: %+v", got)
	}
	before := guesses(env)
	got := run(a, "from-cache")
	g := guesses(env).since(before)
	t.Logf("guesses: %+v", g)
	if g.used == 0 || g.stale != 0 {
		t.Errorf("guesses = %+v, want some used, none stale", g)
	}
	for i := range want {
		t.Log(want[i])
		if got[i] != want[i] {
			t.Errorf("from the cache %s\nfrom etcd      %s", got[i], want[i])
		}
	}
	// The stored values are the same too.
	st := servertest.RawStore(t, env)
	var stored [2]map[string]any
	for i, name := range []string{"from-etcd", "from-cache"} {
		kv, err := st.Get(context.Background(), "/registry/guess.objwatch.io/things/default/"+name)
		if err != nil {
			t.Fatal(err)
		}
		json.Unmarshal(kv.Value, &stored[i])
		md := stored[i]["metadata"].(map[string]any)
		delete(md, "uid")
		delete(md, "creationTimestamp")
		delete(md, "name")
		dropManagedFieldsTimes(md)
	}
	if a, b := fmt.Sprint(stored[0]), fmt.Sprint(stored[1]); a != b {
		t.Errorf("stored from the cache %s\nfrom etcd             %s", b, a)
	}
}

// dropManagedFieldsTimes removes the times of metadata md's managedFields
// entries: two runs of the same writes differ there when one crosses a
// second that the other does not.
func dropManagedFieldsTimes(md map[string]any) {
	entries, _ := md["managedFields"].([]any)
	for _, e := range entries {
		if m, ok := e.(map[string]any); ok {
			delete(m, "time")
		}
	}
}

// A delete that conflicts with concurrent patches retries from the state
// its failed write found, and still deletes. Patches go through the same
// server, which queues them on the key lock, so the conflicts counted here
// are the delete's: a patch that loses to the delete gets 404, not a
// conflict.
func TestDeleteRetryFromConflict(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	c := env.HTTPClient()
	for round := range 30 {
		name := fmt.Sprintf("del-%d", round)
		created := a.JSON("POST", servertest.CMs, servertest.CM(name, ""))
		servertest.MustCode(t, "create", created, http.StatusCreated)
		before := server.UpdateConflictReads(env.Server)
		stop := make(chan struct{})
		var patched atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for g := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					code, b, err := mergePatch(c, env.Config.Host+servertest.CMs+"/"+name, fmt.Sprintf(`{"data":{"g%d":"%d"}}`, g, i))
					if err != nil {
						errs <- err
						return
					}
					switch code {
					case http.StatusOK:
						patched.Add(1)
					case http.StatusNotFound:
						return
					default:
						errs <- fmt.Errorf("patch = %d %s", code, b)
						return
					}
				}
			})
		}
		for patched.Load() < 5 {
			time.Sleep(time.Millisecond)
		}
		del := a.JSON("DELETE", servertest.CMs+"/"+name, "")
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		servertest.MustCode(t, "delete", del, http.StatusOK)
		servertest.MustCode(t, "get after delete", a.JSON("GET", servertest.CMs+"/"+name, ""), http.StatusNotFound)
		if server.UpdateConflictReads(env.Server) > before {
			t.Logf("the delete of round %d conflicted and retried from the conflict's state", round)
			return
		}
	}
	t.Fatal("in 30 rounds no delete retried from a conflict's state")
}
