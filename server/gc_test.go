package server_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/objwatch/objwatch/testenv"
)

// gcAPI is a server for garbage collection tests, with helpers to make
// owners and dependents.
type gcAPI struct {
	*api
	t *testing.T
}

func startGC(t *testing.T, opts ...testenv.Option) *gcAPI {
	env := testenv.Start(t, opts...)
	a := newAPI(t, env)
	t.Cleanup(a.c.CloseIdleConnections)
	return &gcAPI{api: a, t: t}
}

// ownerRef is an owner reference to the object r answered with.
func ownerRef(t testing.TB, r response, block bool) string {
	o := r.object()
	md := o["metadata"].(map[string]any)
	return fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"name":%q,"uid":%q,"blockOwnerDeletion":%v}`, o["apiVersion"], o["kind"], md["name"], md["uid"], block)
}

// create makes a ConfigMap with owner references and finalizers.
func (g *gcAPI) cm(name string, finalizers []string, owners ...string) response {
	g.t.Helper()
	extra := ""
	if len(owners) > 0 {
		extra += `,"ownerReferences":[` + strings.Join(owners, ",") + `]`
	}
	if len(finalizers) > 0 {
		extra += `,"finalizers":["` + strings.Join(finalizers, `","`) + `"]`
	}
	r := g.json("POST", cms, cm(name, extra))
	mustCode(g.t, "create "+name, r, http.StatusCreated)
	return r
}

// gone waits until GET path is 404.
func (g *gcAPI) gone(path string) {
	g.t.Helper()
	g.eventually(path+" deleted", func() (bool, string) {
		r := g.json("GET", path, "")
		return r.code == http.StatusNotFound, fmt.Sprintf("%d %s", r.code, truncate(r.body))
	})
}

// eventually waits up to 20 s for cond.
func (g *gcAPI) eventually(what string, cond func() (bool, string)) {
	g.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("%s: not within 20 s; last: %s", what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// release removes every finalizer of the object at path.
func (g *gcAPI) release(path string) response {
	g.t.Helper()
	return g.do("PATCH", path, "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`))
}

// stays checks that path still exists after the collector had time to act.
func (g *gcAPI) stays(path string) response {
	g.t.Helper()
	time.Sleep(500 * time.Millisecond)
	r := g.json("GET", path, "")
	mustCode(g.t, "get "+path, r, http.StatusOK)
	return r
}

func metaOf(r response) map[string]any {
	md, _ := r.object()["metadata"].(map[string]any)
	return md
}

func ownerNames(r response) []string {
	var out []string
	refs, _ := metaOf(r)["ownerReferences"].([]any)
	for _, ref := range refs {
		out = append(out, ref.(map[string]any)["name"].(string))
	}
	return out
}

func finalizersOf(r response) []string {
	var out []string
	fs, _ := metaOf(r)["finalizers"].([]any)
	for _, f := range fs {
		out = append(out, f.(string))
	}
	return out
}

// Background deletion (the default): the owner goes at once, then the
// collector deletes its dependents, and a dependent with another owner
// left only loses the reference.
func TestGCBackground(t *testing.T) {
	g := startGC(t)
	a := g.cm("owner-a", nil)
	b := g.cm("owner-b", nil)
	g.cm("dep-1", nil, ownerRef(t, a, false))
	g.cm("dep-2", nil, ownerRef(t, a, true))
	g.cm("dep-both", nil, ownerRef(t, a, false), ownerRef(t, b, false))
	g.cm("unrelated", nil)

	mustCode(t, "delete owner", g.json("DELETE", cms+"/owner-a", ""), http.StatusOK)
	g.gone(cms + "/owner-a")
	g.gone(cms + "/dep-1")
	g.gone(cms + "/dep-2")
	g.eventually("dep-both loses its reference to owner-a", func() (bool, string) {
		r := g.json("GET", cms+"/dep-both", "")
		return r.code == http.StatusOK && slices.Equal(ownerNames(r), []string{"owner-b"}), fmt.Sprintf("%d %v", r.code, ownerNames(r))
	})
	g.stays(cms + "/unrelated")
	g.stays(cms + "/owner-b")
	if n := metricValue(g.api, "objwatch_gc_deletions_total "); n < 2 {
		t.Errorf("objwatch_gc_deletions_total = %d, want ≥ 2", n)
	}
	if n := metricValue(g.api, "objwatch_gc_released_total "); n < 1 {
		t.Errorf("objwatch_gc_released_total = %d, want ≥ 1", n)
	}
}

