package openapi_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestOpenAPIV2 checks /openapi/v2 the way kubectl uses it: built-in kinds
// and the custom resources of a CRD, JSON and protobuf, and a new document
// once a CRD is added.
func TestOpenAPIV2(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	defer a.C.CloseIdleConnections()

	sw, first := servertest.OpenAPIV2(t, a)
	if sw.Swagger != "2.0" {
		t.Errorf("swagger = %q, want 2.0", sw.Swagger)
	}
	for _, k := range [][3]string{{"", "v1", "ConfigMap"}, {"", "v1", "Namespace"}, {"coordination.k8s.io", "v1", "Lease"}, {"apiextensions.k8s.io", "v1", "CustomResourceDefinition"}} {
		if name, _ := servertest.V2Kind(sw, k[0], k[1], k[2]); name == "" {
			t.Errorf("/openapi/v2 has no definition of %v", k)
		}
	}
	if name, cm := servertest.V2Kind(sw, "", "v1", "ConfigMap"); cm != nil && cm.Properties["data"].AdditionalProperties == nil {
		t.Errorf("%s.data = %+v, want a map", name, cm.Properties["data"])
	}
	if p, ok := sw.Paths.Paths["/api/v1/namespaces/{namespace}/configmaps/{name}"]; !ok || p.Patch == nil || p.Get == nil {
		t.Errorf("/openapi/v2 has no GET and PATCH of a configmap")
	}

	// What client-go's discovery asks for.
	req, _ := http.NewRequest("GET", a.Host+"/openapi/v2", nil)
	req.Header.Set("Accept", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
	resp, err := a.C.Do(req)
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
	req, _ = http.NewRequest("GET", a.Host+"/openapi/v2", nil)
	req.Header.Set("If-None-Match", first.Header.Get("Etag"))
	if resp, err := a.C.Do(req); err != nil || resp.StatusCode != http.StatusNotModified {
		t.Errorf("GET /openapi/v2 with If-None-Match = %v %v, want 304", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}

	// A CRD's versions join the document.
	if r := a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", servertest.OpenAPICRD); r.Code != http.StatusCreated {
		t.Fatalf("create CRD = %d %s", r.Code, r.Body)
	}
	var gadget *spec.Schema
	servertest.EventuallyWithin(t, 10*time.Second, func() bool {
		sw, _ = servertest.OpenAPIV2(t, a)
		_, gadget = servertest.V2Kind(sw, "openapi.objwatch.io", "v1", "Gadget")
		return gadget != nil
	})
	if s := gadget.Properties["spec"]; s.Description != "Spec of the gadget." || s.Properties["size"].Description != "How big the gadget is." {
		t.Errorf("Gadget spec = %+v, want the CRD's schema", s)
	}
	if _, ok := sw.Paths.Paths["/apis/openapi.objwatch.io/v1/namespaces/{namespace}/gadgets/{name}"]; !ok {
		t.Errorf("/openapi/v2 has no path of the gadgets")
	}
	if name, _ := servertest.V2Kind(sw, "", "v1", "ConfigMap"); name == "" {
		t.Errorf("/openapi/v2 lost the built-in kinds when the CRD was merged in")
	}
	if _, r := servertest.OpenAPIV2(t, a); r.Header.Get("Etag") == first.Header.Get("Etag") {
		t.Errorf("the Etag did not change with the document")
	}
}
