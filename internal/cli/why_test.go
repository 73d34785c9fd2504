package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/testenv"
)

// whyEnv is a server for objwatch why, with a raw HTTP client to set up
// objects the way the lifecycle tests do.
type whyEnv struct {
	t   *testing.T
	env *testenv.Env
	c   *http.Client
}

func (e *whyEnv) do(method, path, ctype, body string) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.env.Config.Host+path, strings.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	resp, err := e.c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		e.t.Fatalf("%s %s = %d", method, path, resp.StatusCode)
	}
}

func (e *whyEnv) why(resource, name, ns string) string {
	e.t.Helper()
	var out bytes.Buffer
	w := &whyCmd{target: target{kubeconfig: e.env.Kubeconfig, namespace: ns}, now: time.Now}
	if err := w.run(context.Background(), &out, resource, name); err != nil {
		e.t.Fatalf("why %s %s: %v", resource, name, err)
	}
	return out.String()
}

// until retries why until its output contains every want (the collector
// acts asynchronously).
func (e *whyEnv) until(resource, name, ns string, want ...string) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out := e.why(resource, name, ns)
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(out, w)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("why %s %s:\n%s\nwant it to contain %q", resource, name, out, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const whyCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"gadgets.why.objwatch.io"},
 "spec":{"group":"why.objwatch.io","scope":"Namespaced",
  "names":{"plural":"gadgets","singular":"gadget","kind":"Gadget","listKind":"GadgetList"},
  "versions":[{"name":"v1","served":true,"storage":true,
   "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`

func TestWhy(t *testing.T) {
	env := testenv.Start(t)
	e := &whyEnv{t: t, env: env, c: env.HTTPClient()}
	t.Cleanup(e.c.CloseIdleConnections)
	const cms = "/api/v1/namespaces/default/configmaps"
	const js = "application/json"

	e.do("POST", cms, js, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"plain","finalizers":["example.com/x"]}}`)
	if out := e.why("cm", "plain", ""); !strings.Contains(out, "configmap default/plain is not being deleted.\nIts deletion will wait for: example.com/x.") {
		t.Errorf("not deleting:\n%s", out)
	}
	e.do("DELETE", cms+"/plain", js, "")
	if out := e.why("configmaps", "plain", "default"); !strings.Contains(out, "configmap default/plain is being deleted since") ||
		!strings.Contains(out, "- example.com/x: held until the controller that owns this finalizer removes it") {
		t.Errorf("held by a controller's finalizer:\n%s", out)
	}

	// Foreground: a blocking dependent held by its own finalizer.
	e.do("POST", cms, js, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner"}}`)
	owner := e.getUID(cms + "/owner")
	e.do("POST", cms, js, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dep","finalizers":["example.com/hold"],
	  "ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":"`+owner+`","blockOwnerDeletion":true}]}}`)
	e.do("DELETE", cms+"/owner", js, `{"propagationPolicy":"Foreground"}`)
	e.until("cm", "owner", "", "- foregroundDeletion: its dependents are deleted first; 1 dependent blocking it (blockOwnerDeletion)",
		"    configmaps/default/dep (being deleted; finalizers example.com/hold)")

	// A namespace held by its content.
	e.do("POST", "/api/v1/namespaces", js, `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"stuck"}}`)
	e.do("POST", "/api/v1/namespaces/stuck/configmaps", js, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"held","finalizers":["example.com/hold"]}}`)
	e.do("DELETE", "/api/v1/namespaces/stuck", js, "")
	e.until("ns", "stuck", "", "namespace stuck is being deleted", "- kubernetes (spec): the namespace's content is deleted first; 1 object left",
		"    configmaps/held (being deleted; finalizers example.com/hold)")

	// A CustomResourceDefinition held by its objects.
	e.do("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", js, whyCRD)
	gadgets := "/apis/why.objwatch.io/v1/namespaces/default/gadgets"
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequest("GET", env.Config.Host+gadgets, nil)
		resp, err := e.c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("gadgets not served")
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.do("POST", gadgets, js, `{"apiVersion":"why.objwatch.io/v1","kind":"Gadget","metadata":{"name":"g","finalizers":["example.com/hold"]}}`)
	e.do("DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.why.objwatch.io", js, "")
	e.until("crd", "gadgets.why.objwatch.io", "", "- customresourcecleanup.apiextensions.k8s.io: its objects are deleted first; 1 object left",
		"    gadgets.why.objwatch.io/default/g (being deleted; finalizers example.com/hold)")
}

func (e *whyEnv) getUID(path string) string {
	e.t.Helper()
	resp, err := e.c.Get(e.env.Config.Host + path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var o struct {
		Metadata struct{ UID string } `json:"metadata"`
	}
	if err := jsonDecode(resp.Body, &o); err != nil || o.Metadata.UID == "" {
		e.t.Fatalf("uid of %s: %v", path, err)
	}
	return o.Metadata.UID
}

func jsonDecode(r interface{ Read([]byte) (int, error) }, v any) error {
	return json.NewDecoder(r).Decode(v)
}
