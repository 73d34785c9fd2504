package lifecycle_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

const nsPath = "/api/v1/namespaces"

func nsBody(name, extra string) string {
	return `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + name + `"` + extra + `}}`
}

func specFinalizers(r servertest.Response) []string {
	var out []string
	spec, _ := r.Object()["spec"].(map[string]any)
	fs, _ := spec["finalizers"].([]any)
	for _, f := range fs {
		out = append(out, f.(string))
	}
	return out
}

func phaseOf(r servertest.Response) string {
	st, _ := r.Object()["status"].(map[string]any)
	p, _ := st["phase"].(string)
	return p
}

// A namespace's life: created with the "kubernetes" spec finalizer, which
// only /finalize changes; a DELETE makes it Terminating and forbids new
// content; its content is deleted through the API, so that an object held
// by a finalizer is waited for; then the namespace goes.
func TestNamespaceLifecycle(t *testing.T) {
	g := servertest.StartGC(t)
	created := g.JSON("POST", nsPath, nsBody("life", ""))
	servertest.MustCode(t, "create namespace", created, http.StatusCreated)
	if fs := specFinalizers(created); !slices.Equal(fs, []string{"kubernetes"}) || phaseOf(created) != "Active" {
		t.Fatalf("new namespace: spec.finalizers %v, phase %q; want [kubernetes], Active", fs, phaseOf(created))
	}
	put := g.JSON("PUT", nsPath+"/life", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"life","labels":{"a":"b"}},"spec":{"finalizers":[]}}`)
	servertest.MustCode(t, "update namespace", put, http.StatusOK)
	if fs := specFinalizers(put); !slices.Equal(fs, []string{"kubernetes"}) {
		t.Fatalf("an update changed spec.finalizers to %v", fs)
	}
	for what, r := range map[string]servertest.Response{"create": created, "update": put} {
		if l, _ := servertest.MetaOf(r)["labels"].(map[string]any); l["kubernetes.io/metadata.name"] != "life" {
			t.Errorf("after %s: labels %v, want kubernetes.io/metadata.name=life", what, l)
		}
	}
	servertest.MustCode(t, "GET finalize", g.JSON("GET", nsPath+"/life/finalize", ""), http.StatusMethodNotAllowed)

	const cmsLife = "/api/v1/namespaces/life/configmaps"
	servertest.MustCode(t, "create plain", g.JSON("POST", cmsLife, servertest.CM("plain", "")), http.StatusCreated)
	servertest.MustCode(t, "create held", g.JSON("POST", cmsLife, servertest.CM("held", `,"finalizers":["example.com/hold"]`)), http.StatusCreated)

	del := g.JSON("DELETE", nsPath+"/life", "")
	servertest.MustCode(t, "delete namespace", del, http.StatusOK)
	if servertest.MetaOf(del)["deletionTimestamp"] == nil || phaseOf(del) != "Terminating" {
		t.Fatalf("delete answered %s; want a deletionTimestamp and phase Terminating", servertest.Truncate(del.Body))
	}
	// Kubernetes' 403 with the NamespaceTerminating cause (asked of
	// kube-apiserver v1.37.2), which controllers look for to stop retrying.
	late := g.JSON("POST", cmsLife, servertest.CM("late", ""))
	servertest.MustCode(t, "create in a terminating namespace", late, http.StatusForbidden)
	if s := late.Status(); s.Message != `configmaps "late" is forbidden: unable to create new content in namespace life because it is being terminated` ||
		!apierrors.HasStatusCause(&apierrors.StatusError{ErrStatus: s}, corev1.NamespaceTerminatingCause) || s.Details.Name != "late" {
		t.Errorf("create in a terminating namespace: %s", late.Body)
	}
	g.Gone(cmsLife + "/plain")
	held := g.Stays(cmsLife + "/held")
	if servertest.MetaOf(held)["deletionTimestamp"] == nil {
		t.Fatalf("held is not being deleted: %s", servertest.Truncate(held.Body))
	}
	if r := g.Stays(nsPath + "/life"); phaseOf(r) != "Terminating" {
		t.Fatalf("namespace phase %q while content is held, want Terminating", phaseOf(r))
	}
	// Its status says what is left, as Kubernetes' namespace controller
	// reports it (kubectl describe shows these).
	g.Eventually("conditions naming what is left", func() (bool, string) {
		r := g.JSON("GET", nsPath+"/life", "")
		c := servertest.Conditions(r)
		return c["NamespaceContentRemaining"] == "True: Some resources are remaining: configmaps. has 1 resource instances" &&
			c["NamespaceFinalizersRemaining"] == "True: Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances", fmt.Sprint(c)
	})
	p := g.Release(cmsLife + "/held")
	servertest.MustCode(t, "release held", p, http.StatusOK)
	g.Gone(cmsLife + "/held")
	g.Gone(nsPath + "/life")
	// The name can be used again.
	servertest.MustCode(t, "create again", g.JSON("POST", nsPath, nsBody("life", "")), http.StatusCreated)
}

// Finalizers on the namespace itself: a metadata finalizer keeps the empty
// namespace until it is removed; a spec finalizer until /finalize removes
// it.
func TestNamespaceFinalizers(t *testing.T) {
	g := servertest.StartGC(t)
	servertest.MustCode(t, "create meta", g.JSON("POST", nsPath, nsBody("meta", `,"finalizers":["example.com/meta"]`)), http.StatusCreated)
	servertest.MustCode(t, "create spec", g.JSON("POST", nsPath, nsBody("spec", "")), http.StatusCreated)
	fin := g.JSON("PUT", nsPath+"/spec/finalize", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"spec"},"spec":{"finalizers":["kubernetes","example.com/spec"]},"status":{"phase":"Nonsense"}}`)
	servertest.MustCode(t, "finalize", fin, http.StatusOK)
	if fs := specFinalizers(fin); !slices.Equal(fs, []string{"kubernetes", "example.com/spec"}) || phaseOf(fin) != "Active" {
		t.Fatalf("after /finalize: spec.finalizers %v, phase %q; want both finalizers and Active", fs, phaseOf(fin))
	}
	for _, ns := range []string{"meta", "spec"} {
		servertest.MustCode(t, "create content", g.JSON("POST", "/api/v1/namespaces/"+ns+"/configmaps", servertest.CM("c", "")), http.StatusCreated)
		servertest.MustCode(t, "delete "+ns, g.JSON("DELETE", nsPath+"/"+ns, ""), http.StatusOK)
		g.Gone("/api/v1/namespaces/" + ns + "/configmaps/c")
	}
	g.Eventually("the collector removes its own spec finalizer", func() (bool, string) {
		r := g.JSON("GET", nsPath+"/spec", "")
		return slices.Equal(specFinalizers(r), []string{"example.com/spec"}), servertest.Truncate(r.Body)
	})
	if r := g.Stays(nsPath + "/meta"); len(specFinalizers(r)) != 0 || !slices.Equal(servertest.FinalizersOf(r), []string{"example.com/meta"}) {
		t.Fatalf("meta: spec.finalizers %v, finalizers %v; want none and [example.com/meta]", specFinalizers(r), servertest.FinalizersOf(r))
	}
	servertest.MustCode(t, "release meta", g.Release(nsPath+"/meta"), http.StatusOK)
	g.Gone(nsPath + "/meta")
	servertest.MustCode(t, "release spec", g.JSON("PUT", nsPath+"/spec/finalize", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"spec"},"spec":{}}`), http.StatusOK)
	g.Gone(nsPath + "/spec")
}

// A namespace whose deletion was under way when its server stopped (here:
// made Terminating in etcd while no server ran) is emptied and removed by
// the next server.
func TestNamespaceDeletionResumes(t *testing.T) {
	ep := testenv.StartEtcd(t)
	first := testenv.Start(t, testenv.WithEtcd(ep))
	g := &servertest.GCAPI{API: servertest.NewAPI(t, first), T: t}
	servertest.MustCode(t, "create namespace", g.JSON("POST", nsPath, nsBody("resume", "")), http.StatusCreated)
	servertest.MustCode(t, "create content", g.JSON("POST", "/api/v1/namespaces/resume/configmaps", servertest.CM("c", "")), http.StatusCreated)
	first.Stop()
	st := servertest.RawStore(t, first)
	servertest.RewriteKey(t, st, "/registry/core/namespaces/resume", func(m map[string]any) {
		md := m["metadata"].(map[string]any)
		md["deletionTimestamp"] = "2026-11-30T00:00:00Z"
		m["status"] = map[string]any{"phase": "Terminating"}
	})
	second := testenv.Start(t, testenv.WithEtcd(ep))
	g2 := &servertest.GCAPI{API: servertest.NewAPI(t, second), T: t}
	g2.Gone("/api/v1/namespaces/resume/configmaps/c")
	g2.Gone(nsPath + "/resume")
}

// Bad /finalize bodies get a clear error and change nothing.
func TestNamespaceFinalizeBadInput(t *testing.T) {
	g := servertest.StartGC(t)
	servertest.MustCode(t, "create", g.JSON("POST", nsPath, nsBody("x", "")), http.StatusCreated)
	for _, c := range []struct {
		spec string
		code int
	}{
		{`"x"`, http.StatusBadRequest},
		{`[1]`, http.StatusBadRequest},
		{`["bad finalizer!"]`, http.StatusUnprocessableEntity},
		{`["nodomain"]`, http.StatusUnprocessableEntity},
	} {
		r := g.JSON("PUT", nsPath+"/x/finalize", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"},"spec":{"finalizers":`+c.spec+`}}`)
		if r.Code != c.code || r.Status().Message == "" {
			t.Errorf("finalize with %s = %d %s, want %d with a message", c.spec, r.Code, servertest.Truncate(r.Body), c.code)
		}
	}
	servertest.MustCode(t, "finalize with a qualified name", g.JSON("PUT", nsPath+"/x/finalize", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"},"spec":{"finalizers":["kubernetes","example.com/ok"]}}`), http.StatusOK)
	if fs := specFinalizers(g.JSON("GET", nsPath+"/x", "")); !slices.Equal(fs, []string{"kubernetes", "example.com/ok"}) {
		t.Fatalf("spec.finalizers %v after the bad bodies and a good one", fs)
	}
}

// BenchmarkNamespaceDeletion deletes a namespace holding 1,000 ConfigMaps
// and waits until it is gone: go test ./server -run '^$' -bench
// NamespaceDeletion -benchtime 3x. It reports objects removed per second.
func BenchmarkNamespaceDeletion(b *testing.B) {
	const n = 1000
	env := testenv.Start(b)
	c := env.HTTPClient()
	do := func(method, path, body string) int {
		req, _ := http.NewRequest(method, env.Config.Host+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	var total time.Duration
	for i := range b.N {
		b.StopTimer()
		ns := fmt.Sprintf("bench-%d", i)
		if code := do("POST", nsPath, nsBody(ns, "")); code != http.StatusCreated {
			b.Fatalf("create namespace = %d", code)
		}
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for j := w; j < n; j += 16 {
					if code := do("POST", "/api/v1/namespaces/"+ns+"/configmaps", servertest.CM(fmt.Sprint("c", j), "")); code != http.StatusCreated {
						b.Errorf("create = %d", code)
						return
					}
				}
			})
		}
		wg.Wait()
		b.StartTimer()
		start := time.Now()
		if code := do("DELETE", nsPath+"/"+ns, ""); code != http.StatusOK {
			b.Fatalf("delete namespace = %d", code)
		}
		for do("GET", nsPath+"/"+ns, "") != http.StatusNotFound {
			time.Sleep(10 * time.Millisecond)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "objects/s")
}

// As in Kubernetes: default, kube-system and kube-public cannot be
// deleted, and namespaces have no deletecollection.
func TestNamespacesImmortalAndNoCollectionDelete(t *testing.T) {
	g := servertest.StartGC(t)
	for _, ns := range []string{"default", "kube-system", "kube-public"} {
		r := g.JSON("DELETE", nsPath+"/"+ns, "")
		if r.Code != http.StatusForbidden || r.Status().Message != `namespaces "`+ns+`" is forbidden: this namespace may not be deleted` {
			t.Errorf("DELETE namespace %s = %d %s", ns, r.Code, servertest.Truncate(r.Body))
		}
	}
	servertest.MustCode(t, "delete kube-node-lease", g.JSON("DELETE", nsPath+"/kube-node-lease", ""), http.StatusOK)
	servertest.MustCode(t, "deletecollection", g.JSON("DELETE", nsPath, ""), http.StatusMethodNotAllowed)
	servertest.MustCode(t, "default still there", g.JSON("GET", nsPath+"/default", ""), http.StatusOK)
}

// With a NamespaceDeletionDelay (objwatch serve's default, as
// kube-controller-manager's namespace controller), the collector leaves a
// deleted namespace alone for that long: a client that finalizes it
// itself right after its DELETE (test suites written for envtest do) does
// not race the collector's status and finalize writes (controller-runtime's
// client suite failed on that 409), and the content of a namespace nobody
// finalizes is deleted once the delay is over.
func TestNamespaceDeletionDelay(t *testing.T) {
	const delay = 2 * time.Second
	g := servertest.StartGC(t, testenv.WithServerConfig(func(c *server.Config) { c.NamespaceDeletionDelay = delay }))
	for _, ns := range []string{"mine", "held"} {
		servertest.MustCode(t, "create "+ns, g.JSON("POST", nsPath, nsBody(ns, "")), http.StatusCreated)
		servertest.MustCode(t, "create content", g.JSON("POST", "/api/v1/namespaces/"+ns+"/configmaps", servertest.CM("c", "")), http.StatusCreated)
	}
	t0 := time.Now()
	for _, ns := range []string{"mine", "held"} {
		servertest.MustCode(t, "delete "+ns, g.JSON("DELETE", nsPath+"/"+ns, ""), http.StatusOK)
	}
	// controller-runtime's deleteNamespace: read, then finalize what it
	// read (its resourceVersion pinned), after a pause.
	time.Sleep(delay / 4)
	read := g.JSON("GET", nsPath+"/mine", "")
	servertest.MustCode(t, "get mine", read, http.StatusOK)
	obj := read.Object()
	obj["spec"] = map[string]any{"finalizers": []any{}}
	body, _ := json.Marshal(obj)
	servertest.MustCode(t, "finalize mine with the resourceVersion read", g.JSON("PUT", nsPath+"/mine/finalize", string(body)), http.StatusOK)
	held := g.JSON("GET", nsPath+"/held", "")
	if elapsed := time.Since(t0); elapsed < delay*3/4 {
		if phaseOf(held) != "Terminating" || !slices.Equal(specFinalizers(held), []string{"kubernetes"}) {
			t.Fatalf("held %v into its delay: phase %q, spec.finalizers %v; want Terminating, [kubernetes]", elapsed, phaseOf(held), specFinalizers(held))
		}
		servertest.MustCode(t, "held's content in the delay", g.JSON("GET", "/api/v1/namespaces/held/configmaps/c", ""), http.StatusOK)
	}
	g.Gone(nsPath + "/held")
	if elapsed := time.Since(t0); elapsed < delay {
		t.Fatalf("held was deleted %v after its DELETE, before its delay of %v", elapsed, delay)
	}
	g.Gone(nsPath + "/mine") // gone with its finalize, as in Kubernetes
}
