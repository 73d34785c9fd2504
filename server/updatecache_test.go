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
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd"
	"github.com/objwatch/objwatch/testenv"
)

var cmGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

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

// rawStore is a storage client on the server's etcd, for writes behind the
// server's back.
func rawStore(t *testing.T, env *testenv.Env) *etcd.Store {
	t.Helper()
	cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: []string{env.EtcdEndpoint}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	st, err := etcd.New(cli, nil)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// rewrite changes a stored ConfigMap's data.k behind the server's back and
// returns the new resourceVersion.
func rewrite(t *testing.T, st storage.Interface, name, value string) string {
	t.Helper()
	return rewriteWith(t, st, name, func(m map[string]any) { m["data"].(map[string]any)["k"] = value })
}

// rewriteWith changes a stored ConfigMap with f behind the server's back
// and returns the new resourceVersion.
func rewriteWith(t *testing.T, st storage.Interface, name string, f func(map[string]any)) string {
	t.Helper()
	return rewriteKey(t, st, "/registry/core/configmaps/default/"+name, f)
}

// rewriteKey changes the object stored at key with f behind the server's
// back and returns the new resourceVersion.
func rewriteKey(t *testing.T, st storage.Interface, key string, f func(map[string]any)) string {
	t.Helper()
	ctx := context.Background()
	kv, err := st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(kv.Value, &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	b, _ := json.Marshal(m)
	nkv, err := st.Update(ctx, key, b, kv.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	return strconv.FormatInt(nkv.ModRevision, 10)
}

func dataOf(r response) map[string]any {
	d, _ := r.object()["data"].(map[string]any)
	return d
}

func mustCode(t *testing.T, what string, r response, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s = %d %s, want %d", what, r.code, truncate(r.body), code)
	}
}

func rvNum(t *testing.T, r response) int64 {
	t.Helper()
	n, err := strconv.ParseInt(rvOf(t, r), 10, 64)
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
	a := newAPI(t, env)
	t.Cleanup(a.c.CloseIdleConnections)
	created := a.json("POST", cms, cm("seq", ""))
	mustCode(t, "create", created, http.StatusCreated)
	waitCache(t, env, cmGVR, rvOf(t, created))

	resp, err := a.c.Get(env.Config.Host + cms + "?watch=true&resourceVersion=" + rvOf(t, created))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	evs := newEvents(resp.Body)

	before := guesses(env)
	const n = 40
	rv, last := rvNum(t, created), created
	var want []response
	for i := range n {
		var r response
		v := fmt.Sprint("v", i)
		switch i % 4 {
		case 0:
			r = a.do("PATCH", cms+"/seq", "application/merge-patch+json", []byte(`{"data":{"k":"`+v+`"}}`))
		case 1:
			r = a.do("PATCH", cms+"/seq", "application/json-patch+json", []byte(`[{"op":"replace","path":"/data/k","value":"`+v+`"}]`))
		case 2:
			r = a.do("PATCH", cms+"/seq", "application/strategic-merge-patch+json", []byte(`{"metadata":{"labels":{"i":"`+v+`"}},"data":{"k":"`+v+`"}}`))
		case 3:
			// An update pinned at the last resourceVersion.
			o := last.object()
			o["data"].(map[string]any)["k"] = v
			b, _ := json.Marshal(o)
			r = a.do("PUT", cms+"/seq", "application/json", b)
		}
		mustCode(t, fmt.Sprint("write ", i), r, http.StatusOK)
		if got := dataOf(r)["k"]; got != v {
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
		r := a.do("PATCH", cms+"/seq", "application/merge-patch+json", []byte(`{"data":{"k":"v39"}}`))
		mustCode(t, "no-op patch", r, http.StatusOK)
		if rvOf(t, r) != rvOf(t, last) {
			t.Fatalf("no-op patch: resourceVersion %s, want %s unchanged", rvOf(t, r), rvOf(t, last))
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
	if g := a.json("GET", cms+"/seq", ""); !bytes.Equal(g.body, last.body) {
		t.Errorf("GET after the writes = %s\nwant the last answer %s", g.body, last.body)
	}

	// Every write is one MODIFIED event carrying what the write answered.
	for i, w := range want {
		ev, err := evs.next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		var e struct {
			Type   string
			Object map[string]any
		}
		if err := json.Unmarshal(ev.line, &e); err != nil {
			t.Fatal(err)
		}
		if e.Type != "MODIFIED" || !reflect.DeepEqual(e.Object, w.object()) {
			t.Fatalf("event %d = %s %s\nwant MODIFIED %s", i, e.Type, ev.line, w.body)
		}
	}
}

// A guess older than etcd never decides an answer: preconditions, patch
// tests and "nothing changed" are checked against etcd, and the write
// conditional on the guess's revision fails and is redone.
func TestUpdateGuessStale(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	t.Cleanup(a.c.CloseIdleConnections)
	st := rawStore(t, env)

	// setup creates name with data.k=v1, holds the server's guesses of it
	// there, and then changes it to v2 behind the server's back.
	setup := func(t *testing.T, name string) (guessRV, etcdRV string) {
		server.ResetUpdateGuessKeys(env.Server)
		r := a.json("POST", cms, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"`+name+`"},"data":{"k":"v1"}}`)
		mustCode(t, "create", r, http.StatusCreated)
		waitCache(t, env, cmGVR, rvOf(t, r))
		t.Cleanup(server.FreezeUpdateGuess(env.Server, cmGVR, "default", name))
		return rvOf(t, r), rewrite(t, st, name, "v2")
	}
	put := func(name, rv, value string) response {
		return a.json("PUT", cms+"/"+name, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"`+name+`","resourceVersion":"`+rv+`"},"data":{"k":"`+value+`"}}`)
	}
	check := func(t *testing.T, before guessCounts, want guessCounts) {
		t.Helper()
		if got := guesses(env).since(before); got != want {
			t.Errorf("guesses = %+v, want %+v", got, want)
		}
	}

	t.Run("precondition at etcd's revision", func(t *testing.T) {
		_, etcdRV := setup(t, "pre-new")
		before := guesses(env)
		r := put("pre-new", etcdRV, "v3")
		mustCode(t, "PUT at etcd's resourceVersion", r, http.StatusOK)
		if dataOf(r)["k"] != "v3" || rvNum(t, r) <= mustInt(etcdRV) {
			t.Errorf("PUT = %s, want v3 after %s", r.body, etcdRV)
		}
		check(t, before, guessCounts{used: 1, stale: 1, rechecked: 1})
	})
	t.Run("precondition at the guess's revision", func(t *testing.T) {
		guessRV, etcdRV := setup(t, "pre-old")
		before := guesses(env)
		r := put("pre-old", guessRV, "v3")
		mustCode(t, "PUT at the cached resourceVersion", r, http.StatusConflict)
		if g := a.json("GET", cms+"/pre-old", ""); dataOf(g)["k"] != "v2" || rvOf(t, g) != etcdRV {
			t.Errorf("after the conflict: %s, want v2 at %s", g.body, etcdRV)
		}
		// The write on the guess conflicted; then etcd's state fails the
		// precondition.
		check(t, before, guessCounts{used: 1, stale: 1})
	})
	t.Run("no-op on the guess is a change in etcd", func(t *testing.T) {
		_, etcdRV := setup(t, "noop-guess")
		before := guesses(env)
		r := a.do("PATCH", cms+"/noop-guess", "application/merge-patch+json", []byte(`{"data":{"k":"v1"}}`))
		mustCode(t, "PATCH", r, http.StatusOK)
		if dataOf(r)["k"] != "v1" || rvNum(t, r) <= mustInt(etcdRV) {
			t.Errorf("PATCH back to the cached value = %s, want v1 written after %s", r.body, etcdRV)
		}
		if g := a.json("GET", cms+"/noop-guess", ""); !bytes.Equal(g.body, r.body) {
			t.Errorf("GET = %s, want %s", g.body, r.body)
		}
		check(t, before, guessCounts{used: 1, stale: 1, rechecked: 1})
	})
	t.Run("change on the guess is a no-op in etcd", func(t *testing.T) {
		_, etcdRV := setup(t, "noop-etcd")
		before := guesses(env)
		r := a.do("PATCH", cms+"/noop-etcd", "application/merge-patch+json", []byte(`{"data":{"k":"v2"}}`))
		mustCode(t, "PATCH", r, http.StatusOK)
		if dataOf(r)["k"] != "v2" || rvOf(t, r) != etcdRV {
			t.Errorf("PATCH to the stored value = %s, want v2 unchanged at %s", r.body, etcdRV)
		}
		if rev, _ := st.Revision(context.Background()); strconv.FormatInt(rev, 10) != etcdRV {
			t.Errorf("etcd revision %d after a no-op, want %s", rev, etcdRV)
		}
		check(t, before, guessCounts{used: 1, stale: 1})
	})
	t.Run("patch test fails on the guess", func(t *testing.T) {
		setup(t, "test-guess")
		before := guesses(env)
		r := a.do("PATCH", cms+"/test-guess", "application/json-patch+json", []byte(`[{"op":"test","path":"/data/k","value":"v2"},{"op":"replace","path":"/data/k","value":"v3"}]`))
		mustCode(t, "PATCH testing etcd's value", r, http.StatusOK)
		if dataOf(r)["k"] != "v3" {
			t.Errorf("PATCH = %s, want v3", r.body)
		}
		check(t, before, guessCounts{used: 1, stale: 1, rechecked: 1})
	})
	t.Run("patch test fails in etcd", func(t *testing.T) {
		setup(t, "test-etcd")
		before := guesses(env)
		r := a.do("PATCH", cms+"/test-etcd", "application/json-patch+json", []byte(`[{"op":"test","path":"/data/k","value":"v1"},{"op":"replace","path":"/data/k","value":"v3"}]`))
		mustCode(t, "PATCH testing the cached value", r, http.StatusUnprocessableEntity)
		check(t, before, guessCounts{used: 1, stale: 1})
	})
	t.Run("warnings once", func(t *testing.T) {
		setup(t, "warn")
		r := a.do("PATCH", cms+"/warn?fieldValidation=Warn", "application/merge-patch+json", []byte(`{"bogus":1,"data":{"k":"v3"}}`))
		mustCode(t, "PATCH", r, http.StatusOK)
		if w := r.header.Values("Warning"); len(w) != 1 || !strings.Contains(w[0], "bogus") {
			t.Errorf("warnings = %q, want one about bogus", w)
		}
	})
	t.Run("deleted in etcd", func(t *testing.T) {
		setup(t, "gone")
		if _, err := st.Delete(context.Background(), "/registry/core/configmaps/default/gone", 0); err != nil {
			t.Fatal(err)
		}
		before := guesses(env)
		r := a.do("PATCH", cms+"/gone", "application/merge-patch+json", []byte(`{"data":{"k":"v3"}}`))
		mustCode(t, "PATCH", r, http.StatusNotFound)
		check(t, before, guessCounts{used: 1})
	})
	t.Run("last finalizer gone on the guess only", func(t *testing.T) {
		server.ResetUpdateGuessKeys(env.Server)
		r := a.json("POST", cms, cm("fin", `,"finalizers":["example.com/a"]`))
		mustCode(t, "create", r, http.StatusCreated)
		r = a.json("DELETE", cms+"/fin", "")
		mustCode(t, "delete", r, http.StatusOK)
		waitCache(t, env, cmGVR, rvOf(t, r))
		t.Cleanup(server.FreezeUpdateGuess(env.Server, cmGVR, "default", "fin"))
		// Another finalizer comes behind the server's back: removing the
		// first does not complete the deletion.
		rewriteWith(t, st, "fin", func(m map[string]any) {
			md := m["metadata"].(map[string]any)
			md["finalizers"] = []any{"example.com/a", "example.com/b"}
		})
		before := guesses(env)
		r = a.do("PATCH", cms+"/fin", "application/json-patch+json", []byte(`[{"op":"remove","path":"/metadata/finalizers/0"}]`))
		mustCode(t, "PATCH", r, http.StatusOK)
		g := a.json("GET", cms+"/fin", "")
		mustCode(t, "GET after removing a finalizer", g, http.StatusOK)
		if f := g.object()["metadata"].(map[string]any)["finalizers"]; fmt.Sprint(f) != "[example.com/b]" {
			t.Errorf("finalizers = %v, want [example.com/b]", f)
		}
		check(t, before, guessCounts{used: 1, stale: 1})
		// Removing the last one completes the deletion.
		r = a.do("PATCH", cms+"/fin", "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`))
		mustCode(t, "PATCH", r, http.StatusOK)
		mustCode(t, "GET after removing the last finalizer", a.json("GET", cms+"/fin", ""), http.StatusNotFound)
	})
	t.Run("not in the cache", func(t *testing.T) {
		server.ResetUpdateGuessKeys(env.Server)
		t.Cleanup(server.FreezeUpdateGuess(env.Server, cmGVR, "default", "absent"))
		mustCode(t, "create", a.json("POST", cms, cm("absent", "")), http.StatusCreated)
		before := guesses(env)
		r := a.do("PATCH", cms+"/absent", "application/merge-patch+json", []byte(`{"data":{"k":"v3"}}`))
		mustCode(t, "PATCH", r, http.StatusOK)
		check(t, before, guessCounts{})
	})
	t.Run("dry run", func(t *testing.T) {
		_, etcdRV := setup(t, "dry")
		before := guesses(env)
		r := a.do("PATCH", cms+"/dry?dryRun=All", "application/merge-patch+json", []byte(`{"data":{"x":"y"}}`))
		mustCode(t, "PATCH", r, http.StatusOK)
		if dataOf(r)["k"] != "v2" || rvOf(t, r) != etcdRV {
			t.Errorf("dry-run PATCH = %s, want etcd's v2 at %s", r.body, etcdRV)
		}
		check(t, before, guessCounts{})
	})
}

// Without a watch cache, updates read etcd.
func TestUpdateGuessNeedsCache(t *testing.T) {
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = true }))
	a := newAPI(t, env)
	t.Cleanup(a.c.CloseIdleConnections)
	mustCode(t, "create", a.json("POST", cms, cm("nocache", "")), http.StatusCreated)
	before := guesses(env)
	for i := range 3 {
		r := a.do("PATCH", cms+"/nocache", "application/merge-patch+json", []byte(fmt.Sprintf(`{"data":{"k":"%d"}}`, i)))
		mustCode(t, "PATCH", r, http.StatusOK)
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

// Two servers on one etcd: each one's cache lags the other's writes, which
// a resourceVersion precondition exposes.
func TestUpdateGuessTwoServers(t *testing.T) {
	ep := testenv.StartEtcd(t)
	envA, envB := testenv.Start(t, testenv.WithEtcd(ep)), testenv.Start(t, testenv.WithEtcd(ep))
	a, b := newAPI(t, envA), newAPI(t, envB)
	t.Cleanup(a.c.CloseIdleConnections)
	t.Cleanup(b.c.CloseIdleConnections)
	created := a.json("POST", cms, cm("two", ""))
	mustCode(t, "create", created, http.StatusCreated)
	waitCache(t, envA, cmGVR, rvOf(t, created))

	before := guesses(envA, envB)
	old := rvOf(t, created)
	for i := range 30 {
		// Guesses of the key pause after a stale one: forget that, so
		// that every round may guess.
		server.ResetUpdateGuessKeys(envA.Server)
		r := b.do("PATCH", cms+"/two", "application/merge-patch+json", []byte(fmt.Sprintf(`{"data":{"b":"%d"}}`, i)))
		mustCode(t, "PATCH through B", r, http.StatusOK)
		cur := rvOf(t, r)
		o := r.object()
		o["data"].(map[string]any)["a"] = fmt.Sprint(i)
		body, _ := json.Marshal(o)
		r = a.do("PUT", cms+"/two", "application/json", body)
		mustCode(t, fmt.Sprintf("PUT through A at B's resourceVersion %s", cur), r, http.StatusOK)
		o["metadata"].(map[string]any)["resourceVersion"] = old
		body, _ = json.Marshal(o)
		mustCode(t, fmt.Sprintf("PUT through A at %s", old), a.do("PUT", cms+"/two", "application/json", body), http.StatusConflict)
		old = rvOf(t, r)
	}
	t.Logf("guesses: %+v", guesses(envA, envB).since(before))
}

// Concurrent patches of one object through two servers lose nothing.
func TestUpdateGuessConcurrentPatches(t *testing.T) {
	ep := testenv.StartEtcd(t)
	envs := []*testenv.Env{testenv.Start(t, testenv.WithEtcd(ep)), testenv.Start(t, testenv.WithEtcd(ep))}
	clients := []*http.Client{envs[0].HTTPClient(), envs[1].HTTPClient()}
	a := newAPI(t, envs[0])
	created := a.json("POST", cms, cm("conc", ""))
	mustCode(t, "create", created, http.StatusCreated)
	waitCache(t, envs[0], cmGVR, rvOf(t, created))
	waitCache(t, envs[1], cmGVR, rvOf(t, created))

	resp, err := a.c.Get(envs[0].Config.Host + cms + "?watch=true&resourceVersion=" + rvOf(t, created))
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
				code, b, err := mergePatch(c, env.Config.Host+cms+"/conc", fmt.Sprintf(`{"data":{"g%d-%d":"x"}}`, g, i))
				if err != nil {
					errs <- err
					return
				}
				if code != http.StatusOK {
					errs <- fmt.Errorf("patch %d of %d = %d %s", i, g, code, b)
					return
				}
				rvs <- resourceVersion(b)
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
	final := a.json("GET", cms+"/conc", "")
	data := dataOf(final)
	for g := range goroutines {
		for i := range patches {
			if data[fmt.Sprintf("g%d-%d", g, i)] != "x" {
				t.Errorf("patch %d of goroutine %d lost", i, g)
			}
		}
	}
	// The watch has each patch once, in order, ending with the final state.
	evs := newEvents(resp.Body)
	prev := mustInt(rvOf(t, created))
	for i := range goroutines * patches {
		ev, err := evs.next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		n := mustInt(ev.RV)
		if ev.Type != "MODIFIED" || n <= prev || !seen[ev.RV] {
			t.Fatalf("event %d = %s at %s after %d", i, ev.Type, ev.RV, prev)
		}
		prev = n
	}
	if strconv.FormatInt(prev, 10) != rvOf(t, final) {
		t.Errorf("last event at %d, object at %s", prev, rvOf(t, final))
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
// and stored values reading etcd gives.
func TestUpdateGuessCustomResourceVersions(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	t.Cleanup(a.c.CloseIdleConnections)
	mustCode(t, "create CRD", a.json("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", versionsCRD), http.StatusCreated)
	base := "/apis/guess.objwatch.io/%s/namespaces/default/things"
	v1, v2 := fmt.Sprintf(base, "v1"), fmt.Sprintf(base, "v2")
	oaEventually(t, 10*time.Second, func() bool {
		return a.json("GET", v1, "").code == http.StatusOK && a.json("GET", v2, "").code == http.StatusOK
	})
	// The caches exist once something reads from them.
	for _, p := range []string{v1, v2} {
		mustCode(t, "list", a.json("GET", p+"?resourceVersion=0", ""), http.StatusOK)
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
	// run applies the steps to a new object and returns the answers, with
	// what differs between objects taken out.
	run := func(name string) []string {
		r := a.json("POST", v1, `{"apiVersion":"guess.objwatch.io/v1","kind":"Thing","metadata":{"name":"`+name+`"},"spec":{"size":1}}`)
		mustCode(t, "create", r, http.StatusCreated)
		for _, v := range []string{"v1", "v2"} {
			waitCache(t, env, gvr(v), rvOf(t, r))
		}
		var out []string
		last := mustInt(rvOf(t, r))
		for i, s := range steps {
			p := fmt.Sprintf(base, s.version)
			r := a.do(s.method, p+"/"+name+s.sub, s.ctype, []byte(s.body))
			o := r.object()
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
			out = append(out, fmt.Sprintf("step %d: %d %s", i, r.code, b))
		}
		return out
	}
	restore := server.SetUpdateGuesses(env.Server, false)
	before := guesses(env)
	want := run("from-etcd")
	if got := guesses(env).since(before); got.used != 0 {
		t.Fatalf("guesses used while off: %+v", got)
	}
	restore()
	before = guesses(env)
	got := run("from-cache")
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
	st := rawStore(t, env)
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

// BenchmarkPatchOneObject patches one ConfigMap sequentially through one
// server, with the update starting from the watch cache (guess) or from an
// etcd read (etcd), and with watchers of the ConfigMaps draining events.
func BenchmarkPatchOneObject(b *testing.B) {
	env := testenv.Start(b)
	c := env.HTTPClient()
	defer c.CloseIdleConnections()
	do := func(method, path, ctype, body string) []byte {
		req, _ := http.NewRequest(method, env.Config.Host+path, strings.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			b.Fatalf("%s %s = %d %s", method, path, resp.StatusCode, out)
		}
		return out
	}
	do("POST", cms, "application/json", cm("bench", ""))
	for _, watchers := range []int{0, 100} {
		var wg sync.WaitGroup
		var bodies []io.Closer
		for range watchers {
			resp, err := c.Get(env.Config.Host + cms + "?watch=true")
			if err != nil {
				b.Fatal(err)
			}
			bodies = append(bodies, resp.Body)
			wg.Go(func() { io.Copy(io.Discard, resp.Body) })
		}
		for _, mode := range []string{"guess", "etcd"} {
			b.Run(fmt.Sprintf("watchers=%d/%s", watchers, mode), func(b *testing.B) {
				defer server.SetUpdateGuesses(env.Server, mode == "guess")()
				before := guesses(env)
				i := 0
				for b.Loop() {
					i++
					do("PATCH", cms+"/bench", "application/merge-patch+json", fmt.Sprintf(`{"data":{"k":"%d"}}`, i))
				}
				g := guesses(env).since(before)
				b.ReportMetric(float64(g.used)/float64(i), "guesses/op")
				b.ReportMetric(float64(g.stale)/float64(i), "stale/op")
			})
		}
		for _, body := range bodies {
			body.Close()
		}
		wg.Wait()
	}
}

// An update queued behind another update of the same object through the
// same server starts from what that one stored, without waiting for the
// cache; a stale one (the object changed elsewhere meanwhile) loses
// nothing, and a change that is a no-op only against it is written.
func TestUpdateGuessFromLastWrite(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	t.Cleanup(a.c.CloseIdleConnections)
	st := rawStore(t, env)
	ctx := context.Background()

	// queued sends patch to name while an update turn that stored
	// stored is held, once the patch waits for its turn.
	queued := func(t *testing.T, name string, stored storage.KeyValue, patch string) response {
		t.Helper()
		waiters, release := server.HoldUpdateTurn(env.Server, cmGVR, "default", name, stored)
		done := make(chan response, 1)
		go func() {
			done <- a.do("PATCH", cms+"/"+name, "application/merge-patch+json", []byte(patch))
		}()
		deadline := time.Now().Add(10 * time.Second)
		for waiters() < 1 {
			if time.Now().After(deadline) {
				release()
				t.Fatal("the patch never queued for its turn")
			}
			time.Sleep(time.Millisecond)
		}
		release()
		return <-done
	}
	create := func(t *testing.T, name string) storage.KeyValue {
		t.Helper()
		r := a.json("POST", cms, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"`+name+`"},"data":{"k":"v1"}}`)
		mustCode(t, "create", r, http.StatusCreated)
		kv, err := st.Get(ctx, "/registry/core/configmaps/default/"+name)
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	from := func() int64 { return server.UpdateGuessesFromLastWrite(env.Server) }

	t.Run("current", func(t *testing.T) {
		kv := create(t, "last-current")
		before, g0 := from(), guesses(env)
		r := queued(t, "last-current", kv, `{"data":{"p":"1"}}`)
		mustCode(t, "patch", r, http.StatusOK)
		if d := dataOf(r); d["k"] != "v1" || d["p"] != "1" {
			t.Fatalf("data = %v", d)
		}
		if n := from() - before; n != 1 {
			t.Fatalf("guesses from the last write = %d, want 1", n)
		}
		if g := guesses(env).since(g0); g.stale != 0 || g.rechecked != 0 {
			t.Fatalf("guesses = %+v, want none stale or rechecked", g)
		}
	})
	t.Run("stale", func(t *testing.T) {
		kv := create(t, "last-stale")
		rewrite(t, st, "last-stale", "v2")
		g0 := guesses(env)
		r := queued(t, "last-stale", kv, `{"data":{"p":"1"}}`)
		mustCode(t, "patch", r, http.StatusOK)
		if d := dataOf(r); d["k"] != "v2" || d["p"] != "1" {
			t.Fatalf("data = %v, want the change made elsewhere kept", d)
		}
		if g := guesses(env).since(g0); g.stale != 1 {
			t.Fatalf("guesses = %+v, want one stale", g)
		}
	})
	t.Run("no-op only against the stale guess", func(t *testing.T) {
		kv := create(t, "last-noop")
		rv := rewrite(t, st, "last-noop", "v2")
		r := queued(t, "last-noop", kv, `{"data":{"k":"v1"}}`)
		mustCode(t, "patch", r, http.StatusOK)
		if d := dataOf(r); d["k"] != "v1" {
			t.Fatalf("data = %v, want k=v1 written", d)
		}
		if got, was := rvNum(t, r), mustInt(rv); got <= was {
			t.Fatalf("resourceVersion %d after the rewrite's %d: the patch was not written", got, was)
		}
	})
	t.Run("queued patches", func(t *testing.T) {
		create(t, "last-many")
		before := from()
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 10 {
					r := a.do("PATCH", cms+"/last-many", "application/merge-patch+json", fmt.Appendf(nil, `{"data":{"g%d-%d":"x"}}`, g, i))
					if r.code != http.StatusOK {
						t.Errorf("patch = %d %s", r.code, truncate(r.body))
					}
				}
			})
		}
		wg.Wait()
		r := a.json("GET", cms+"/last-many", "")
		if d := dataOf(r); len(d) != 1+80 {
			t.Fatalf("%d data keys after 80 patches, want 81", len(d))
		}
		if from() == before {
			t.Fatal("no patch started from the one queued before it")
		}
	})
}

// A delete that conflicts with concurrent patches retries from the state
// its failed write found, and still deletes. Patches go through the same
// server, which queues them on the key lock, so the conflicts counted here
// are the delete's: a patch that loses to the delete gets 404, not a
// conflict.
func TestDeleteRetryFromConflict(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	c := env.HTTPClient()
	for round := range 30 {
		name := fmt.Sprintf("del-%d", round)
		created := a.json("POST", cms, cm(name, ""))
		mustCode(t, "create", created, http.StatusCreated)
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
					code, b, err := mergePatch(c, env.Config.Host+cms+"/"+name, fmt.Sprintf(`{"data":{"g%d":"%d"}}`, g, i))
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
		del := a.json("DELETE", cms+"/"+name, "")
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		mustCode(t, "delete", del, http.StatusOK)
		mustCode(t, "get after delete", a.json("GET", cms+"/"+name, ""), http.StatusNotFound)
		if server.UpdateConflictReads(env.Server) > before {
			t.Logf("the delete of round %d conflicted and retried from the conflict's state", round)
			return
		}
	}
	t.Fatal("in 30 rounds no delete retried from a conflict's state")
}