// A dependent whose owner is absent, or is another object of that name
// (another uid), is collected; one whose owner exists is not.
func TestGCDanglingOwner(t *testing.T) {
	g := startGC(t)
	owner := g.cm("owner", nil)
	ref := ownerRef(t, owner, false)
	g.cm("dep-absent", nil, `{"apiVersion":"v1","kind":"ConfigMap","name":"never","uid":"8e8f2d9c-0000-4000-8000-000000000001"}`)
	g.cm("dep-wrong-uid", nil, `{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":"8e8f2d9c-0000-4000-8000-000000000002"}`)
	g.cm("dep-ok", nil, ref)
	// A kind no server serves: never collected on a guess.
	g.cm("dep-unknown-kind", nil, `{"apiVersion":"example.com/v1","kind":"Nothing","name":"x","uid":"8e8f2d9c-0000-4000-8000-000000000003"}`)
	g.gone(cms + "/dep-absent")
	g.gone(cms + "/dep-wrong-uid")
	g.stays(cms + "/dep-ok")
	g.stays(cms + "/dep-unknown-kind")
}

// Orphan: the owner gets the orphan finalizer, the collector removes the
// owner's references from its dependents, then the finalizer, and the
// owner is deleted; the dependents stay.
func TestGCOrphan(t *testing.T) {
	g := startGC(t)
	owner := g.cm("owner", nil)
	other := g.cm("other", nil)
	g.cm("dep-1", nil, ownerRef(t, owner, true))
	g.cm("dep-2", nil, ownerRef(t, owner, false), ownerRef(t, other, false))

	r := g.json("DELETE", cms+"/owner", `{"propagationPolicy":"Orphan"}`)
	mustCode(t, "delete Orphan", r, http.StatusOK)
	if fs := finalizersOf(r); !slices.Equal(fs, []string{"orphan"}) || metaOf(r)["deletionTimestamp"] == nil {
		t.Fatalf("delete answered finalizers %v, deletionTimestamp %v; want [orphan] and one", fs, metaOf(r)["deletionTimestamp"])
	}
	g.gone(cms + "/owner")
	if names := ownerNames(g.stays(cms + "/dep-1")); len(names) != 0 {
		t.Errorf("dep-1 owners %v, want none", names)
	}
	if names := ownerNames(g.stays(cms + "/dep-2")); !slices.Equal(names, []string{"other"}) {
		t.Errorf("dep-2 owners %v, want [other]", names)
	}
}

// The deprecated orphanDependents=true is Orphan.
func TestGCOrphanDependents(t *testing.T) {
	g := startGC(t)
	owner := g.cm("owner", nil)
	g.cm("dep", nil, ownerRef(t, owner, false))
	mustCode(t, "delete", g.json("DELETE", cms+"/owner", `{"orphanDependents":true}`), http.StatusOK)
	g.gone(cms + "/owner")
	if names := ownerNames(g.stays(cms + "/dep")); len(names) != 0 {
		t.Errorf("dep owners %v, want none", names)
	}
	r := g.json("DELETE", cms+"/dep", `{"orphanDependents":true,"propagationPolicy":"Orphan"}`)
	mustCode(t, "delete with both", r, http.StatusUnprocessableEntity)
}

