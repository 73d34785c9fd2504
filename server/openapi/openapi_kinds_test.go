package openapi_test

import (
	"encoding/json"
	"slices"
	"testing"

	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestOpenAPIKubeKinds: the kinds defined with Kubernetes' own rules
// (package registry/kube) are published with their paths, /scale where
// they have one, and Kubernetes' generated schemas, including the list-map
// markers server-side apply and kubectl rely on.
func TestOpenAPIKubeKinds(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	defer a.C.CloseIdleConnections()
	d := servertest.OpenAPIDiscovery(t, a)

	strategic := []string{"application/strategic-merge-patch+json", "application/apply-patch+yaml"}
	docs := map[string]*spec3.OpenAPI{}
	for _, tc := range []struct {
		gv    string
		kind  oaGVK
		item  string
		scale bool
	}{
		{"api/v1", oaGVK{"", "v1", "Pod"}, "/api/v1/namespaces/{namespace}/pods/{name}", false},
		{"api/v1", oaGVK{"", "v1", "Node"}, "/api/v1/nodes/{name}", false},
		{"apis/apps/v1", oaGVK{"apps", "v1", "Deployment"}, "/apis/apps/v1/namespaces/{namespace}/deployments/{name}", true},
		{"apis/batch/v1", oaGVK{"batch", "v1", "Job"}, "/apis/batch/v1/namespaces/{namespace}/jobs/{name}", false},
		{"apis/batch/v1", oaGVK{"batch", "v1", "CronJob"}, "/apis/batch/v1/namespaces/{namespace}/cronjobs/{name}", false},
	} {
		doc, ok := docs[tc.gv]
		if !ok {
			doc = openAPIDocument(t, a, d, tc.gv)
			docs[tc.gv] = doc
		}
		if _, s := oaKindSchema(doc, tc.kind); s == nil || s.Description == "" {
			t.Errorf("%s: schema of %v = %+v, want one with Kubernetes' description", tc.gv, tc.kind, s)
		}
		oaCheckOperations(t, doc, tc.item, tc.kind, strategic...)
		if p := doc.Paths.Paths[tc.item+"/status"]; p == nil || p.Put == nil {
			t.Errorf("%s: no PUT %s/status", tc.gv, tc.item)
		}
		if !tc.scale {
			continue
		}
		if p := doc.Paths.Paths[tc.item+"/scale"]; p == nil || p.Get == nil || p.Patch == nil {
			t.Errorf("%s: no GET and PATCH of %s/scale", tc.gv, tc.item)
		} else if got := oaGVKs(p.Get.Extensions); !slices.Equal(got, []oaGVK{{"autoscaling", "v1", "Scale"}}) {
			t.Errorf("GET %s/scale: x-kubernetes-group-version-kind = %v, want autoscaling/v1 Scale", tc.item, got)
		}
	}

	core := docs["api/v1"].Components.Schemas
	apps := docs["apis/apps/v1"].Components.Schemas
	checks := []struct {
		what   string
		schema *spec.Schema
		ext    map[string]string // extension: its JSON value
	}{
		{"PodSpec.containers", oaProperty(core, "io.k8s.api.core.v1.PodSpec", "containers"),
			map[string]string{"x-kubernetes-list-type": `"map"`, "x-kubernetes-list-map-keys": `["name"]`}},
		{"Container.ports", oaProperty(core, "io.k8s.api.core.v1.Container", "ports"),
			map[string]string{"x-kubernetes-list-type": `"map"`, "x-kubernetes-list-map-keys": `["containerPort","protocol"]`}},
		{"PodSpec.tolerations", oaProperty(core, "io.k8s.api.core.v1.PodSpec", "tolerations"),
			map[string]string{"x-kubernetes-list-type": `"atomic"`}},
		{"LabelSelector (a Deployment's spec.selector)", apps["io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"],
			map[string]string{"x-kubernetes-map-type": `"atomic"`}},
	}
	for _, c := range checks {
		if c.schema == nil {
			t.Errorf("%s: no schema", c.what)
			continue
		}
		for k, want := range c.ext {
			if got, _ := json.Marshal(c.schema.Extensions[k]); string(got) != want {
				t.Errorf("%s: %s = %s, want %s", c.what, k, got, want)
			}
		}
	}
	if p := oaProperty(core, "io.k8s.api.core.v1.ContainerPort", "protocol"); p == nil || p.Default != "TCP" || !slices.Contains(p.Enum, any("SCTP")) {
		t.Errorf("ContainerPort.protocol = %+v, want default TCP and enum TCP, UDP, SCTP", p)
	}
	if s := apps["io.k8s.api.apps.v1.DeploymentSpec"]; s == nil || !slices.Contains(s.Required, "selector") || !slices.Contains(s.Required, "template") {
		t.Errorf("DeploymentSpec required = %+v, want selector and template", s)
	}

	// As in kube-apiserver's documents, the kinds every group registers
	// are tagged with the document's and core/v1's only.
	if s := apps["io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"]; s == nil {
		t.Errorf("apps/v1 has no DeleteOptions")
	} else if got := oaGVKs(s.Extensions); !slices.Equal(got, []oaGVK{{"", "v1", "DeleteOptions"}, {"apps", "v1", "DeleteOptions"}}) {
		t.Errorf("apps/v1 DeleteOptions x-kubernetes-group-version-kind = %v, want core/v1 and apps/v1", got)
	}

	// The v2 document has them too.
	sw, _ := servertest.OpenAPIV2(t, a)
	if name, _ := servertest.V2Kind(sw, "apps", "v1", "Deployment"); name == "" {
		t.Errorf("/openapi/v2 has no Deployment")
	}
	if _, ok := sw.Paths.Paths["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]; !ok {
		t.Errorf("/openapi/v2 has no deployments' /scale")
	}
	if ps, ok := sw.Definitions["io.k8s.api.core.v1.PodSpec"]; !ok {
		t.Errorf("/openapi/v2 has no PodSpec")
	} else if keys, _ := json.Marshal(ps.Properties["containers"].Extensions["x-kubernetes-list-map-keys"]); string(keys) != `["name"]` {
		t.Errorf("/openapi/v2 PodSpec.containers x-kubernetes-list-map-keys = %s, want [\"name\"]", keys)
	}
	// kube-apiserver prunes defaults from v2 (v3 keeps them).
	if cp, ok := sw.Definitions["io.k8s.api.core.v1.ContainerPort"]; !ok || cp.Properties["protocol"].Default != nil {
		t.Errorf("/openapi/v2 ContainerPort = %+v, want it without defaults", cp)
	}
}

// oaProperty returns property prop of model name in schemas, or nil.
func oaProperty(schemas map[string]*spec.Schema, name, prop string) *spec.Schema {
	s, ok := schemas[name]
	if !ok {
		return nil
	}
	p, ok := s.Properties[prop]
	if !ok {
		return nil
	}
	return &p
}
