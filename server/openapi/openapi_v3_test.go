package openapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// openAPIDocument fetches the document of group version gv ("api/v1",
// "apis/<group>/<version>") at the URL discovery gives.
func openAPIDocument(t *testing.T, a *servertest.API, d handler3.OpenAPIV3Discovery, gv string) *spec3.OpenAPI {
	t.Helper()
	p, ok := d.Paths[gv]
	if !ok {
		t.Fatalf("GET /openapi/v3 has no %s: %v", gv, d.Paths)
	}
	r := a.Do("GET", p.ServerRelativeURL, "", nil)
	if r.Code != http.StatusOK || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s = %d %s %.300s, want 200 application/json", p.ServerRelativeURL, r.Code, r.Header.Get("Content-Type"), r.Body)
	}
	if cc := r.Header.Get("Cache-Control"); cc != "public, immutable" {
		t.Errorf("GET %s: Cache-Control = %q, want public, immutable", p.ServerRelativeURL, cc)
	}
	doc := new(spec3.OpenAPI)
	if err := json.Unmarshal(r.Body, doc); err != nil {
		t.Fatalf("GET %s: %v", p.ServerRelativeURL, err)
	}
	return doc
}

type oaGVK struct{ group, version, kind string }

// oaGVKs returns the x-kubernetes-group-version-kind of a schema or
// operation.
func oaGVKs(ext spec.Extensions) []oaGVK {
	var out []oaGVK
	b, _ := json.Marshal(ext["x-kubernetes-group-version-kind"])
	var list []map[string]string
	if json.Unmarshal(b, &list) != nil {
		var one map[string]string
		json.Unmarshal(b, &one)
		list = append(list, one)
	}
	for _, m := range list {
		out = append(out, oaGVK{m["group"], m["version"], m["kind"]})
	}
	return out
}

// oaKindSchema returns the schema tagged with the group version kind k.
func oaKindSchema(doc *spec3.OpenAPI, k oaGVK) (string, *spec.Schema) {
	for name, s := range doc.Components.Schemas {
		if slices.Contains(oaGVKs(s.Extensions), k) {
			return name, s
		}
	}
	return "", nil
}

// oaCheckOperations checks the operations kubectl relies on for the resource
// at item (the path of one object).
func oaCheckOperations(t *testing.T, doc *spec3.OpenAPI, item string, k oaGVK, patchTypes ...string) {
	t.Helper()
	p, ok := doc.Paths.Paths[item]
	if !ok {
		t.Errorf("document for %v has no path %s", k, item)
		return
	}
	ops := map[string]*spec3.Operation{"GET": p.Get, "PUT": p.Put, "PATCH": p.Patch, "DELETE": p.Delete}
	collection, _ := strings.CutSuffix(item, "/{name}")
	if c, ok := doc.Paths.Paths[collection]; ok {
		ops["LIST"], ops["POST"], ops["DELETECOLLECTION"] = c.Get, c.Post, c.Delete
	} else {
		t.Errorf("document for %v has no path %s", k, collection)
	}
	for method, op := range ops {
		if op == nil {
			t.Errorf("%s %s: no operation", method, item)
			continue
		}
		if got := oaGVKs(op.Extensions); !slices.Equal(got, []oaGVK{k}) {
			t.Errorf("%s %s: x-kubernetes-group-version-kind = %v, want %v", method, item, got, k)
		}
		var params []string
		for _, prm := range op.Parameters {
			if prm.In == "query" {
				params = append(params, prm.Name)
			}
		}
		if method == "PATCH" || method == "POST" || method == "PUT" {
			for _, want := range []string{"fieldValidation", "dryRun", "fieldManager"} {
				if !slices.Contains(params, want) {
					t.Errorf("%s %s: query parameters %v lack %s", method, item, params, want)
				}
			}
		}
	}
	if p.Patch != nil && p.Patch.RequestBody != nil {
		for _, ct := range patchTypes {
			if _, ok := p.Patch.RequestBody.Content[ct]; !ok {
				t.Errorf("PATCH %s: request body lacks %s", item, ct)
			}
		}
	}
}