// Foreground: the owner gets the foregroundDeletion finalizer and stays
// while a dependent with blockOwnerDeletion exists; dependents are
// deleted (one held by its own finalizer stays until that is removed);
// then the owner goes.
func TestGCForeground(t *testing.T) {
	g := startGC(t)
	owner := g.cm("owner", nil)
	g.cm("dep-free", nil, ownerRef(t, owner, false))
	g.cm("dep-held", []string{"example.com/hold"}, ownerRef(t, owner, true))
	mid := g.cm("dep-mid", nil, ownerRef(t, owner, true))
	g.cm("grandchild", nil, ownerRef(t, mid, true))

	r := g.json("DELETE", cms+"/owner", `{"propagationPolicy":"Foreground"}`)
	mustCode(t, "delete Foreground", r, http.StatusOK)
	if fs := finalizersOf(r); !slices.Equal(fs, []string{"foregroundDeletion"}) {
		t.Fatalf("delete answered finalizers %v, want [foregroundDeletion]", fs)
	}
	g.gone(cms + "/dep-free")
	g.gone(cms + "/grandchild") // dep-mid is deleted in the foreground too
	g.gone(cms + "/dep-mid")
	held := g.stays(cms + "/dep-held")
	if metaOf(held)["deletionTimestamp"] == nil {
		t.Fatalf("dep-held is not being deleted: %s", held.body)
	}
	if fs := finalizersOf(g.stays(cms + "/owner")); !slices.Equal(fs, []string{"foregroundDeletion"}) {
		t.Fatalf("owner finalizers %v while dep-held blocks, want [foregroundDeletion]", fs)
	}
	// Releasing the held dependent lets everything go.
	p := g.release(cms + "/dep-held")
	mustCode(t, "release dep-held", p, http.StatusOK)
	g.gone(cms + "/dep-held")
	g.gone(cms + "/owner")
}

// A Foreground owner whose dependents do not block (and one that has no
// dependents) is deleted once they are; a dependent with another owner
// loses the reference instead of being deleted.
func TestGCForegroundNonBlocking(t *testing.T) {
	g := startGC(t)
	owner := g.cm("owner", nil)
	keep := g.cm("keeper", nil)
	g.cm("dep-shared", nil, ownerRef(t, owner, true), ownerRef(t, keep, false))
	g.cm("lone", nil)
	mustCode(t, "delete owner", g.json("DELETE", cms+"/owner", `{"propagationPolicy":"Foreground"}`), http.StatusOK)
	mustCode(t, "delete lone", g.json("DELETE", cms+"/lone", `{"propagationPolicy":"Foreground"}`), http.StatusOK)
	g.gone(cms + "/owner")
	g.gone(cms + "/lone")
	if names := ownerNames(g.stays(cms + "/dep-shared")); !slices.Equal(names, []string{"keeper"}) {
		t.Errorf("dep-shared owners %v, want [keeper]", names)
	}
}

