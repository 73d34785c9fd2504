package openapi

import (
	"encoding/json"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

type oaInner struct {
	Name string `json:"name"`
}

type oaSample struct {
	metav1.TypeMeta `json:",inline"`
	Meta            metav1.ObjectMeta  `json:"metadata,omitempty"`
	Count           *int32             `json:"count,omitempty"`
	Ratio           float64            `json:"ratio,omitempty"`
	Raw             []byte             `json:"raw,omitempty"`
	Labels          map[string]string  `json:"labels,omitempty"`
	Items           []oaInner          `json:"items,omitempty" patchStrategy:"merge" patchMergeKey:"name"`
	Port            intstr.IntOrString `json:"port,omitempty"`
	Next            *oaSample          `json:"next,omitempty"`
	When            metav1.Time        `json:"when"`
	Any             any                `json:"any,omitempty"`
	Skipped         string             `json:"-"`
	unexported      string
}

func TestOpenAPIReflectDefinitions(t *testing.T) {
	defs := map[string]common.OpenAPIDefinition{
		// Stand-ins for the generated definitions.
		"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {},
		"io.k8s.apimachinery.pkg.apis.meta.v1.Time":       {},
	}
	ref := func(name string) spec.Ref { return spec.MustCreateRef("#/components/schemas/" + name) }
	reflectDefinitions(defs, ref, reflect.TypeOf(&oaSample{}))

	const name = "com.github.objwatch.objwatch.server.openapi.oaSample"
	got, ok := defs[name]
	if !ok {
		t.Fatalf("reflectDefinitions: no %s in %v", name, defs)
	}
	if _, ok := defs["com.github.objwatch.objwatch.server.openapi.oaInner"]; !ok {
		t.Errorf("reflectDefinitions: no definition for the element type oaInner")
	}
	want := map[string]string{
		"apiVersion": `{"type":"string"}`,
		"kind":       `{"type":"string"}`,
		"metadata":   `{"$ref":"#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}`,
		"count":      `{"type":"integer","format":"int32"}`,
		"ratio":      `{"type":"number","format":"double"}`,
		"raw":        `{"type":"string","format":"byte"}`,
		"labels":     `{"type":"object","additionalProperties":{"type":"string"}}`,
		"items": `{"type":"array","items":{"$ref":"#/components/schemas/com.github.objwatch.objwatch.server.openapi.oaInner"},` +
			`"x-kubernetes-patch-merge-key":"name","x-kubernetes-patch-strategy":"merge"}`,
		"port": `{"type":"string","format":"int-or-string"}`,
		"next": `{"$ref":"#/components/schemas/com.github.objwatch.objwatch.server.openapi.oaSample"}`,
		"when": `{"$ref":"#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Time"}`,
		"any":  `{"type":"object","x-kubernetes-preserve-unknown-fields":true}`,
	}
	if len(got.Schema.Properties) != len(want) {
		t.Errorf("properties = %d, want %d", len(got.Schema.Properties), len(want))
	}
	for prop, w := range want {
		p, ok := got.Schema.Properties[prop]
		if !ok {
			t.Errorf("property %s missing", prop)
			continue
		}
		b, _ := json.Marshal(p)
		var gotJSON, wantJSON any
		json.Unmarshal(b, &gotJSON)
		delete(gotJSON.(map[string]any), "description") // from TypeMeta's SwaggerDoc
		json.Unmarshal([]byte(w), &wantJSON)
		if !reflect.DeepEqual(gotJSON, wantJSON) {
			t.Errorf("property %s = %s, want %s", prop, b, w)
		}
	}
	if r := got.Schema.Required; len(r) != 1 || r[0] != "when" {
		t.Errorf("required = %v, want [when]", r)
	}
}
