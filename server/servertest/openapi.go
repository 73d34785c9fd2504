package servertest

import (
	"encoding/json"

	"net/http"

	"testing"
	"time"

	"k8s.io/kube-openapi/pkg/handler3"
)

const OpenAPICRD = `{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "gadgets.openapi.objwatch.io"},
  "spec": {
    "group": "openapi.objwatch.io",
    "scope": "Namespaced",
    "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
    "versions": [{
      "name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {
        "type": "object",
        "properties": {"spec": {
          "type": "object",
          "description": "Spec of the gadget.",
          "properties": {"size": {"type": "string", "description": "How big the gadget is."}}
        }}
      }}
    }]
  }
}`

// OpenAPIDiscovery fetches /openapi/v3.
func OpenAPIDiscovery(t *testing.T, a *API) handler3.OpenAPIV3Discovery {
	t.Helper()
	r := a.Do("GET", "/openapi/v3", "", nil)
	if r.Code != http.StatusOK || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi/v3 = %d %s %.300s, want 200 application/json", r.Code, r.Header.Get("Content-Type"), r.Body)
	}
	var d handler3.OpenAPIV3Discovery
	if err := json.Unmarshal(r.Body, &d); err != nil {
		t.Fatalf("GET /openapi/v3: %v", err)
	}
	return d
}

func EventuallyWithin(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