// Owners of other resources: a custom resource owning a ConfigMap, and a
// cluster-scoped owner (a Namespace) of a dependent in another namespace.
func TestGCAcrossResources(t *testing.T) {
	a := startScale(t) // serves widgets (namespaced custom resources)
	g := &gcAPI{api: a, t: t}
	w := a.json("POST", widgets, widget("w", `"replicas":1`))
	mustCode(t, "create widget", w, http.StatusCreated)
	g.cm("dep-of-widget", nil, ownerRef(t, w, true))
	ns := a.json("POST", "/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"owner-ns"}}`)
	mustCode(t, "create namespace", ns, http.StatusCreated)
	g.cm("dep-of-namespace", nil, ownerRef(t, ns, false))

	mustCode(t, "delete widget", a.json("DELETE", widgets+"/w", ""), http.StatusOK)
	g.gone(cms + "/dep-of-widget")
	mustCode(t, "delete namespace", a.json("DELETE", "/api/v1/namespaces/owner-ns", ""), http.StatusOK)
	g.gone("/api/v1/namespaces/owner-ns")
	g.gone(cms + "/dep-of-namespace")
}

// An owner deleted while no server ran (in etcd directly): the next
// server's collector finds the dependent when it lists the store.
func TestGCAtStart(t *testing.T) {
	ep := testenv.StartEtcd(t)
	first := testenv.Start(t, testenv.WithEtcd(ep))
	a := newAPI(t, first)
	g := &gcAPI{api: a, t: t}
	owner := g.cm("owner", nil)
	g.cm("dep", nil, ownerRef(t, owner, false))
	first.Stop()
	// Delete the owner in etcd directly, with no server running.
	st := rawStore(t, first)
	if _, err := st.Delete(t.Context(), "/registry/core/configmaps/default/owner", 0); err != nil {
		t.Fatal(err)
	}
	second := testenv.Start(t, testenv.WithEtcd(ep))
	g2 := &gcAPI{api: newAPI(t, second), t: t}
	g2.gone(cms + "/dep")
}

// A dependent whose owner's kind is not served yet is left alone; once a
// definition serves the kind, the reference is judged (here: dangling).
func TestGCOwnerKindServedLater(t *testing.T) {
	g := startGC(t)
	g.cm("dep", nil, `{"apiVersion":"scale.objwatch.io/v1","kind":"Widget","name":"w","uid":"8e8f2d9c-0000-4000-8000-000000000004"}`)
	g.stays(cms + "/dep")
	mustCode(t, "create CRD", g.json("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", scaleCRD), http.StatusCreated)
	g.gone(cms + "/dep")
}

// BenchmarkGCCascade deletes an owner of 1,000 dependents and waits until
// the collector has deleted them all: go test ./server -run '^$' -bench
// GCCascade -benchtime 3x. It reports dependents collected per second.
func BenchmarkGCCascade(b *testing.B) {
	const n = 1000
	env := testenv.Start(b)
	c := env.HTTPClient()
	post := func(path, body string) []byte {
		resp, err := c.Post(env.Config.Host+path, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("create = %d %s", resp.StatusCode, out)
		}
		return out
	}
	var total time.Duration
	for i := range b.N {
		b.StopTimer()
		owner := response{code: http.StatusCreated, body: post(cms, cm(fmt.Sprintf("owner-%d", i), ""))}
		ref := ownerRef(b, owner, false)
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for j := w; j < n; j += 16 {
					post(cms, cm(fmt.Sprintf("dep-%d-%d", i, j), `,"labels":{"round":"`+strconv.Itoa(i)+`"},"ownerReferences":[`+ref+`]`))
				}
			})
		}
		wg.Wait()
		b.StartTimer()
		start := time.Now()
		req, _ := http.NewRequest("DELETE", env.Config.Host+cms+fmt.Sprintf("/owner-%d", i), nil)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		for {
			resp, err := c.Get(env.Config.Host + cms + "?limit=1&labelSelector=round%3D" + strconv.Itoa(i))
			if err != nil {
				b.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), `"name"`) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "dependents/s")
}

// Two servers on one etcd both run a collector: an Orphan deletion through
// one of them orphans every dependent (none is collected by the other
// server's collector as dangling), and a Foreground one deletes them all.
func TestGCTwoServers(t *testing.T) {
	ep := testenv.StartEtcd(t)
	one := &gcAPI{api: newAPI(t, testenv.Start(t, testenv.WithEtcd(ep))), t: t}
	two := &gcAPI{api: newAPI(t, testenv.Start(t, testenv.WithEtcd(ep))), t: t}
	const n = 20
	for _, policy := range []string{"Orphan", "Foreground"} {
		p := strings.ToLower(policy)
		owner := one.cm("owner-"+p, nil)
		for i := range n {
			one.cm(fmt.Sprintf("%s-%d", p, i), nil, ownerRef(t, owner, i%2 == 0))
		}
		mustCode(t, "delete "+policy, two.json("DELETE", cms+"/owner-"+p, `{"propagationPolicy":"`+policy+`"}`), http.StatusOK)
		one.gone(cms + "/owner-" + p)
		for i := range n {
			path := fmt.Sprintf("%s/%s-%d", cms, p, i)
			if policy == "Foreground" {
				two.gone(path)
				continue
			}
			r := two.json("GET", path, "")
			if r.code != http.StatusOK || len(ownerNames(r)) != 0 {
				t.Errorf("%s after Orphan: %d, owners %v; want it kept without owners", path, r.code, ownerNames(r))
			}
		}
	}
}

