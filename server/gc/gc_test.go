package gc_test

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

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

func ownerNames(r servertest.Response) []string {
	var out []string
	refs, _ := servertest.MetaOf(r)["ownerReferences"].([]any)
	for _, ref := range refs {
		out = append(out, ref.(map[string]any)["name"].(string))
	}
	return out
}

// Background deletion (the default): the owner goes at once, then the
// collector deletes its dependents, and a dependent with another owner
// left only loses the reference.
func TestGCBackground(t *testing.T) {
	g := servertest.StartGC(t)
	a := g.CM("owner-a", nil)
	b := g.CM("owner-b", nil)
	g.CM("dep-1", nil, servertest.OwnerRef(t, a, false))
	g.CM("dep-2", nil, servertest.OwnerRef(t, a, true))
	g.CM("dep-both", nil, servertest.OwnerRef(t, a, false), servertest.OwnerRef(t, b, false))
	g.CM("unrelated", nil)

	servertest.MustCode(t, "delete owner", g.JSON("DELETE", servertest.CMs+"/owner-a", ""), http.StatusOK)
	g.Gone(servertest.CMs + "/owner-a")
	g.Gone(servertest.CMs + "/dep-1")
	g.Gone(servertest.CMs + "/dep-2")
	g.Eventually("dep-both loses its reference to owner-a", func() (bool, string) {
		r := g.JSON("GET", servertest.CMs+"/dep-both", "")
		return r.Code == http.StatusOK && slices.Equal(ownerNames(r), []string{"owner-b"}), fmt.Sprintf("%d %v", r.Code, ownerNames(r))
	})
	g.Stays(servertest.CMs + "/unrelated")
	g.Stays(servertest.CMs + "/owner-b")
	if n := servertest.MetricValue(g.API, "objwatch_gc_deletions_total "); n < 2 {
		t.Errorf("objwatch_gc_deletions_total = %d, want ≥ 2", n)
	}
	if n := servertest.MetricValue(g.API, "objwatch_gc_released_total "); n < 1 {
		t.Errorf("objwatch_gc_released_total = %d, want ≥ 1", n)
	}
}

// A dependent whose owner is absent, or is another object of that name
// (another uid), is collected; one whose owner exists is not.
func TestGCDanglingOwner(t *testing.T) {
	g := servertest.StartGC(t)
	owner := g.CM("owner", nil)
	ref := servertest.OwnerRef(t, owner, false)
	g.CM("dep-absent", nil, `{"apiVersion":"v1","kind":"ConfigMap","name":"never","uid":"8e8f2d9c-0000-4000-8000-000000000001"}`)
	g.CM("dep-wrong-uid", nil, `{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":"8e8f2d9c-0000-4000-8000-000000000002"}`)
	g.CM("dep-ok", nil, ref)
	// A kind no server serves: never collected on a guess.
	g.CM("dep-unknown-kind", nil, `{"apiVersion":"example.com/v1","kind":"Nothing","name":"x","uid":"8e8f2d9c-0000-4000-8000-000000000003"}`)
	g.Gone(servertest.CMs + "/dep-absent")
	g.Gone(servertest.CMs + "/dep-wrong-uid")
	g.Stays(servertest.CMs + "/dep-ok")
	g.Stays(servertest.CMs + "/dep-unknown-kind")
}

// Orphan: the owner gets the orphan finalizer, the collector removes the
// owner's references from its dependents, then the finalizer, and the
// owner is deleted; the dependents stay.
func TestGCOrphan(t *testing.T) {
	g := servertest.StartGC(t)
	owner := g.CM("owner", nil)
	other := g.CM("other", nil)
	g.CM("dep-1", nil, servertest.OwnerRef(t, owner, true))
	g.CM("dep-2", nil, servertest.OwnerRef(t, owner, false), servertest.OwnerRef(t, other, false))

	r := g.JSON("DELETE", servertest.CMs+"/owner", `{"propagationPolicy":"Orphan"}`)
	servertest.MustCode(t, "delete Orphan", r, http.StatusOK)
	if fs := servertest.FinalizersOf(r); !slices.Equal(fs, []string{"orphan"}) || servertest.MetaOf(r)["deletionTimestamp"] == nil {
		t.Fatalf("delete answered finalizers %v, deletionTimestamp %v; want [orphan] and one", fs, servertest.MetaOf(r)["deletionTimestamp"])
	}
	g.Gone(servertest.CMs + "/owner")
	if names := ownerNames(g.Stays(servertest.CMs + "/dep-1")); len(names) != 0 {
		t.Errorf("dep-1 owners %v, want none", names)
	}
	if names := ownerNames(g.Stays(servertest.CMs + "/dep-2")); !slices.Equal(names, []string{"other"}) {
		t.Errorf("dep-2 owners %v, want [other]", names)
	}
}

