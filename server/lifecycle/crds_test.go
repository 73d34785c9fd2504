package lifecycle_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// Deleting a custom resource definition: it gets the cleanup finalizer
// and the Terminating condition, new objects are refused with 405, the
// collector deletes its objects through the API (waiting for one held by
// a finalizer), and then the definition and its endpoints go.
func TestCRDDeletion(t *testing.T) {
	a := servertest.StartScale(t)
	g := &servertest.GCAPI{API: a, T: t}
	servertest.MustCode(t, "create plain", a.JSON("POST", servertest.Widgets, servertest.Widget("plain", `"replicas":1`)), http.StatusCreated)
	held := strings.Replace(servertest.Widget("held", `"replicas":1`), `"metadata":{"name":"held"}`, `"metadata":{"name":"held","finalizers":["example.com/hold"]}`, 1)
	servertest.MustCode(t, "create held", a.JSON("POST", servertest.Widgets, held), http.StatusCreated)

	const crdPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.scale.objwatch.io"
	del := a.JSON("DELETE", crdPath, "")
	servertest.MustCode(t, "delete CRD", del, http.StatusOK)
	if fs := servertest.FinalizersOf(del); !slices.Contains(fs, "customresourcecleanup.apiextensions.k8s.io") || servertest.MetaOf(del)["deletionTimestamp"] == nil {
		t.Fatalf("delete answered finalizers %v, deletionTimestamp %v", fs, servertest.MetaOf(del)["deletionTimestamp"])
	}
	if !strings.Contains(string(del.Body), `"type":"Terminating","status":"True"`) && !strings.Contains(string(del.Body), `"status":"True","type":"Terminating"`) {
		t.Errorf("no Terminating condition in %s", servertest.Truncate(del.Body))
	}
	late := a.JSON("POST", servertest.Widgets, servertest.Widget("late", `"replicas":1`))
	if late.Code != http.StatusMethodNotAllowed || !strings.Contains(string(late.Body), "terminating") {
		t.Errorf("create while the definition is terminating = %d %s, want 405", late.Code, servertest.Truncate(late.Body))
	}
	g.Gone(servertest.Widgets + "/plain")
	if r := g.Stays(servertest.Widgets + "/held"); servertest.MetaOf(r)["deletionTimestamp"] == nil {
		t.Fatalf("held is not being deleted: %s", servertest.Truncate(r.Body))
	}
	if c := servertest.Conditions(g.Stays(crdPath)); !strings.HasPrefix(c["Terminating"], "True") || !strings.HasPrefix(c["Established"], "True") {
		t.Errorf("the terminating definition's conditions: %v", c)
	}
	p := g.Release(servertest.Widgets + "/held")
	servertest.MustCode(t, "release held", p, http.StatusOK)
	g.Gone(crdPath)
	g.Gone(servertest.Widgets) // no longer served
	// The other definition is untouched, and widgets can be defined again, empty.
	servertest.MustCode(t, "gizmos", a.JSON("GET", servertest.Gizmos, ""), http.StatusOK)
	servertest.MustCode(t, "create CRD again", a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", servertest.ScaleCRD), http.StatusCreated)
	g.Eventually("widgets served again", func() (bool, string) {
		r := a.JSON("GET", servertest.Widgets, "")
		return r.Code == http.StatusOK && !strings.Contains(string(r.Body), `"name":"held"`), servertest.Truncate(r.Body)
	})
}

// What a DELETE answers, as Kubernetes' own server answered the same
// requests for a custom resource (the reference apiextensions-apiserver,
// checked side by side): a Status when the object is deleted at once (also
// with dryRun), the object when finalizers keep it, 202 for that with
// orphanDependents=false, and the start of a deletion bumps a generation
// once.
func TestDeleteAnswers(t *testing.T) {
	a := servertest.StartScale(t)
	held := func(name string) {
		t.Helper()
		body := strings.Replace(servertest.Widget(name, `"replicas":1`), `"metadata":{"name":"`+name+`"}`, `"metadata":{"name":"`+name+`","finalizers":["example.com/x"]}`, 1)
		servertest.MustCode(t, "create "+name, a.JSON("POST", servertest.Widgets, body), http.StatusCreated)
	}
	kind := func(r servertest.Response) any { return r.Object()["kind"] }
	generation := func(r servertest.Response) any { return servertest.MetaOf(r)["generation"] }

	servertest.MustCode(t, "create plain", a.JSON("POST", servertest.Widgets, servertest.Widget("plain", `"replicas":1`)), http.StatusCreated)
	if r := a.JSON("DELETE", servertest.Widgets+"/plain?dryRun=All", ""); r.Code != http.StatusOK || kind(r) != "Status" {
		t.Errorf("dry-run delete = %d %v, want 200 Status", r.Code, kind(r))
	}
	if r := a.JSON("DELETE", servertest.Widgets+"/plain", ""); r.Code != http.StatusOK || kind(r) != "Status" {
		t.Errorf("delete = %d %v, want 200 Status", r.Code, kind(r))
	}

	held("held")
	r := a.JSON("DELETE", servertest.Widgets+"/held", "")
	if r.Code != http.StatusOK || kind(r) != "Widget" || generation(r) != float64(2) {
		t.Errorf("delete of a held object = %d %v generation %v, want 200 Widget generation 2", r.Code, kind(r), generation(r))
	}
	r = a.JSON("DELETE", servertest.Widgets+"/held", "")
	if r.Code != http.StatusOK || kind(r) != "Widget" || generation(r) != float64(2) {
		t.Errorf("second delete = %d %v generation %v, want 200 Widget generation 2", r.Code, kind(r), generation(r))
	}

	held("cascade")
	if r := a.JSON("DELETE", servertest.Widgets+"/cascade", `{"orphanDependents":false}`); r.Code != http.StatusAccepted || kind(r) != "Widget" {
		t.Errorf("delete with orphanDependents=false of a held object = %d %v, want 202 Widget", r.Code, kind(r))
	}
}

// A CRD's resources are served by the time its status says Established,
// as with kube-apiserver: a client that polls for the condition and then
// lists at once never gets a 404.
func TestCRDServedWhenEstablished(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	for i := range 10 {
		plural := fmt.Sprintf("things%d", i)
		crd := fmt.Sprintf(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"%s.race.objwatch.io"},
 "spec":{"group":"race.objwatch.io","scope":"Namespaced",
  "names":{"plural":"%s","singular":"thing%d","kind":"Thing%d","listKind":"Thing%dList"},
  "versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`, plural, plural, i, i, i)
		servertest.MustCode(t, "create CRD", a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd), http.StatusCreated)
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := a.JSON("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+plural+".race.objwatch.io", "")
			if strings.Contains(string(r.Body), `"status":"True","type":"Established"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not Established in 10 s: %s", plural, r.Body)
			}
		}
		servertest.MustCode(t, "list right after Established", a.JSON("GET", "/apis/race.objwatch.io/v1/namespaces/default/"+plural, ""), http.StatusOK)
	}
}
