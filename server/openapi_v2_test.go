package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/objwatch/objwatch/testenv"
)

// openAPIV2 fetches /openapi/v2 as JSON.
func openAPIV2(t *testing.T, a *api) (*spec.Swagger, response) {
	t.Helper()
	r := a.do("GET", "/openapi/v2", "", nil)
	if r.code != http.StatusOK || r.header.Get("Content-Type") != "application/json" || r.header.Get("Etag") == "" {
		t.Fatalf("GET /openapi/v2 = %d %s Etag %q %.300s, want 200 application/json with an Etag", r.code, r.header.Get("Content-Type"), r.header.Get("Etag"), r.body)
	}
	sw := new(spec.Swagger)
	if err := json.Unmarshal(r.body, sw); err != nil {
		t.Fatalf("GET /openapi/v2: %v", err)
	}
	return sw, r
}

// v2Kind returns the definition tagged with group, version and kind.
func v2Kind(sw *spec.Swagger, group, version, kind string) (string, *spec.Schema) {
	for name, s := range sw.Definitions {
		var gvks []map[string]any
		raw, _ := json.Marshal(s.Extensions["x-kubernetes-group-version-kind"])
		json.Unmarshal(raw, &gvks)
		for _, g := range gvks {
			if g["group"] == group && g["version"] == version && g["kind"] == kind {
				return name, &s
			}
		}
	}
	return "", nil
}

// TestOpenAPIV2 checks /openapi/v2 the way kubectl uses it: built-in kinds
// and the custom resources of a CRD, JSON and protobuf, and a new document
// once a CRD is added.
func TestOpenAPIV2(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	defer a.c.CloseIdleConnections()

	sw, first := openAPIV2(t, a)
	if sw.Swagger != "2.0" {
		t.Errorf("swagger = %q, want 2.0", sw.Swagger)
	}
	for _, k := range [][3]string{{"", "v1", "ConfigMap"}, {"", "v1", "Namespace"}, {"coordination.k8s.io", "v1", "Lease"}, {"apiextensions.k8s.io", "v1", "CustomResourceDefinition"}} {
		if name, _ := v2Kind(sw, k[0], k[1], k[2]); name == "" {
			t.Errorf("/openapi/v2 has no definition of %v", k)
		}
	}
	if name, cm := v2Kind(sw, "", "v1", "ConfigMap"); cm != nil && cm.Properties["data"].AdditionalProperties == nil {
		t.Errorf("%s.data = %+v, want a map", name, cm.Properties["data"])
	}
	if p, ok := sw.Paths.Paths["/api/v1/namespaces/{namespace}/configmaps/{name}"]; !ok || p.Patch == nil || p.Get == nil {
		t.Errorf("/openapi/v2 has no GET and PATCH of a configmap")
	}

	// What client-go's discovery asks for.
	req, _ := http.NewRequest("GET", a.host+"/openapi/v2", nil)
	req.Header.Set("Accept", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
	resp, err := a.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "application/com.github.proto-openapi.spec.v2.v1.0+protobuf" {
		t.Fatalf("GET /openapi/v2 as protobuf = %d %s, want 200 protobuf", resp.StatusCode, ct)
	}
	var doc openapi_v2.Document
	if err := proto.Unmarshal(body, &doc); err != nil || doc.Swagger != "2.0" || len(doc.Definitions.GetAdditionalProperties()) != len(sw.Definitions) {
		t.Errorf("protobuf document: %v, swagger %q, %d definitions, want 2.0 and %d", err, doc.Swagger, len(doc.Definitions.GetAdditionalProperties()), len(sw.Definitions))
	}

	// A conditional request with the ETag is answered 304.
	req, _ = http.NewRequest("GET", a.host+"/openapi/v2", nil)
	req.Header.Set("If-None-Match", first.header.Get("Etag"))
	if resp, err := a.c.Do(req); err != nil || resp.StatusCode != http.StatusNotModified {
		t.Errorf("GET /openapi/v2 with If-None-Match = %v %v, want 304", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}

	// A CRD's versions join the document.
	if r := a.json("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", openAPICRD); r.code != http.StatusCreated {
		t.Fatalf("create CRD = %d %s", r.code, r.body)
	}
	var gadget *spec.Schema
	oaEventually(t, 10*time.Second, func() bool {
		sw, _ = openAPIV2(t, a)
		_, gadget = v2Kind(sw, "openapi.objwatch.io", "v1", "Gadget")
		return gadget != nil
	})
	if s := gadget.Properties["spec"]; s.Description != "Spec of the gadget." || s.Properties["size"].Description != "How big the gadget is." {
		t.Errorf("Gadget spec = %+v, want the CRD's schema", s)
	}
	if _, ok := sw.Paths.Paths["/apis/openapi.objwatch.io/v1/namespaces/{namespace}/gadgets/{name}"]; !ok {
		t.Errorf("/openapi/v2 has no path of the gadgets")
	}
	if name, _ := v2Kind(sw, "", "v1", "ConfigMap"); name == "" {
		t.Errorf("/openapi/v2 lost the built-in kinds when the CRD was merged in")
	}
	if _, r := openAPIV2(t, a); r.header.Get("Etag") == first.header.Get("Etag") {
		t.Errorf("the Etag did not change with the document")
	}
}
