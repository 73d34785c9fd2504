package objects_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
)

// The update guesses (updatecache.go), through the service itself: each
// mutation stands for the patch or update the endpoints would make of a
// request (a merge patch unpinned, a PUT pinned at its resourceVersion, a
// JSON patch's test op as a failing mutation).

// guessCounts is the guesses part of Counts.
type guessCounts struct{ used, stale, rechecked int64 }

func guessesOf(ss ...*objects.Service) guessCounts {
	var g guessCounts
	for _, s := range ss {
		c := s.Counts()
		g = guessCounts{g.used + c.GuessesUsed, g.stale + c.GuessesStale, g.rechecked + c.GuessesRechecked}
	}
	return g
}

func (g guessCounts) since(before guessCounts) guessCounts {
	return guessCounts{g.used - before.used, g.stale - before.stale, g.rechecked - before.rechecked}
}

// guessService is a service with update guesses on st (Config.Verify
// checks every guess against etcd).
func guessService(t testing.TB, st storage.Interface) (*objects.Service, *registry.Resource) {
	t.Helper()
	reg := registry.New()
	s, err := objects.New(objects.Config{Storage: st, Registry: reg, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	res, _ := reg.Get(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	return s, res
}

// objReq is a request for the ConfigMap name in namespace ns.
func objReq(res *registry.Resource, verb, name string) *objects.Request {
	return &objects.Request{Verb: verb, Resource: res, Namespace: "ns", Name: name}
}

func rvOf(t testing.TB, o *unstructured.Unstructured) int64 {
	t.Helper()
	n, err := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitCache waits until s's watch cache of res has revision rev.
func waitCache(t testing.TB, s *objects.Service, res *registry.Resource, rev int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Caches().For(res).WaitFor(ctx, rev); err != nil {
		t.Fatalf("watch cache never reached %d: %v", rev, err)
	}
}

// rewriteData sets data.k to v behind the service's back.
func rewriteData(t testing.TB, st storage.Interface, res *registry.Resource, name, v string) int64 {
	t.Helper()
	return etcdtest.Rewrite(t, st, res.Key("ns", name), func(m map[string]any) { m["data"].(map[string]any)["k"] = v })
}

// putAt is an update pinned at rv that sets data.k to v.
func putAt(rv int64, k, v string) objects.Mutation {
	return func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		unstructured.SetNestedField(cur.Object, v, "data", k)
		cur.SetResourceVersion(strconv.FormatInt(rv, 10))
		return cur, nil
	}
}

// testThenSet is a JSON patch: test data.k is want, then set it to v.
func testThenSet(want, v string) objects.Mutation {
	return func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		if got, _, _ := unstructured.NestedString(cur.Object, "data", "k"); got != want {
			return nil, apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, cur.GetName(), nil)
		}
		return setData("k", v)(cur)
	}
}

func dataK(o *unstructured.Unstructured) string {
	v, _, _ := unstructured.NestedString(o.Object, "data", "k")
	return v
}

// A guess older than etcd never decides an answer: preconditions, patch
// tests and "nothing changed" are checked against etcd, and the write
// conditional on the guess's revision fails and is redone.
func TestUpdateGuessStale(t *testing.T) {
	st := etcdtest.Start(t)
	s, res := guessService(t, st)
	ctx := context.Background()
	create := func(t *testing.T, name string, o *unstructured.Unstructured) int64 {
		t.Helper()
		out, err := s.Create(ctx, objReq(res, "create", ""), o, objects.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return rvOf(t, out.Object)
	}
	// setup creates name with data.k=v1, holds the service's guesses of it
	// there, and then changes it to v2 behind the service's back.
	setup := func(t *testing.T, name string) (guessRV, etcdRV int64) {
		objects.ResetUpdateGuessKeys(s)
		rv := create(t, name, configMap(name, map[string]any{"k": "v1"}))
		waitCache(t, s, res, rv)
		t.Cleanup(objects.FreezeUpdateGuess(s, res, "ns", name))
		return rv, rewriteData(t, st, res, name, "v2")
	}
	update := func(name string, opts objects.WriteOptions, m objects.Mutation) (objects.Result, error) {
		return s.Update(ctx, objReq(res, "patch", name), opts, m)
	}
	check := func(t *testing.T, before, want guessCounts) {
		t.Helper()
		if got := guessesOf(s).since(before); got != want {
			t.Errorf("guesses = %+v, want %+v", got, want)
		}
	}

	t.Run("precondition at etcd's revision", func(t *testing.T) {
		_, etcdRV := setup(t, "pre-new")
		before := guessesOf(s)
		out, err := update("pre-new", objects.WriteOptions{}, putAt(etcdRV, "k", "v3"))
		if err != nil || dataK(out.Object) != "v3" || rvOf(t, out.Object) <= etcdRV {
			t.Errorf("update at etcd's resourceVersion = %v, %v; want v3 after %d", out.Object, err, etcdRV)
		}
		check(t, before, guessCounts{used: 1, stale: 1, rechecked: 1})
	})
	t.Run("precondition at the guess's revision", func(t *testing.T) {
		guessRV, etcdRV := setup(t, "pre-old")
		before := guessesOf(s)
		if _, err := update("pre-old", objects.WriteOptions{}, putAt(guessRV, "k", "v3")); !apierrors.IsConflict(err) {
			t.Fatalf("update at the cached resourceVersion = %v, want a conflict", err)
		}
		if g, err := s.Get(ctx, objReq(res, "get", "pre-old"), nil); err != nil || dataK(g) != "v2" || rvOf(t, g) != etcdRV {
			t.Errorf("after the conflict: %v, %v; want v2 at %d", g, err, etcdRV)
		}
		// The write on the guess conflicted; then etcd's state fails the
		// precondition.
		check(t, before, guessCounts{used: 1, stale: 1})
	})
	t.Run("no-op on the guess is a change in etcd", func(t *testing.T) {
		_, etcdRV := setup(t, "noop-guess")
		before := guessesOf(s)
		out, err := update("noop-guess", objects.WriteOptions{}, setData("k", "v1"))
		if err != nil || dataK(out.Object) != "v1" || rvOf(t, out.Object) <= etcdRV {
			t.Errorf("update back to the cached value = %v, %v; want v1 written after %d", out.Object, err, etcdRV)
		}
		check(t, before, guessCounts{used: 1, stale: 1, rechecked: 1})
	})
	t.Run("change on the guess is a no-op in etcd", func(t *testing.T) {
		_, etcdRV := setup(t, "noop-etcd")
		before := guessesOf(s)
		out, err := update("noop-etcd", objects.WriteOptions{}, setData("k", "v2"))
		if err != nil || dataK(out.Object) != "v2" || rvOf(t, out.Object) != etcdRV {
			t.Errorf("update to the stored value = %v, %v; want v2 unchanged at %d", out.Object, err, etcdRV)
		}
		if rev, _ := st.Revision(ctx); rev != etcdRV {
			t.Errorf("etcd revision %d after a no-op, want %d", rev, etcdRV)
		}
		check(t, before, guessCounts{used: 1, stale: 1})
	})
	t.Run("patch test fails on the guess", func(t *testing.T) {
		setup(t, "test-guess")
		before := guessesOf(s)
		out, err := update("test-guess", objects.WriteOptions{}, testThenSet("v2", "v3"))
		if err != nil || dataK(out.Object) != "v3" {
			t.Errorf("update testing etcd's value = %v, %v; want v3", out.Object, err)
		}
		check(t, before, guessCounts{used: 1, stale: 1, rechecked: 1})
	})
	t.Run("patch test fails in etcd", func(t *testing.T) {
		setup(t, "test-etcd")
		before := guessesOf(s)
		if _, err := update("test-etcd", objects.WriteOptions{}, testThenSet("v1", "v3")); !apierrors.IsInvalid(err) {
			t.Errorf("update testing the cached value = %v, want 422", err)
		}
		check(t, before, guessCounts{used: 1, stale: 1})
	})
	t.Run("warnings once", func(t *testing.T) {
		setup(t, "warn")
		out, err := update("warn", objects.WriteOptions{FieldValidation: "Warn"}, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
			cur.Object["bogus"] = int64(1)
			return setData("k", "v3")(cur)
		})
		if err != nil {
			t.Fatal(err)
		}
		if w := out.Warnings; len(w) != 1 || !strings.Contains(w[0], "bogus") {
			t.Errorf("warnings = %q, want one about bogus", w)
		}
	})
	t.Run("deleted in etcd", func(t *testing.T) {
		setup(t, "gone")
		if _, err := st.Delete(ctx, res.Key("ns", "gone"), 0); err != nil {
			t.Fatal(err)
		}
		before := guessesOf(s)
		if _, err := update("gone", objects.WriteOptions{}, setData("k", "v3")); !apierrors.IsNotFound(err) {
			t.Errorf("update = %v, want 404", err)
		}
		check(t, before, guessCounts{used: 1})
	})
	t.Run("last finalizer gone on the guess only", func(t *testing.T) {
		objects.ResetUpdateGuessKeys(s)
		o := configMap("fin", nil)
		o.SetFinalizers([]string{"example.com/a"})
		create(t, "fin", o)
		del, err := s.Delete(ctx, objReq(res, "delete", "fin"), &metav1.DeleteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitCache(t, s, res, rvOf(t, del.Object))
		t.Cleanup(objects.FreezeUpdateGuess(s, res, "ns", "fin"))
		// Another finalizer comes behind the service's back: removing the
		// first does not complete the deletion.
		etcdtest.Rewrite(t, st, res.Key("ns", "fin"), func(m map[string]any) {
			m["metadata"].(map[string]any)["finalizers"] = []any{"example.com/a", "example.com/b"}
		})
		before := guessesOf(s)
		if _, err := update("fin", objects.WriteOptions{}, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
			cur.SetFinalizers(cur.GetFinalizers()[1:]) // the JSON patch's remove of /metadata/finalizers/0
			cur.SetResourceVersion("")
			return cur, nil
		}); err != nil {
			t.Fatal(err)
		}
		g, err := s.Get(ctx, objReq(res, "get", "fin"), nil)
		if err != nil {
			t.Fatalf("get after removing a finalizer: %v", err)
		}
		if f := g.GetFinalizers(); fmt.Sprint(f) != "[example.com/b]" {
			t.Errorf("finalizers = %v, want [example.com/b]", f)
		}
		check(t, before, guessCounts{used: 1, stale: 1})
		// Removing the last one completes the deletion.
		if _, err := update("fin", objects.WriteOptions{}, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
			cur.SetFinalizers(nil)
			cur.SetResourceVersion("")
			return cur, nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, objReq(res, "get", "fin"), nil); !apierrors.IsNotFound(err) {
			t.Errorf("get after removing the last finalizer = %v, want 404", err)
		}
	})
	t.Run("not in the cache", func(t *testing.T) {
		objects.ResetUpdateGuessKeys(s)
		s.Caches().For(res) // the cache exists to be frozen
		t.Cleanup(objects.FreezeUpdateGuess(s, res, "ns", "absent"))
		create(t, "absent", configMap("absent", nil))
		before := guessesOf(s)
		if _, err := update("absent", objects.WriteOptions{}, setData("k", "v3")); err != nil {
			t.Fatal(err)
		}
		check(t, before, guessCounts{})
	})
	t.Run("dry run", func(t *testing.T) {
		_, etcdRV := setup(t, "dry")
		before := guessesOf(s)
		out, err := update("dry", objects.WriteOptions{DryRun: true}, setData("x", "y"))
		if err != nil || dataK(out.Object) != "v2" || rvOf(t, out.Object) != etcdRV {
			t.Errorf("dry-run update = %v, %v; want etcd's v2 at %d", out.Object, err, etcdRV)
		}
		check(t, before, guessCounts{})
	})
}

// Two services on one etcd: each one's cache lags the other's writes, which
// a resourceVersion precondition exposes.
func TestUpdateGuessTwoServers(t *testing.T) {
	st := etcdtest.Start(t)
	a, res := guessService(t, st)
	b, _ := guessService(t, st)
	ctx := context.Background()
	created, err := a.Create(ctx, objReq(res, "create", ""), configMap("two", nil), objects.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitCache(t, a, res, rvOf(t, created.Object))

	before := guessesOf(a, b)
	old := rvOf(t, created.Object)
	for i := range 30 {
		// Guesses of the key pause after a stale one: forget that, so
		// that every round may guess.
		objects.ResetUpdateGuessKeys(a)
		r, err := b.Update(ctx, objReq(res, "patch", "two"), objects.WriteOptions{}, setData("b", fmt.Sprint(i)))
		if err != nil {
			t.Fatalf("patch through B: %v", err)
		}
		cur := rvOf(t, r.Object)
		r, err = a.Update(ctx, objReq(res, "update", "two"), objects.WriteOptions{}, putAt(cur, "a", fmt.Sprint(i)))
		if err != nil {
			t.Fatalf("update through A at B's resourceVersion %d: %v", cur, err)
		}
		if _, err := a.Update(ctx, objReq(res, "update", "two"), objects.WriteOptions{}, putAt(old, "a", fmt.Sprint(i))); !apierrors.IsConflict(err) {
			t.Fatalf("update through A at %d = %v, want a conflict", old, err)
		}
		old = rvOf(t, r.Object)
	}
	t.Logf("guesses: %+v", guessesOf(a, b).since(before))
}

// An update queued behind another update of the same object through the
// same service starts from what that one stored, without waiting for the
// cache; a stale one (the object changed elsewhere meanwhile) loses
// nothing, and a change that is a no-op only against it is written.
func TestUpdateGuessFromLastWrite(t *testing.T) {
	st := etcdtest.Start(t)
	s, res := guessService(t, st)
	ctx := context.Background()

	// queued runs m on name while an update turn that stored stored is
	// held, once the update waits for its turn.
	queued := func(t *testing.T, name string, stored storage.KeyValue, m objects.Mutation) *unstructured.Unstructured {
		t.Helper()
		waiters, release := objects.HoldUpdateTurn(s, res, "ns", name, stored)
		type result struct {
			out objects.Result
			err error
		}
		done := make(chan result, 1)
		go func() {
			out, err := s.Update(ctx, objReq(res, "patch", name), objects.WriteOptions{}, m)
			done <- result{out, err}
		}()
		deadline := time.Now().Add(10 * time.Second)
		for waiters() < 1 {
			if time.Now().After(deadline) {
				release()
				<-done
				t.Fatal("the update never queued for its turn")
			}
			time.Sleep(time.Millisecond)
		}
		release()
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.out.Object
	}
	create := func(t *testing.T, name string) storage.KeyValue {
		t.Helper()
		if _, err := s.Create(ctx, objReq(res, "create", ""), configMap(name, map[string]any{"k": "v1"}), objects.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		kv, err := st.Get(ctx, res.Key("ns", name))
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	from := func() int64 { return s.Counts().GuessesFromLastWrite }
	data := func(o *unstructured.Unstructured) map[string]any {
		d, _, _ := unstructured.NestedMap(o.Object, "data")
		return d
	}

	t.Run("current", func(t *testing.T) {
		kv := create(t, "last-current")
		before, g0 := from(), guessesOf(s)
		o := queued(t, "last-current", kv, setData("p", "1"))
		if d := data(o); d["k"] != "v1" || d["p"] != "1" {
			t.Fatalf("data = %v", d)
		}
		if n := from() - before; n != 1 {
			t.Fatalf("guesses from the last write = %d, want 1", n)
		}
		if g := guessesOf(s).since(g0); g.stale != 0 || g.rechecked != 0 {
			t.Fatalf("guesses = %+v, want none stale or rechecked", g)
		}
	})
	t.Run("stale", func(t *testing.T) {
		kv := create(t, "last-stale")
		rewriteData(t, st, res, "last-stale", "v2")
		g0 := guessesOf(s)
		o := queued(t, "last-stale", kv, setData("p", "1"))
		if d := data(o); d["k"] != "v2" || d["p"] != "1" {
			t.Fatalf("data = %v, want the change made elsewhere kept", d)
		}
		if g := guessesOf(s).since(g0); g.stale != 1 {
			t.Fatalf("guesses = %+v, want one stale", g)
		}
	})
	t.Run("no-op only against the stale guess", func(t *testing.T) {
		kv := create(t, "last-noop")
		rv := rewriteData(t, st, res, "last-noop", "v2")
		o := queued(t, "last-noop", kv, setData("k", "v1"))
		if d := data(o); d["k"] != "v1" {
			t.Fatalf("data = %v, want k=v1 written", d)
		}
		if got := rvOf(t, o); got <= rv {
			t.Fatalf("resourceVersion %d after the rewrite's %d: the update was not written", got, rv)
		}
	})
	t.Run("queued patches", func(t *testing.T) {
		create(t, "last-many")
		before := from()
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 10 {
					if _, err := s.Update(ctx, objReq(res, "patch", "last-many"), objects.WriteOptions{}, setData(fmt.Sprintf("g%d-%d", g, i), "x")); err != nil {
						t.Errorf("update: %v", err)
					}
				}
			})
		}
		wg.Wait()
		o, err := s.Get(ctx, objReq(res, "get", "last-many"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if d := data(o); len(d) != 1+80 {
			t.Fatalf("%d data keys after 80 updates, want 81", len(d))
		}
		if from() == before {
			t.Fatal("no update started from the one queued before it")
		}
	})
}