// The deprecated orphanDependents=true is Orphan.
func TestGCOrphanDependents(t *testing.T) {
	g := servertest.StartGC(t)
	owner := g.CM("owner", nil)
	g.CM("dep", nil, servertest.OwnerRef(t, owner, false))
	servertest.MustCode(t, "delete", g.JSON("DELETE", servertest.CMs+"/owner", `{"orphanDependents":true}`), http.StatusOK)
	g.Gone(servertest.CMs + "/owner")
	if names := ownerNames(g.Stays(servertest.CMs + "/dep")); len(names) != 0 {
		t.Errorf("dep owners %v, want none", names)
	}
	r := g.JSON("DELETE", servertest.CMs+"/dep", `{"orphanDependents":true,"propagationPolicy":"Orphan"}`)
	servertest.MustCode(t, "delete with both", r, http.StatusUnprocessableEntity)
}

// Foreground: the owner gets the foregroundDeletion finalizer and stays
// while a dependent with blockOwnerDeletion exists; dependents are
// deleted (one held by its own finalizer stays until that is removed);
// then the owner goes.
func TestGCForeground(t *testing.T) {
	g := servertest.StartGC(t)
	owner := g.CM("owner", nil)
	g.CM("dep-free", nil, servertest.OwnerRef(t, owner, false))
	g.CM("dep-held", []string{"example.com/hold"}, servertest.OwnerRef(t, owner, true))
	mid := g.CM("dep-mid", nil, servertest.OwnerRef(t, owner, true))
	g.CM("grandchild", nil, servertest.OwnerRef(t, mid, true))

	r := g.JSON("DELETE", servertest.CMs+"/owner", `{"propagationPolicy":"Foreground"}`)
	servertest.MustCode(t, "delete Foreground", r, http.StatusOK)
	if fs := servertest.FinalizersOf(r); !slices.Equal(fs, []string{"foregroundDeletion"}) {
		t.Fatalf("delete answered finalizers %v, want [foregroundDeletion]", fs)
	}
	g.Gone(servertest.CMs + "/dep-free")
	g.Gone(servertest.CMs + "/grandchild") // dep-mid is deleted in the foreground too
	g.Gone(servertest.CMs + "/dep-mid")
	held := g.Stays(servertest.CMs + "/dep-held")
	if servertest.MetaOf(held)["deletionTimestamp"] == nil {
		t.Fatalf("dep-held is not being deleted: %s", held.Body)
	}
	if fs := servertest.FinalizersOf(g.Stays(servertest.CMs + "/owner")); !slices.Equal(fs, []string{"foregroundDeletion"}) {
		t.Fatalf("owner finalizers %v while dep-held blocks, want [foregroundDeletion]", fs)
	}
	// Releasing the held dependent lets everything go.
	p := g.Release(servertest.CMs + "/dep-held")
	servertest.MustCode(t, "release dep-held", p, http.StatusOK)
	g.Gone(servertest.CMs + "/dep-held")
	g.Gone(servertest.CMs + "/owner")
}

// A Foreground owner whose dependents do not block (and one that has no
// dependents) is deleted once they are; a dependent with another owner
// loses the reference instead of being deleted.
func TestGCForegroundNonBlocking(t *testing.T) {
	g := servertest.StartGC(t)
	owner := g.CM("owner", nil)
	keep := g.CM("keeper", nil)
	g.CM("dep-shared", nil, servertest.OwnerRef(t, owner, true), servertest.OwnerRef(t, keep, false))
	g.CM("lone", nil)
	servertest.MustCode(t, "delete owner", g.JSON("DELETE", servertest.CMs+"/owner", `{"propagationPolicy":"Foreground"}`), http.StatusOK)
	servertest.MustCode(t, "delete lone", g.JSON("DELETE", servertest.CMs+"/lone", `{"propagationPolicy":"Foreground"}`), http.StatusOK)
	g.Gone(servertest.CMs + "/owner")
	g.Gone(servertest.CMs + "/lone")
	if names := ownerNames(g.Stays(servertest.CMs + "/dep-shared")); !slices.Equal(names, []string{"keeper"}) {
		t.Errorf("dep-shared owners %v, want [keeper]", names)
	}
}