func TestOpenAPIV3BuiltIn(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	defer a.C.CloseIdleConnections()
	d := servertest.OpenAPIDiscovery(t, a)

	strategic := []string{"application/strategic-merge-patch+json", "application/merge-patch+json", "application/json-patch+json"}
	tests := []struct {
		gv   string
		kind oaGVK
		item string
	}{
		{"api/v1", oaGVK{"", "v1", "ConfigMap"}, "/api/v1/namespaces/{namespace}/configmaps/{name}"},
		{"api/v1", oaGVK{"", "v1", "Secret"}, "/api/v1/namespaces/{namespace}/secrets/{name}"},
		{"api/v1", oaGVK{"", "v1", "Event"}, "/api/v1/namespaces/{namespace}/events/{name}"},
		{"api/v1", oaGVK{"", "v1", "Namespace"}, "/api/v1/namespaces/{name}"},
		{"apis/coordination.k8s.io/v1", oaGVK{"coordination.k8s.io", "v1", "Lease"}, "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"},
		{"apis/apiextensions.k8s.io/v1", oaGVK{"apiextensions.k8s.io", "v1", "CustomResourceDefinition"}, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"},
	}
	docs := map[string]*spec3.OpenAPI{}
	for _, tc := range tests {
		t.Run(tc.kind.kind, func(t *testing.T) {
			doc, ok := docs[tc.gv]
			if !ok {
				doc = openAPIDocument(t, a, d, tc.gv)
				docs[tc.gv] = doc
			}
			if name, s := oaKindSchema(doc, tc.kind); s == nil {
				t.Errorf("%s has no schema for %v", tc.gv, tc.kind)
			} else if md := s.Properties["metadata"]; md.Ref.String() == "" && len(md.AllOf) == 0 {
				t.Errorf("%s schema %s: metadata = %+v, want a reference to ObjectMeta", tc.gv, name, s.Properties["metadata"])
			}
			list := tc.kind
			list.kind += "List"
			if _, s := oaKindSchema(doc, list); s == nil {
				t.Errorf("%s has no schema for %v", tc.gv, list)
			}
			oaCheckOperations(t, doc, tc.item, tc.kind, strategic...)
		})
	}

	// Every built-in resource has its kind's schema.
	for _, res := range env.Server.Registry().Resources() {
		if res.Custom {
			continue
		}
		gv := "apis/" + res.Group + "/" + res.Version
		if res.Group == "" {
			gv = "api/" + res.Version
		}
		doc, ok := docs[gv]
		if !ok {
			doc = openAPIDocument(t, a, d, gv)
			docs[gv] = doc
		}
		kinds := []string{res.Kind, res.ListKind}
		if res.Review {
			kinds = kinds[:1] // created only: no list
		}
		for _, kind := range kinds {
			if _, s := oaKindSchema(doc, oaGVK{res.Group, res.Version, kind}); s == nil {
				t.Errorf("%s has no schema for %s", gv, kind)
			}
		}
	}

	// Descriptions and patch strategies come from Kubernetes' generated
	// definitions.
	_, ns := oaKindSchema(docs["api/v1"], oaGVK{"", "v1", "Namespace"})
	nsStatus := docs["api/v1"].Components.Schemas["io.k8s.api.core.v1.NamespaceStatus"]
	if ns == nil || !strings.Contains(ns.Description, "Namespace provides a scope for Names") || nsStatus == nil {
		t.Fatalf("Namespace schema = %+v, status %+v, want Kubernetes' descriptions", ns, nsStatus)
	}
	cond := nsStatus.Properties["conditions"]
	if s, _ := cond.Extensions.GetString("x-kubernetes-patch-strategy"); s != "merge" {
		t.Errorf("NamespaceStatus.conditions x-kubernetes-patch-strategy = %q, want merge", s)
	}
	if k, _ := cond.Extensions.GetString("x-kubernetes-patch-merge-key"); k != "type" {
		t.Errorf("NamespaceStatus.conditions x-kubernetes-patch-merge-key = %q, want type", k)
	}
	if p := docs["api/v1"].Paths.Paths["/api/v1/namespaces/{name}/status"]; p == nil || p.Patch == nil {
		t.Errorf("api/v1 has no PATCH /api/v1/namespaces/{name}/status")
	}

	// A stale hash redirects to the current document; a missing one is 404.
	u := d.Paths["api/v1"].ServerRelativeURL
	req, _ := http.NewRequest("GET", a.Host+"/openapi/v3/api/v1?hash=0123", nil)
	resp, err := (&http.Client{Transport: a.C.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != u {
		t.Errorf("GET with a stale hash = %d Location %q, want 301 %s", resp.StatusCode, resp.Header.Get("Location"), u)
	}
	if r := a.Do("GET", "/openapi/v3/apis/nothing.example.com/v1", "", nil); r.Code != http.StatusNotFound || r.Status().Kind != "Status" {
		t.Errorf("GET /openapi/v3/apis/nothing.example.com/v1 = %d %s, want 404 Status", r.Code, r.Body)
	}

	// kubectl may ask for protobuf.
	req, _ = http.NewRequest("GET", a.Host+u, nil)
	req.Header.Set("Accept", "application/com.github.proto-openapi.spec.v3@v1.0+protobuf")
	resp, err = a.C.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "application/com.github.proto-openapi.spec.v3.v1.0+protobuf" {
		t.Errorf("GET %s as protobuf = %d %s %.300s, want 200 protobuf", u, resp.StatusCode, ct, body)
	}
}

func TestOpenAPIV3CustomResource(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	defer a.C.CloseIdleConnections()
	const gv = "apis/openapi.objwatch.io/v1"
	before := servertest.OpenAPIDiscovery(t, a)
	if _, ok := before.Paths[gv]; ok {
		t.Fatalf("GET /openapi/v3 lists %s before its CRD exists", gv)
	}

	if r := a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", servertest.OpenAPICRD); r.Code != http.StatusCreated {
		t.Fatalf("create CRD = %d %s", r.Code, r.Body)
	}
	servertest.EventuallyWithin(t, 10*time.Second, func() bool { return a.Do("GET", "/"+gv, "", nil).Code == http.StatusOK })

	d := servertest.OpenAPIDiscovery(t, a)
	if d.Paths["api/v1"] != before.Paths["api/v1"] {
		t.Errorf("api/v1 URL changed when a CRD was added: %v, was %v", d.Paths["api/v1"], before.Paths["api/v1"])
	}
	doc := openAPIDocument(t, a, d, gv)
	k := oaGVK{"openapi.objwatch.io", "v1", "Gadget"}
	name, s := oaKindSchema(doc, k)
	if s == nil {
		t.Fatalf("%s has no schema for %v: %v", gv, k, doc.Components.Schemas)
	}
	if spec := s.Properties["spec"]; spec.Description != "Spec of the gadget." || spec.Properties["size"].Description != "How big the gadget is." {
		t.Errorf("%s schema %s: spec = %+v, want the CRD's descriptions", gv, name, spec)
	}
	if _, s := oaKindSchema(doc, oaGVK{"openapi.objwatch.io", "v1", "GadgetList"}); s == nil {
		t.Errorf("%s has no GadgetList schema", gv)
	}
	oaCheckOperations(t, doc, "/apis/openapi.objwatch.io/v1/namespaces/{namespace}/gadgets/{name}", k,
		"application/merge-patch+json", "application/json-patch+json")
	// Custom resources have no strategic merge patch; kubectl then sends a
	// JSON merge patch.
	if p := doc.Paths.Paths["/apis/openapi.objwatch.io/v1/namespaces/{namespace}/gadgets/{name}"]; p != nil && p.Patch != nil && p.Patch.RequestBody != nil {
		if _, ok := p.Patch.RequestBody.Content["application/strategic-merge-patch+json"]; ok {
			t.Errorf("PATCH of a custom resource accepts application/strategic-merge-patch+json")
		}
	}

	if r := a.Do("DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.openapi.objwatch.io", "", nil); r.Code != http.StatusOK {
		t.Fatalf("delete CRD = %d %s", r.Code, r.Body)
	}
	servertest.EventuallyWithin(t, 10*time.Second, func() bool {
		_, ok := servertest.OpenAPIDiscovery(t, a).Paths[gv]
		return !ok
	})
	if r := a.Do("GET", "/openapi/v3/"+gv, "", nil); r.Code != http.StatusNotFound {
		t.Errorf("GET /openapi/v3/%s after the CRD is deleted = %d, want 404", gv, r.Code)
	}
}
