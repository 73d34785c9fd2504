package conversion

import (
	"encoding/json"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/registry/crd"
)

func testWebhook(t testing.TB) *Webhook {
	url := "https://127.0.0.1:1/convert"
	schemaOf := func(field, typ string) *apiextensionsv1.CustomResourceValidation {
		return &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{field: {Type: typ}}},
			}}}
	}
	c := &apiextensionsv1.CustomResourceDefinition{
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter, Webhook: &apiextensionsv1.WebhookConversion{
				ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: &url}, ConversionReviewVersions: []string{"v1"}}},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: schemaOf("size", "string")},
				{Name: "v2", Served: true, Schema: schemaOf("replicas", "integer")},
			},
		},
	}
	c.Name = "widgets.example.com"
	def, err := crd.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return &Webhook{def: def, reviewVersions: []string{"v1"}}
}

// FuzzConverted: whatever a webhook answers, checking it does not panic,
// and what passes is in the desired version with the objects' identity and
// metadata but labels and annotations.
func FuzzConverted(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","response":{"uid":"u","result":{"status":"Success"},
"convertedObjects":[{"apiVersion":"example.com/v2","kind":"Widget","metadata":{"name":"a","namespace":"default","uid":"1","labels":{"x":"y"}},"spec":{"replicas":3}}]}}`))
	f.Add([]byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","response":{"uid":"u","result":{"status":"Success"},
"convertedObjects":[{"apiVersion":"example.com/v2","kind":"Widget","metadata":{"name":"b","labels":{"x":1}}}]}}`))
	f.Add([]byte(`{"response":{"uid":"v","result":{"status":"Failure","message":"no"}}}`))
	w := testWebhook(f)
	to := schema.GroupVersion{Group: "example.com", Version: "v2"}
	f.Fuzz(func(t *testing.T, answer []byte) {
		var resp review
		if json.Unmarshal(answer, &resp) != nil {
			return
		}
		in := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "a", "namespace": "default", "uid": "1", "generation": int64(1)},
			"spec":     map[string]any{"size": "3"},
		}}
		out, err := w.converted([]*unstructured.Unstructured{in}, "apiextensions.k8s.io/v1", "u", &resp, to)
		if err != nil {
			return
		}
		if len(out) != 1 || out[0].GetAPIVersion() != "example.com/v2" || out[0].GetName() != "a" || out[0].GetUID() != "1" || out[0].GetGeneration() != 1 {
			t.Fatalf("accepted %s as %v", answer, out)
		}
	})
}