// Owners of other resources: a custom resource owning a ConfigMap, and a
// cluster-scoped owner (a Namespace) of a dependent in another namespace.
func TestGCAcrossResources(t *testing.T) {
	a := servertest.StartScale(t) // serves widgets (namespaced custom resources)
	g := &servertest.GCAPI{API: a, T: t}
	w := a.JSON("POST", servertest.Widgets, servertest.Widget("w", `"replicas":1`))
	servertest.MustCode(t, "create widget", w, http.StatusCreated)
	g.CM("dep-of-widget", nil, servertest.OwnerRef(t, w, true))
	ns := a.JSON("POST", "/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"owner-ns"}}`)
	servertest.MustCode(t, "create namespace", ns, http.StatusCreated)
	g.CM("dep-of-namespace", nil, servertest.OwnerRef(t, ns, false))

	servertest.MustCode(t, "delete widget", a.JSON("DELETE", servertest.Widgets+"/w", ""), http.StatusOK)
	g.Gone(servertest.CMs + "/dep-of-widget")
	servertest.MustCode(t, "delete namespace", a.JSON("DELETE", "/api/v1/namespaces/owner-ns", ""), http.StatusOK)
	g.Gone("/api/v1/namespaces/owner-ns")
	g.Gone(servertest.CMs + "/dep-of-namespace")
}

// An owner deleted while no server ran (in etcd directly): the next
// server's collector finds the dependent when it lists the store.
func TestGCAtStart(t *testing.T) {
	ep := testenv.StartEtcd(t)
	first := testenv.Start(t, testenv.WithEtcd(ep))
	a := servertest.NewAPI(t, first)
	g := &servertest.GCAPI{API: a, T: t}
	owner := g.CM("owner", nil)
	g.CM("dep", nil, servertest.OwnerRef(t, owner, false))
	first.Stop()
	// Delete the owner in etcd directly, with no server running.
	st := servertest.RawStore(t, first)
	if _, err := st.Delete(t.Context(), "/registry/core/configmaps/default/owner", 0); err != nil {
		t.Fatal(err)
	}
	second := testenv.Start(t, testenv.WithEtcd(ep))
	g2 := &servertest.GCAPI{API: servertest.NewAPI(t, second), T: t}
	g2.Gone(servertest.CMs + "/dep")
}

// A dependent whose owner's kind is not served yet is left alone; once a
// definition serves the kind, the reference is judged (here: dangling).
func TestGCOwnerKindServedLater(t *testing.T) {
	g := servertest.StartGC(t)
	g.CM("dep", nil, `{"apiVersion":"scale.objwatch.io/v1","kind":"Widget","name":"w","uid":"8e8f2d9c-0000-4000-8000-000000000004"}`)
	g.Stays(servertest.CMs + "/dep")
	servertest.MustCode(t, "create CRD", g.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", servertest.ScaleCRD), http.StatusCreated)
	g.Gone(servertest.CMs + "/dep")
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
		owner := servertest.Response{Code: http.StatusCreated, Body: post(servertest.CMs, servertest.CM(fmt.Sprintf("owner-%d", i), ""))}
		ref := servertest.OwnerRef(b, owner, false)
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for j := w; j < n; j += 16 {
					post(servertest.CMs, servertest.CM(fmt.Sprintf("dep-%d-%d", i, j), `,"labels":{"round":"`+strconv.Itoa(i)+`"},"ownerReferences":[`+ref+`]`))
				}
			})
		}
		wg.Wait()
		b.StartTimer()
		start := time.Now()
		req, _ := http.NewRequest("DELETE", env.Config.Host+servertest.CMs+fmt.Sprintf("/owner-%d", i), nil)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		for {
			resp, err := c.Get(env.Config.Host + servertest.CMs + "?limit=1&labelSelector=round%3D" + strconv.Itoa(i))
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
	one := &servertest.GCAPI{API: servertest.NewAPI(t, testenv.Start(t, testenv.WithEtcd(ep))), T: t}
	two := &servertest.GCAPI{API: servertest.NewAPI(t, testenv.Start(t, testenv.WithEtcd(ep))), T: t}
	const n = 20
	for _, policy := range []string{"Orphan", "Foreground"} {
		p := strings.ToLower(policy)
		owner := one.CM("owner-"+p, nil)
		for i := range n {
			one.CM(fmt.Sprintf("%s-%d", p, i), nil, servertest.OwnerRef(t, owner, i%2 == 0))
		}
		servertest.MustCode(t, "delete "+policy, two.JSON("DELETE", servertest.CMs+"/owner-"+p, `{"propagationPolicy":"`+policy+`"}`), http.StatusOK)
		one.Gone(servertest.CMs + "/owner-" + p)
		for i := range n {
			path := fmt.Sprintf("%s/%s-%d", servertest.CMs, p, i)
			if policy == "Foreground" {
				two.Gone(path)
				continue
			}
			r := two.JSON("GET", path, "")
			if r.Code != http.StatusOK || len(ownerNames(r)) != 0 {
				t.Errorf("%s after Orphan: %d, owners %v; want it kept without owners", path, r.Code, ownerNames(r))
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
		resp, err := c.Post(env.Config.Host+servertest.CMs, "application/json", strings.NewReader(body))
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
	ref := servertest.OwnerRef(b, servertest.Response{Code: http.StatusCreated, Body: post(servertest.CM("owner", ""))}, false)
	for _, bc := range []struct{ name, extra string }{{"plain", ""}, {"dependent", `,"ownerReferences":[` + ref + `]`}} {
		b.Run(bc.name, func(b *testing.B) {
			cpu0 := processCPU(b)
			b.ResetTimer()
			var wg sync.WaitGroup
			var next atomic.Int64
			for range 16 {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						post(servertest.CM(fmt.Sprintf("%s-%d-%d", bc.name, b.N, i), bc.extra))
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
	g := servertest.StartGC(t)
	for _, c := range []struct {
		name, policy string
		hold         bool
	}{{"direct", "Background", false}, {"held", "Background", true}, {"fg", "Foreground", true}} {
		var fs []string
		if c.hold {
			fs = []string{"example.com/hold"}
		}
		owner := g.CM("owner-"+c.name, fs)
		ref := servertest.OwnerRef(t, owner, false)
		for i := range 3 {
			g.CM(fmt.Sprintf("%s-early-%d", c.name, i), nil, ref)
		}
		if c.policy == "Foreground" {
			g.CM(c.name+"-blocker", []string{"example.com/hold"}, servertest.OwnerRef(t, owner, true))
		}
		g.Stays(servertest.CMs + "/" + c.name + "-early-0") // checked: the owner is now known
		servertest.MustCode(t, "delete owner", g.JSON("DELETE", servertest.CMs+"/owner-"+c.name, `{"propagationPolicy":"`+c.policy+`"}`), http.StatusOK)
		if c.name == "held" {
			// The held owner stays (deleting): its dependents stay too.
			g.Stays(servertest.CMs + "/" + c.name + "-early-1")
			servertest.MustCode(t, "release owner", g.Release(servertest.CMs+"/owner-"+c.name), http.StatusOK)
		}
		if c.policy == "Background" {
			g.Gone(servertest.CMs + "/owner-" + c.name)
		}
		g.CM(c.name+"-late", nil, ref)
		g.Gone(servertest.CMs + "/" + c.name + "-late")
		if c.policy == "Foreground" {
			servertest.MustCode(t, "release blocker", g.Release(servertest.CMs+"/"+c.name+"-blocker"), http.StatusOK)
			g.Gone(servertest.CMs + "/" + c.name + "-blocker")
		}
		for i := range 3 {
			g.Gone(fmt.Sprintf("%s/%s-early-%d", servertest.CMs, c.name, i))
		}
	}
}

// An owner reference whose uid is an object's in another namespace, as
// Kubernetes' collector (v1.37.2, with kube-controller-manager) treats
// it: a namespaced dependent is collected (its owner is not in its
// namespace) and a cluster-scoped one never is (no cluster-scoped object
// can have a namespaced owner); both get a Warning Event. On the
// reference, `kubectl get events -o yaml` showed for a ConfigMap in
// default whose reference names other/owner:
//
//	count: 1
//	involvedObject: {apiVersion: v1, kind: ConfigMap, name: dep, namespace: default, uid: DEPUID}
//	message: 'ownerRef [v1/ConfigMap, namespace: default, name: owner, uid: OWNERUID]
//	  does not exist in namespace "default"'
//	reason: OwnerRefInvalidNamespace
//	reportingComponent: garbage-collector-controller
//	reportingInstance: ""
//	source: {component: garbage-collector-controller}
//	type: Warning
//
// and for a ClusterRole naming it, in namespace default:
//
//	involvedObject: {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, name: cr, uid: CRUID}
//	message: 'ownerRef [v1/ConfigMap, namespace: , name: owner, uid: OWNERUID]
//	  does not exist in namespace ""'
//
// A valid dependent of the same owner, in its namespace, stays: the
// uid found absent from default is not absent from other.
func TestGCOwnerRefInvalidNamespace(t *testing.T) {
	g := servertest.StartGC(t)
	servertest.MustCode(t, "create namespace", g.JSON("POST", "/api/v1/namespaces", servertest.Namespace("other")), http.StatusCreated)
	const otherCMs = "/api/v1/namespaces/other/configmaps"
	r := g.JSON("POST", otherCMs, servertest.CM("owner", ""))
	servertest.MustCode(t, "create owner", r, http.StatusCreated)
	ref := servertest.OwnerRef(t, r, false)
	ownerUID := servertest.MetaOf(r)["uid"].(string)

	dep := g.CM("dep", nil, ref)
	depUID := servertest.MetaOf(dep)["uid"].(string)
	g.Gone(servertest.CMs + "/dep")

	cr := g.JSON("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"cr","ownerReferences":[`+ref+`]}}`)
	servertest.MustCode(t, "create cluster role", cr, http.StatusCreated)
	crUID := servertest.MetaOf(cr)["uid"].(string)

	valid := g.JSON("POST", otherCMs, servertest.CM("valid", `,"ownerReferences":[`+ref+`]`))
	servertest.MustCode(t, "create valid dependent", valid, http.StatusCreated)

	warnings := func() map[string]map[string]any {
		out := map[string]map[string]any{}
		r := g.JSON("GET", "/api/v1/namespaces/default/events?fieldSelector=reason%3DOwnerRefInvalidNamespace", "")
		items, _ := r.Object()["items"].([]any)
		for _, it := range items {
			ev := it.(map[string]any)
			out[fmt.Sprint(servertest.Field(ev, "involvedObject.name"))] = ev
		}
		return out
	}
	var evs map[string]map[string]any
	g.Eventually("a warning about each dependent", func() (bool, string) {
		evs = warnings()
		return evs["dep"] != nil && evs["cr"] != nil, fmt.Sprint(len(evs))
	})
	common := map[string]any{
		"type": "Warning", "reason": "OwnerRefInvalidNamespace", "count": 1,
		"source.component": "garbage-collector-controller", "reportingComponent": "garbage-collector-controller", "reportingInstance": "",
	}
	want := map[string]map[string]any{
		"dep": {
			"involvedObject.apiVersion": "v1", "involvedObject.kind": "ConfigMap", "involvedObject.namespace": "default", "involvedObject.uid": depUID,
			"message": `ownerRef [v1/ConfigMap, namespace: default, name: owner, uid: ` + ownerUID + `] does not exist in namespace "default"`,
		},
		"cr": {
			"involvedObject.apiVersion": "rbac.authorization.k8s.io/v1", "involvedObject.kind": "ClusterRole", "involvedObject.namespace": nil, "involvedObject.uid": crUID,
			"message": `ownerRef [v1/ConfigMap, namespace: , name: owner, uid: ` + ownerUID + `] does not exist in namespace ""`,
		},
	}
	for name, w := range want {
		ev := evs[name]
		for p, v := range common {
			w[p] = v
		}
		for p, v := range w {
			if got := servertest.Field(ev, p); fmt.Sprint(got) != fmt.Sprint(v) {
				t.Errorf("event about %s: %s = %v, want %v", name, p, got, v)
			}
		}
		if first, last := servertest.Field(ev, "firstTimestamp"), servertest.Field(ev, "lastTimestamp"); first == nil || first != last {
			t.Errorf("event about %s: firstTimestamp %v, lastTimestamp %v", name, first, last)
		}
		if n := fmt.Sprint(servertest.Field(ev, "metadata.name")); !strings.HasPrefix(n, name+".") {
			t.Errorf("event about %s is named %s", name, n)
		}
	}
	g.Stays("/apis/rbac.authorization.k8s.io/v1/clusterroles/cr")
	g.Stays(otherCMs + "/valid")
	if n := len(warnings()); n != 2 {
		t.Errorf("%d warnings, want 2 (one per dependent): %v", n, warnings())
	}
	r = g.JSON("GET", "/api/v1/namespaces/other/events", "")
	if items, _ := r.Object()["items"].([]any); len(items) != 0 {
		t.Errorf("events in other: %s", r.Body)
	}
}