// BenchmarkCreateDependents compares creating ConfigMaps that have an
// owner reference with creating plain ones, in CPU time of the whole test
// process (server, embedded etcd, clients) per create, after the
// collector has processed them: go test ./server -run '^$' -bench
// CreateDependents -benchtime 2000x.
func BenchmarkCreateDependents(b *testing.B) {
	env := testenv.Start(b)
	c := env.HTTPClient()
	post := func(body string) []byte {
		resp, err := c.Post(env.Config.Host+cms, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("create = %d %s", resp.StatusCode, out)
		}
		return out
	}
	ref := ownerRef(b, response{code: http.StatusCreated, body: post(cm("owner", ""))}, false)
	for _, bc := range []struct{ name, extra string }{{"plain", ""}, {"dependent", `,"ownerReferences":[` + ref + `]`}} {
		b.Run(bc.name, func(b *testing.B) {
			cpu0 := processCPU(b)
			b.ResetTimer()
			var wg sync.WaitGroup
			var next atomic.Int64
			for range 16 {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						post(cm(fmt.Sprintf("%s-%d-%d", bc.name, b.N, i), bc.extra))
					}
				})
			}
			wg.Wait()
			time.Sleep(200 * time.Millisecond) // let the collector finish
			b.StopTimer()
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/create")
		})
	}
}

// processCPU is the user and system CPU time the process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The collector skips checking a new dependent whose owners it knows to
// exist; that knowledge must end with the owner: a dependent created after
// its owner was deleted (at once, or after a finalizer held it), or while
// its owner's Foreground deletion is under way, is still collected. (A
// Foreground deletion is under way while a blocking dependent is left: a
// finalizer holds one here. Once none is, the owner loses its
// foregroundDeletion finalizer, and a dependent created after that has an
// owner that exists, as in Kubernetes.)
func TestGCKnownOwnerForgotten(t *testing.T) {
	g := startGC(t)
	for _, c := range []struct {
		name, policy string
		hold         bool
	}{{"direct", "Background", false}, {"held", "Background", true}, {"fg", "Foreground", true}} {
		var fs []string
		if c.hold {
			fs = []string{"example.com/hold"}
		}
		owner := g.cm("owner-"+c.name, fs)
		ref := ownerRef(t, owner, false)
		for i := range 3 {
			g.cm(fmt.Sprintf("%s-early-%d", c.name, i), nil, ref)
		}
		if c.policy == "Foreground" {
			g.cm(c.name+"-blocker", []string{"example.com/hold"}, ownerRef(t, owner, true))
		}
		g.stays(cms + "/" + c.name + "-early-0") // checked: the owner is now known
		mustCode(t, "delete owner", g.json("DELETE", cms+"/owner-"+c.name, `{"propagationPolicy":"`+c.policy+`"}`), http.StatusOK)
		if c.name == "held" {
			// The held owner stays (deleting): its dependents stay too.
			g.stays(cms + "/" + c.name + "-early-1")
			mustCode(t, "release owner", g.release(cms+"/owner-"+c.name), http.StatusOK)
		}
		if c.policy == "Background" {
			g.gone(cms + "/owner-" + c.name)
		}
		g.cm(c.name+"-late", nil, ref)
		g.gone(cms + "/" + c.name + "-late")
		if c.policy == "Foreground" {
			mustCode(t, "release blocker", g.release(cms+"/"+c.name+"-blocker"), http.StatusOK)
			g.gone(cms + "/" + c.name + "-blocker")
		}
		for i := range 3 {
			g.gone(fmt.Sprintf("%s/%s-early-%d", cms, c.name, i))
		}
	}
}
