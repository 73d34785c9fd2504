package server_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/objwatch/objwatch/testenv"
)

const nsPath = "/api/v1/namespaces"

func nsBody(name, extra string) string {
	return `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + name + `"` + extra + `}}`
}

func specFinalizers(r response) []string {
	var out []string
	spec, _ := r.object()["spec"].(map[string]any)
	fs, _ := spec["finalizers"].([]any)
	for _, f := range fs {
		out = append(out, f.(string))
	}
	return out
}

// conditions maps each status condition's type to "status: message".
func conditions(r response) map[string]string {
	out := map[string]string{}
	st, _ := r.object()["status"].(map[string]any)
	cs, _ := st["conditions"].([]any)
	for _, c := range cs {
		m, _ := c.(map[string]any)
		out[fmt.Sprint(m["type"])] = fmt.Sprintf("%v: %v", m["status"], m["message"])
	}
	return out
}

func phaseOf(r response) string {
	st, _ := r.object()["status"].(map[string]any)
	p, _ := st["phase"].(string)
	return p
}

// A namespace's life: created with the "kubernetes" spec finalizer, which
// only /finalize changes; a DELETE makes it Terminating and forbids new
// content; its content is deleted through the API, so that an object held
// by a finalizer is waited for; then the namespace goes.
func TestNamespaceLifecycle(t *testing.T) {
	g := startGC(t)
	created := g.json("POST", nsPath, nsBody("life", ""))
	mustCode(t, "create namespace", created, http.StatusCreated)
	if fs := specFinalizers(created); !slices.Equal(fs, []string{"kubernetes"}) || phaseOf(created) != "Active" {
		t.Fatalf("new namespace: spec.finalizers %v, phase %q; want [kubernetes], Active", fs, phaseOf(created))
	}
	put := g.json("PUT", nsPath+"/life", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"life","labels":{"a":"b"}},"spec":{"finalizers":[]}}`)
	mustCode(t, "update namespace", put, http.StatusOK)
	if fs := specFinalizers(put); !slices.Equal(fs, []string{"kubernetes"}) {
		t.Fatalf("an update changed spec.finalizers to %v", fs)
	}
	for what, r := range map[string]response{"create": created, "update": put} {
		if l, _ := metaOf(r)["labels"].(map[string]any); l["kubernetes.io/metadata.name"] != "life" {
			t.Errorf("after %s: labels %v, want kubernetes.io/metadata.name=life", what, l)
		}
	}
	mustCode(t, "GET finalize", g.json("GET", nsPath+"/life/finalize", ""), http.StatusMethodNotAllowed)

	const cmsLife = "/api/v1/namespaces/life/configmaps"
	mustCode(t, "create plain", g.json("POST", cmsLife, cm("plain", "")), http.StatusCreated)
	mustCode(t, "create held", g.json("POST", cmsLife, cm("held", `,"finalizers":["example.com/hold"]`)), http.StatusCreated)

	del := g.json("DELETE", nsPath+"/life", "")
	mustCode(t, "delete namespace", del, http.StatusOK)
	if metaOf(del)["deletionTimestamp"] == nil || phaseOf(del) != "Terminating" {
		t.Fatalf("delete answered %s; want a deletionTimestamp and phase Terminating", truncate(del.body))
	}
	mustCode(t, "create in a terminating namespace", g.json("POST", cmsLife, cm("late", "")), http.StatusForbidden)
	g.gone(cmsLife + "/plain")
	held := g.stays(cmsLife + "/held")
	if metaOf(held)["deletionTimestamp"] == nil {
		t.Fatalf("held is not being deleted: %s", truncate(held.body))
	}
	if r := g.stays(nsPath + "/life"); phaseOf(r) != "Terminating" {
		t.Fatalf("namespace phase %q while content is held, want Terminating", phaseOf(r))
	}
	// Its status says what is left, as Kubernetes' namespace controller
	// reports it (kubectl describe shows these).
	g.eventually("conditions naming what is left", func() (bool, string) {
		r := g.json("GET", nsPath+"/life", "")
		c := conditions(r)
		return c["NamespaceContentRemaining"] == "True: Some resources are remaining: configmaps. has 1 resource instances" &&
			c["NamespaceFinalizersRemaining"] == "True: Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances", fmt.Sprint(c)
	})
	p := g.release(cmsLife + "/held")
	mustCode(t, "release held", p, http.StatusOK)
	g.gone(cmsLife + "/held")
	g.gone(nsPath + "/life")
	// The name can be used again.
	mustCode(t, "create again", g.json("POST", nsPath, nsBody("life", "")), http.StatusCreated)
}

// Finalizers on the namespace itself: a metadata finalizer keeps the empty
// namespace until it is removed; a spec finalizer until /finalize removes
// it.
func TestNamespaceFinalizers(t *testing.T) {
	g := startGC(t)
	mustCode(t, "create meta", g.json("POST", nsPath, nsBody("meta", `,"finalizers":["example.com/meta"]`)), http.StatusCreated)
	mustCode(t, "create spec", g.json("POST", nsPath, nsBody("spec", "")), http.StatusCreated)
	fin := g.json("PUT", nsPath+"/spec/finalize", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"spec"},"spec":{"finalizers":["kubernetes","example.com/spec"]},"status":{"phase":"Nonsense"}}`)
	mustCode(t, "finalize", fin, http.StatusOK)
	if fs := specFinalizers(fin); !slices.Equal(fs, []string{"kubernetes", "example.com/spec"}) || phaseOf(fin) != "Active" {
		t.Fatalf("after /finalize: spec.finalizers %v, phase %q; want both finalizers and Active", fs, phaseOf(fin))
	}
	for _, ns := range []string{"meta", "spec"} {
		mustCode(t, "create content", g.json("POST", "/api/v1/namespaces/"+ns+"/configmaps", cm("c", "")), http.StatusCreated)
		mustCode(t, "delete "+ns, g.json("DELETE", nsPath+"/"+ns, ""), http.StatusOK)
		g.gone("/api/v1/namespaces/" + ns + "/configmaps/c")
	}
	g.eventually("the collector removes its own spec finalizer", func() (bool, string) {
		r := g.json("GET", nsPath+"/spec", "")
		return slices.Equal(specFinalizers(r), []string{"example.com/spec"}), truncate(r.body)
	})
	if r := g.stays(nsPath + "/meta"); len(specFinalizers(r)) != 0 || !slices.Equal(finalizersOf(r), []string{"example.com/meta"}) {
		t.Fatalf("meta: spec.finalizers %v, finalizers %v; want none and [example.com/meta]", specFinalizers(r), finalizersOf(r))
	}
	mustCode(t, "release meta", g.release(nsPath+"/meta"), http.StatusOK)
	g.gone(nsPath + "/meta")
	mustCode(t, "release spec", g.json("PUT", nsPath+"/spec/finalize", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"spec"},"spec":{}}`), http.StatusOK)
	g.gone(nsPath + "/spec")
}

// A namespace whose deletion was under way when its server stopped (here:
// made Terminating in etcd while no server ran) is emptied and removed by
// the next server.
func TestNamespaceDeletionResumes(t *testing.T) {
	ep := testenv.StartEtcd(t)
	first := testenv.Start(t, testenv.WithEtcd(ep))
	g := &gcAPI{api: newAPI(t, first), t: t}
	mustCode(t, "create namespace", g.json("POST", nsPath, nsBody("resume", "")), http.StatusCreated)
	mustCode(t, "create content", g.json("POST", "/api/v1/namespaces/resume/configmaps", cm("c", "")), http.StatusCreated)
	first.Stop()
	st := rawStore(t, first)
	rewriteKey(t, st, "/registry/core/namespaces/resume", func(m map[string]any) {
		md := m["metadata"].(map[string]any)
		md["deletionTimestamp"] = "2026-11-30T00:00:00Z"
		m["status"] = map[string]any{"phase": "Terminating"}
	})
	second := testenv.Start(t, testenv.WithEtcd(ep))
	g2 := &gcAPI{api: newAPI(t, second), t: t}
	g2.gone("/api/v1/namespaces/resume/configmaps/c")
	g2.gone(nsPath + "/resume")
}

// Bad /finalize bodies get a clear error and change nothing.
func TestNamespaceFinalizeBadInput(t *testing.T) {
	g := startGC(t)
	mustCode(t, "create", g.json("POST", nsPath, nsBody("x", "")), http.StatusCreated)
	for _, c := range []struct {
		spec string
		code int
	}{
		{`"x"`, http.StatusBadRequest},
		{`[1]`, http.StatusBadRequest},
		{`["bad finalizer!"]`, http.StatusUnprocessableEntity},
		{`["nodomain"]`, http.StatusUnprocessableEntity},
	} {
		r := g.json("PUT", nsPath+"/x/finalize", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"},"spec":{"finalizers":`+c.spec+`}}`)
		if r.code != c.code || r.status().Message == "" {
			t.Errorf("finalize with %s = %d %s, want %d with a message", c.spec, r.code, truncate(r.body), c.code)
		}
	}
	mustCode(t, "finalize with a qualified name", g.json("PUT", nsPath+"/x/finalize", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"},"spec":{"finalizers":["kubernetes","example.com/ok"]}}`), http.StatusOK)
	if fs := specFinalizers(g.json("GET", nsPath+"/x", "")); !slices.Equal(fs, []string{"kubernetes", "example.com/ok"}) {
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
					if code := do("POST", "/api/v1/namespaces/"+ns+"/configmaps", cm(fmt.Sprint("c", j), "")); code != http.StatusCreated {
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
	g := startGC(t)
	for _, ns := range []string{"default", "kube-system", "kube-public"} {
		r := g.json("DELETE", nsPath+"/"+ns, "")
		if r.code != http.StatusForbidden || r.status().Message != `namespaces "`+ns+`" is forbidden: this namespace may not be deleted` {
			t.Errorf("DELETE namespace %s = %d %s", ns, r.code, truncate(r.body))
		}
	}
	mustCode(t, "delete kube-node-lease", g.json("DELETE", nsPath+"/kube-node-lease", ""), http.StatusOK)
	mustCode(t, "deletecollection", g.json("DELETE", nsPath, ""), http.StatusMethodNotAllowed)
	mustCode(t, "default still there", g.json("GET", nsPath+"/default", ""), http.StatusOK)
}
