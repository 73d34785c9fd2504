package server_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// Deleting a custom resource definition: it gets the cleanup finalizer
// and the Terminating condition, new objects are refused with 405, the
// collector deletes its objects through the API (waiting for one held by
// a finalizer), and then the definition and its endpoints go.
func TestCRDDeletion(t *testing.T) {
	a := startScale(t)
	g := &gcAPI{api: a, t: t}
	mustCode(t, "create plain", a.json("POST", widgets, widget("plain", `"replicas":1`)), http.StatusCreated)
	held := strings.Replace(widget("held", `"replicas":1`), `"metadata":{"name":"held"}`, `"metadata":{"name":"held","finalizers":["example.com/hold"]}`, 1)
	mustCode(t, "create held", a.json("POST", widgets, held), http.StatusCreated)

	const crdPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.scale.objwatch.io"
	del := a.json("DELETE", crdPath, "")
	mustCode(t, "delete CRD", del, http.StatusOK)
	if fs := finalizersOf(del); !slices.Contains(fs, "customresourcecleanup.apiextensions.k8s.io") || metaOf(del)["deletionTimestamp"] == nil {
		t.Fatalf("delete answered finalizers %v, deletionTimestamp %v", fs, metaOf(del)["deletionTimestamp"])
	}
	if !strings.Contains(string(del.body), `"type":"Terminating","status":"True"`) && !strings.Contains(string(del.body), `"status":"True","type":"Terminating"`) {
		t.Errorf("no Terminating condition in %s", truncate(del.body))
	}
	late := a.json("POST", widgets, widget("late", `"replicas":1`))
	if late.code != http.StatusMethodNotAllowed || !strings.Contains(string(late.body), "terminating") {
		t.Errorf("create while the definition is terminating = %d %s, want 405", late.code, truncate(late.body))
	}
	g.gone(widgets + "/plain")
	if r := g.stays(widgets + "/held"); metaOf(r)["deletionTimestamp"] == nil {
		t.Fatalf("held is not being deleted: %s", truncate(r.body))
	}
	if c := conditions(g.stays(crdPath)); !strings.HasPrefix(c["Terminating"], "True") || !strings.HasPrefix(c["Established"], "True") {
		t.Errorf("the terminating definition's conditions: %v", c)
	}
	p := g.release(widgets + "/held")
	mustCode(t, "release held", p, http.StatusOK)
	g.gone(crdPath)
	g.gone(widgets) // no longer served
	// The other definition is untouched, and widgets can be defined again, empty.
	mustCode(t, "gizmos", a.json("GET", gizmos, ""), http.StatusOK)
	mustCode(t, "create CRD again", a.json("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", scaleCRD), http.StatusCreated)
	g.eventually("widgets served again", func() (bool, string) {
		r := a.json("GET", widgets, "")
		return r.code == http.StatusOK && !strings.Contains(string(r.body), `"name":"held"`), truncate(r.body)
	})
}

// What a DELETE answers, as Kubernetes' own server answered the same
// requests for a custom resource (the reference apiextensions-apiserver,
// checked side by side): a Status when the object is deleted at once (also
// with dryRun), the object when finalizers keep it, 202 for that with
// orphanDependents=false, and the start of a deletion bumps a generation
// once.
func TestDeleteAnswers(t *testing.T) {
	a := startScale(t)
	held := func(name string) {
		t.Helper()
		body := strings.Replace(widget(name, `"replicas":1`), `"metadata":{"name":"`+name+`"}`, `"metadata":{"name":"`+name+`","finalizers":["example.com/x"]}`, 1)
		mustCode(t, "create "+name, a.json("POST", widgets, body), http.StatusCreated)
	}
	kind := func(r response) any { return r.object()["kind"] }
	generation := func(r response) any { return metaOf(r)["generation"] }

	mustCode(t, "create plain", a.json("POST", widgets, widget("plain", `"replicas":1`)), http.StatusCreated)
	if r := a.json("DELETE", widgets+"/plain?dryRun=All", ""); r.code != http.StatusOK || kind(r) != "Status" {
		t.Errorf("dry-run delete = %d %v, want 200 Status", r.code, kind(r))
	}
	if r := a.json("DELETE", widgets+"/plain", ""); r.code != http.StatusOK || kind(r) != "Status" {
		t.Errorf("delete = %d %v, want 200 Status", r.code, kind(r))
	}

	held("held")
	r := a.json("DELETE", widgets+"/held", "")
	if r.code != http.StatusOK || kind(r) != "Widget" || generation(r) != float64(2) {
		t.Errorf("delete of a held object = %d %v generation %v, want 200 Widget generation 2", r.code, kind(r), generation(r))
	}
	r = a.json("DELETE", widgets+"/held", "")
	if r.code != http.StatusOK || kind(r) != "Widget" || generation(r) != float64(2) {
		t.Errorf("second delete = %d %v generation %v, want 200 Widget generation 2", r.code, kind(r), generation(r))
	}

	held("cascade")
	if r := a.json("DELETE", widgets+"/cascade", `{"orphanDependents":false}`); r.code != http.StatusAccepted || kind(r) != "Widget" {
		t.Errorf("delete with orphanDependents=false of a held object = %d %v, want 202 Widget", r.code, kind(r))
	}
}
