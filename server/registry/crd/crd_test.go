package crd

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		// grpc and etcd keep process-wide background goroutines.
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

// testCRD returns the CRD in testdata/widgets.yaml, defaulted.
func testCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	b, err := os.ReadFile("testdata/widgets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(b, crd); err != nil {
		t.Fatal(err)
	}
	SetDefaults(crd)
	return crd
}

func testDefinition(t *testing.T) *Definition {
	t.Helper()
	d, err := New(testCRD(t))
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return d
}

// object decodes JSON the way the server does: numbers become int64 or
// float64.
func object(t *testing.T, s string) map[string]interface{} {
	t.Helper()
	obj, err := decodeJSON(s)
	if err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return obj
}

func decodeJSON(s string) (map[string]interface{}, error) {
	obj, _, err := unstructured.UnstructuredJSONScheme.Decode([]byte(s), nil, nil)
	if err != nil {
		return nil, err
	}
	return obj.(*unstructured.Unstructured).Object, nil
}

// validWidget is a v1 Widget that passes validation after Decode.
const validWidget = `{
	"apiVersion": "example.com/v1", "kind": "Widget",
	"metadata": {"name": "w", "namespace": "default", "resourceVersion": "7"},
	"spec": {
		"size": "small", "name": "abc", "replicas": 3, "ratio": 0.5,
		"tags": ["a"], "note": null, "email": "a@example.com", "min": 1, "max": 2,
		"extra": {"anything": {"goes": [1, "x"]}},
		"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}},
		"ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]
	},
	"status": {"replicas": 2, "selector": "app=w"}
}`

func TestNew(t *testing.T) {
	d := testDefinition(t)
	if d.Name() != "widgets.example.com" || d.Group() != "example.com" || !d.Namespaced() {
		t.Errorf("New() = %q, %q, namespaced %v", d.Name(), d.Group(), d.Namespaced())
	}
	want := apiextensionsv1.CustomResourceDefinitionNames{
		Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList",
		ShortNames: []string{"wd"}, Categories: []string{"all"},
	}
	if diff := cmp.Diff(want, d.Names()); diff != "" {
		t.Errorf("Names() diff (-want +got):\n%s", diff)
	}
	var names []string
	for _, v := range d.Versions() {
		names = append(names, v.Name())
	}
	if diff := cmp.Diff([]string{"v1", "v1beta1"}, names); diff != "" {
		t.Errorf("Versions() diff (-want +got):\n%s", diff)
	}
	if got := d.StorageVersion().Name(); got != "v1" {
		t.Errorf("StorageVersion() = %q, want v1", got)
	}
	if d.Version("v2") != nil {
		t.Errorf("Version(v2) = %v, want nil", d.Version("v2"))
	}

	tests := []struct {
		version     string
		storage     bool
		hasStatus   bool
		scale       *Scale
		deprecation string
	}{
		{"v1", true, true, &Scale{".spec.replicas", ".status.replicas", ".status.selector"}, ""},
		{"v1beta1", false, false, nil, "example.com/v1beta1 Widget is deprecated; use example.com/v1 Widget"},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			v := d.Version(tt.version)
			if !v.Served() || v.Storage() != tt.storage || v.HasStatus() != tt.hasStatus {
				t.Errorf("served %v, storage %v, status %v; want true, %v, %v", v.Served(), v.Storage(), v.HasStatus(), tt.storage, tt.hasStatus)
			}
			if diff := cmp.Diff(tt.scale, v.Scale()); diff != "" {
				t.Errorf("Scale() diff (-want +got):\n%s", diff)
			}
			if got := v.DeprecationWarning(); got != tt.deprecation {
				t.Errorf("DeprecationWarning() = %q, want %q", got, tt.deprecation)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*apiextensionsv1.CustomResourceDefinition)
		is     error
		msg    string
	}{
		{"webhook", func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter}
		}, ErrUnsupportedConversion, "conversion strategy"},
		{"no schema", func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Versions[0].Schema = nil }, nil, "version v1beta1: no schema"},
		{"no storage", func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Versions[1].Storage = false }, nil, "no storage version"},
		{"non-structural", func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = apiextensionsv1.JSONSchemaProps{}
		}, nil, "not structural"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testCRD(t)
			tt.mutate(c)
			_, err := New(c)
			if err == nil || !strings.Contains(err.Error(), tt.msg) || (tt.is != nil && !errors.Is(err, tt.is)) {
				t.Errorf("New() = %v, want error containing %q (is %v)", err, tt.msg, tt.is)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		version string
		in      string
		want    string
		unknown []string
		err     string
	}{{
		name:    "defaults at every level",
		version: "v1",
		in:      `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": "small"}}`,
		want: `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
			"spec": {"size": "small", "replicas": 1, "config": {"mode": "fast", "limits": {"cpu": 2}}}}`,
	}, {
		name:    "defaults do not replace values",
		version: "v1",
		in: `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
			"spec": {"size": "small", "replicas": 0, "config": {"mode": "slow", "limits": {"cpu": 8}}}}`,
		want: `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
			"spec": {"size": "small", "replicas": 0, "config": {"mode": "slow", "limits": {"cpu": 8}}}}`,
	}, {
		name:    "unknown fields pruned, preserve-unknown-fields kept",
		version: "v1",
		in: `{"apiVersion": "example.com/v1", "kind": "Widget", "bogus": 1,
			"metadata": {"name": "w", "bogus": 2, "labels": {"a": "b"}},
			"spec": {"size": "small", "bogus": 3, "extra": {"any": {"deep": [1, {"x": true}]}},
				"config": {"mode": "m", "bogus": 4, "limits": {"cpu": 1, "bogus": 5}},
				"ports": [{"name": "a", "bogus": 6}]},
			"status": {"phase": "Ready", "bogus": 7}}`,
		want: `{"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": {"name": "w", "labels": {"a": "b"}},
			"spec": {"size": "small", "replicas": 1, "extra": {"any": {"deep": [1, {"x": true}]}},
				"config": {"mode": "m", "limits": {"cpu": 1}},
				"ports": [{"name": "a"}]},
			"status": {"phase": "Ready"}}`,
		unknown: []string{"bogus", "metadata.bogus", "spec.bogus", "spec.config.bogus", "spec.config.limits.bogus", "spec.ports[0].bogus", "status.bogus"},
	}, {
		name:    "embedded resource metadata coerced",
		version: "v1",
		in: `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
			"spec": {"size": "small", "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "bogus": 1}, "spec": {"x": 1}}}}`,
		want: `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
			"spec": {"size": "small", "replicas": 1, "config": {"mode": "fast", "limits": {"cpu": 2}},
				"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}}}}`,
		unknown: []string{"spec.template.metadata.bogus"},
	}, {
		name:    "nulls: dropped, nullable kept, defaulted",
		version: "v1",
		in: `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
			"spec": {"size": "small", "name": null, "note": null, "replicas": null, "config": null}}`,
		want: `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
			"spec": {"size": "small", "note": null, "replicas": 1, "config": {"mode": "fast", "limits": {"cpu": 2}}}}`,
	}, {
		name:    "older version converted",
		version: "v1",
		in:      `{"apiVersion": "example.com/v1beta1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": "small", "legacy": "x", "bogus": 1}}`,
		want: `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
			"spec": {"size": "small"}}`,
		unknown: []string{"spec.bogus"},
	}, {
		name:    "other kind left alone",
		version: "v1",
		in:      `{"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "w", "bogus": 1}, "spec": {"bogus": 1}}`,
		want:    `{"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "w"}, "spec": {"bogus": 1}}`,
		unknown: []string{"metadata.bogus"},
	}, {
		name:    "malformed metadata",
		version: "v1",
		in:      `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "labels": "x"}}`,
		err:     "cannot unmarshal string",
	}, {
		name:    "other group",
		version: "v1",
		in:      `{"apiVersion": "other.com/v1", "kind": "Widget", "metadata": {"name": "w"}}`,
		err:     "request to convert CR from an invalid group/version: other.com/v1",
	}, {
		name:    "unknown version",
		version: "v1",
		in:      `{"apiVersion": "example.com/v9", "kind": "Widget", "metadata": {"name": "w"}}`,
		err:     "request to convert CR from an invalid group/version: example.com/v9",
	}, {
		name:    "unknown target version",
		version: "v9",
		in:      `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": "small"}}`,
		err:     "request to convert CR to an invalid group/version: example.com/v9",
	}}
	d := testDefinition(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := object(t, tt.in)
			unknown, err := d.Decode(obj, tt.version)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Decode() = %v, want error containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode() = %v", err)
			}
			if diff := cmp.Diff(object(t, tt.want), obj); diff != "" {
				t.Errorf("Decode() object diff (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.unknown, unknown, sortStrings); diff != "" {
				t.Errorf("Decode() unknown fields diff (-want +got):\n%s", diff)
			}
		})
	}
}

var sortStrings = cmp.Transformer("sort", func(in []string) []string {
	out := append([]string(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
})

func TestDecodeStored(t *testing.T) {
	c := testCRD(t)
	// A version neither served nor stored any more can still hold objects.
	c.Spec.Versions = append(c.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{
		Name: "v1alpha1",
		Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {
				Type:       "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "string"}, "old": {Type: "string"}},
			}},
		}},
	})
	d, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		version string
		in      string
		want    string
	}{{
		name:    "malformed metadata dropped, generation repaired, defaults of the stored version",
		version: "v1",
		in: `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "labels": "x", "bogus": 1},
			"spec": {"size": "small", "bogus": 1}}`,
		want: `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "generation": 1},
			"spec": {"size": "small", "replicas": 1, "config": {"mode": "fast", "limits": {"cpu": 2}}}}`,
	}, {
		name:    "served in an older version",
		version: "v1beta1",
		in: `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "generation": 4},
			"spec": {"size": "small", "replicas": 2}}`,
		want: `{"apiVersion": "example.com/v1beta1", "kind": "Widget", "metadata": {"name": "w", "generation": 4},
			"spec": {"size": "small"}}`,
	}, {
		name:    "stored in a version no longer served",
		version: "v1",
		in: `{"apiVersion": "example.com/v1alpha1", "kind": "Widget", "metadata": {"name": "w", "generation": 2},
			"spec": {"size": "small", "old": "x"}}`,
		want: `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "generation": 2},
			"spec": {"size": "small"}}`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := object(t, tt.in)
			if err := d.DecodeStored(obj, tt.version); err != nil {
				t.Fatalf("DecodeStored() = %v", err)
			}
			if diff := cmp.Diff(object(t, tt.want), obj); diff != "" {
				t.Errorf("DecodeStored() diff (-want +got):\n%s", diff)
			}
		})
	}
}

type fieldErr struct {
	Type  field.ErrorType
	Field string
}

// celSkipped is the error Kubernetes adds when schema errors keep it from
// evaluating the CEL rules.
var celSkipped = fieldErr{field.ErrorTypeInvalid, "<nil>"}

func fieldErrs(errs field.ErrorList) []fieldErr {
	var out []fieldErr
	for _, e := range errs {
		out = append(out, fieldErr{e.Type, e.Field})
	}
	return out
}

// validObject returns validWidget after Decode and PrepareForCreate.
func validObject(t *testing.T, d *Definition) map[string]interface{} {
	t.Helper()
	obj := object(t, validWidget)
	if _, err := d.Decode(obj, "v1"); err != nil {
		t.Fatalf("Decode() = %v", err)
	}
	return obj
}

func TestValidate(t *testing.T) {
	d := testDefinition(t)
	set := func(path string, value interface{}) func(map[string]interface{}) {
		return func(obj map[string]interface{}) {
			p := strings.Split(path, ".")
			if err := unstructured.SetNestedField(obj, value, p...); err != nil {
				panic(err)
			}
		}
	}
	del := func(path string) func(map[string]interface{}) {
		return func(obj map[string]interface{}) { unstructured.RemoveNestedField(obj, strings.Split(path, ".")...) }
	}
	tests := []struct {
		name   string
		mutate func(map[string]interface{})
		want   []fieldErr
	}{
		{"valid", func(map[string]interface{}) {}, nil},
		{"required", del("spec.size"), []fieldErr{{field.ErrorTypeRequired, "spec.size"}, celSkipped}},
		{"enum", set("spec.size", "huge"), []fieldErr{{field.ErrorTypeNotSupported, "spec.size"}, celSkipped}},
		{"pattern", set("spec.name", "ABC"), []fieldErr{{field.ErrorTypeInvalid, "spec.name"}}},
		{"minLength", set("spec.name", "a"), []fieldErr{{field.ErrorTypeInvalid, "spec.name"}}},
		{"maxLength", set("spec.name", "abcdefghijk"), []fieldErr{{field.ErrorTypeTooLong, "spec.name"}, celSkipped}},
		{"minimum", set("spec.replicas", int64(-1)), []fieldErr{{field.ErrorTypeInvalid, "spec.replicas"}, {field.ErrorTypeInvalid, ".spec.replicas"}}},
		{"maximum", set("spec.replicas", int64(11)), []fieldErr{{field.ErrorTypeInvalid, "spec.replicas"}}},
		{"number maximum", set("spec.ratio", 1.5), []fieldErr{{field.ErrorTypeInvalid, "spec.ratio"}}},
		{"minItems", set("spec.tags", []interface{}{}), []fieldErr{{field.ErrorTypeInvalid, "spec.tags"}}},
		{"maxItems", set("spec.tags", []interface{}{"a", "b", "c", "d"}), []fieldErr{{field.ErrorTypeTooMany, "spec.tags"}, celSkipped}},
		{"type", set("spec.replicas", "three"), []fieldErr{{field.ErrorTypeTypeInvalid, "spec.replicas"}, {field.ErrorTypeInvalid, ".spec.replicas"}, celSkipped}},
		{"null not nullable", set("spec.name", nil), []fieldErr{{field.ErrorTypeTypeInvalid, "spec.name"}, celSkipped}},
		{"format", set("spec.email", "not-an-email"), []fieldErr{{field.ErrorTypeTypeInvalid, "spec.email"}, celSkipped}},
		{"cel rule", set("spec.min", int64(5)), []fieldErr{{field.ErrorTypeInvalid, "spec"}}},
		{"list map key duplicate", set("spec.ports", []interface{}{
			map[string]interface{}{"name": "a"}, map[string]interface{}{"name": "a"},
		}), []fieldErr{{field.ErrorTypeDuplicate, "spec.ports[1]"}}},
		{"embedded kind", del("spec.template.kind"), []fieldErr{{field.ErrorTypeRequired, "spec.template.kind"}, celSkipped}},
		{"embedded name", set("spec.template.metadata.name", "a/b"), []fieldErr{{field.ErrorTypeInvalid, "spec.template.metadata.name"}}},
		{"name", set("metadata.name", "Bad_Name"), []fieldErr{{field.ErrorTypeInvalid, "metadata.name"}}},
		{"namespace", del("metadata.namespace"), []fieldErr{{field.ErrorTypeRequired, "metadata.namespace"}, celSkipped}},
		{"kind", set("kind", "Gadget"), []fieldErr{{field.ErrorTypeInvalid, "kind"}}},
		{"apiVersion", set("apiVersion", "example.com/v1beta1"), []fieldErr{{field.ErrorTypeInvalid, "apiVersion"}}},
		{"scale selector", set("status.selector", int64(1)), []fieldErr{{field.ErrorTypeTypeInvalid, "status.selector"}, {field.ErrorTypeInvalid, ".status.selector"}, celSkipped}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := validObject(t, d)
			tt.mutate(obj)
			errs := d.Version("v1").Validate(context.Background(), obj)
			if diff := cmp.Diff(tt.want, fieldErrs(errs)); diff != "" {
				t.Errorf("Validate() = %v, diff (-want +got):\n%s", errs, diff)
			}
		})
	}
}

func TestValidateMessages(t *testing.T) {
	d := testDefinition(t)
	tests := []struct {
		path  string
		value interface{}
		want  string
	}{
		{"spec.size", "huge", `spec.size: Unsupported value: "huge": supported values: "small", "medium", "large"`},
		{"spec.name", "abcdefghijk", `spec.name: Too long: may not be more than 10 bytes`},
		{"spec.replicas", int64(11), `spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10`},
		{"spec.name", "ABC", `spec.name: Invalid value: "ABC": spec.name in body should match '^[a-z]+$'`},
		{"spec.min", int64(5), `spec: Invalid value: min must not exceed max`},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			obj := validObject(t, d)
			if err := unstructured.SetNestedField(obj, tt.value, strings.Split(tt.path, ".")...); err != nil {
				t.Fatal(err)
			}
			errs := d.Version("v1").Validate(context.Background(), obj)
			// Schema errors may be followed by celSkipped.
			if len(errs) == 0 || errs[0].Error() != tt.want {
				t.Errorf("Validate() = %v, want [%s, ...]", errs, tt.want)
			}
		})
	}
}

func TestValidateUpdate(t *testing.T) {
	d := testDefinition(t)
	v := d.Version("v1")
	tests := []struct {
		name        string
		old, mutate func(map[string]interface{})
		want        []fieldErr
	}{
		{"unchanged", nil, nil, nil},
		{"invalid change", nil, func(o map[string]interface{}) { o["spec"].(map[string]interface{})["size"] = "huge" },
			[]fieldErr{{field.ErrorTypeNotSupported, "spec.size"}, celSkipped}},
		{"ratcheting keeps an old invalid value", func(o map[string]interface{}) { o["spec"].(map[string]interface{})["size"] = "huge" },
			func(o map[string]interface{}) { o["spec"].(map[string]interface{})["name"] = "xyz" }, nil},
		{"name immutable", nil, func(o map[string]interface{}) { o["metadata"].(map[string]interface{})["name"] = "other" },
			[]fieldErr{{field.ErrorTypeInvalid, "metadata.name"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := validObject(t, d)
			if tt.old != nil {
				tt.old(old)
			}
			obj := runtime.DeepCopyJSON(old)
			if tt.mutate != nil {
				tt.mutate(obj)
			}
			errs := v.ValidateUpdate(context.Background(), obj, old)
			if diff := cmp.Diff(tt.want, fieldErrs(errs)); diff != "" {
				t.Errorf("ValidateUpdate() = %v, diff (-want +got):\n%s", errs, diff)
			}
		})
	}
}

func TestValidateStatusUpdate(t *testing.T) {
	d := testDefinition(t)
	v := d.Version("v1")
	old := validObject(t, d)
	obj := runtime.DeepCopyJSON(old)
	obj["status"] = map[string]interface{}{"replicas": "two", "selector": "app=w"}
	want := []fieldErr{{field.ErrorTypeTypeInvalid, "status.replicas"}, {field.ErrorTypeInvalid, ".status.replicas"}, celSkipped}
	if diff := cmp.Diff(want, fieldErrs(v.ValidateStatusUpdate(context.Background(), obj, old))); diff != "" {
		t.Errorf("ValidateStatusUpdate() diff (-want +got):\n%s", diff)
	}
}

func TestPrepare(t *testing.T) {
	d := testDefinition(t)
	v := d.Version("v1")
	spec := func(o map[string]interface{}) map[string]interface{} { return o["spec"].(map[string]interface{}) }
	gen := func(o map[string]interface{}) int64 { return (&unstructured.Unstructured{Object: o}).GetGeneration() }

	obj := validObject(t, d)
	v.PrepareForCreate(obj)
	if _, ok := obj["status"]; ok || gen(obj) != 1 {
		t.Errorf("PrepareForCreate() status %v, generation %d; want none, 1", obj["status"], gen(obj))
	}

	tests := []struct {
		name    string
		mutate  func(map[string]interface{})
		gen     int64
		status  interface{}
		replica interface{}
	}{
		{"metadata only", func(o map[string]interface{}) {
			o["metadata"].(map[string]interface{})["labels"] = map[string]interface{}{"a": "b"}
		}, 5, "Ready", int64(3)},
		{"spec", func(o map[string]interface{}) { spec(o)["replicas"] = int64(4) }, 6, "Ready", int64(4)},
		{"status ignored", func(o map[string]interface{}) { o["status"] = map[string]interface{}{"phase": "Gone"} }, 5, "Ready", int64(3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := validObject(t, d)
			old["metadata"].(map[string]interface{})["generation"] = int64(5)
			old["status"] = map[string]interface{}{"phase": "Ready"}
			obj := runtime.DeepCopyJSON(old)
			obj["metadata"].(map[string]interface{})["generation"] = int64(99)
			tt.mutate(obj)
			v.PrepareForUpdate(obj, old)
			phase, _, _ := unstructured.NestedString(obj, "status", "phase")
			if gen(obj) != tt.gen || phase != tt.status || spec(obj)["replicas"] != tt.replica {
				t.Errorf("PrepareForUpdate() generation %d, phase %q, replicas %v; want %d, %q, %v", gen(obj), phase, spec(obj)["replicas"], tt.gen, tt.status, tt.replica)
			}
		})
	}

	t.Run("status", func(t *testing.T) {
		old := validObject(t, d)
		obj := runtime.DeepCopyJSON(old)
		spec(obj)["replicas"] = int64(9)
		obj["status"] = map[string]interface{}{"phase": "Done"}
		v.PrepareForStatusUpdate(obj, old)
		want := runtime.DeepCopyJSON(old)
		want["status"] = map[string]interface{}{"phase": "Done"}
		if diff := cmp.Diff(want, obj); diff != "" {
			t.Errorf("PrepareForStatusUpdate() diff (-want +got):\n%s", diff)
		}
	})
}

func TestFields(t *testing.T) {
	d := testDefinition(t)
	v := d.Version("v1")
	got, err := v.Fields(validObject(t, d))
	if err != nil {
		t.Fatal(err)
	}
	want := fields.Set{"metadata.name": "w", "metadata.namespace": "default", "spec.size": "small"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Fields() diff (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		version, label string
		ok             bool
	}{
		{"v1", "metadata.name", true},
		{"v1", "metadata.namespace", true},
		{"v1", "spec.size", true},
		{"v1", "spec.name", false},
		{"v1beta1", "spec.size", false},
	} {
		err := d.Version(tt.version).ValidateFieldLabel(tt.label)
		if (err == nil) != tt.ok {
			t.Errorf("%s ValidateFieldLabel(%q) = %v, want ok %v", tt.version, tt.label, err, tt.ok)
		}
	}
}

func TestConvertToTable(t *testing.T) {
	d := testDefinition(t)
	created := metav1.NewTime(time.Now().Add(-3 * time.Hour)).UTC().Format(time.RFC3339)
	w := func(name string, spec string) unstructured.Unstructured {
		obj := object(t, `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "`+name+`", "namespace": "default", "creationTimestamp": "`+created+`"}, "spec": `+spec+`}`)
		if _, err := d.Decode(obj, "v1"); err != nil {
			t.Fatal(err)
		}
		return unstructured.Unstructured{Object: obj}
	}
	list := &unstructured.UnstructuredList{
		Object: map[string]interface{}{"apiVersion": "example.com/v1", "kind": "WidgetList", "metadata": map[string]interface{}{"resourceVersion": "42"}},
		Items:  []unstructured.Unstructured{w("a", `{"size": "small"}`), w("b", `{"size": "large", "replicas": 7, "ratio": 0.25, "config": {"mode": "slow"}}`)},
	}
	tests := []struct {
		name    string
		version string
		obj     runtime.Object
		opts    runtime.Object
		columns []string
		rows    [][]interface{}
	}{
		{"list", "v1", list, nil, []string{"Name", "Size", "Replicas", "Ratio", "Mode", "Age"},
			[][]interface{}{{"a", "small", int64(1), nil, "fast", "3h"}, {"b", "large", int64(7), 0.25, "slow", "3h"}}},
		{"one object without headers", "v1", &list.Items[1], &metav1.TableOptions{NoHeaders: true}, nil,
			[][]interface{}{{"b", "large", int64(7), 0.25, "slow", "3h"}}},
		{"default columns", "v1beta1", &list.Items[0], nil, []string{"Name", "Age"}, [][]interface{}{{"a", "3h"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := d.Version(tt.version).ConvertToTable(context.Background(), tt.obj, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			var columns []string
			for _, c := range table.ColumnDefinitions {
				columns = append(columns, c.Name)
			}
			var rows [][]interface{}
			for _, r := range table.Rows {
				rows = append(rows, r.Cells)
				if r.Object.Object == nil {
					t.Errorf("row %v has no object", r.Cells)
				}
			}
			if diff := cmp.Diff(tt.columns, columns); diff != "" {
				t.Errorf("ConvertToTable() columns diff (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.rows, rows); diff != "" {
				t.Errorf("ConvertToTable() rows diff (-want +got):\n%s", diff)
			}
		})
	}
	if table, _ := d.Version("v1").ConvertToTable(context.Background(), list, nil); table.ResourceVersion != "42" {
		t.Errorf("ConvertToTable() resourceVersion = %q, want 42", table.ResourceVersion)
	}
}

func TestOpenAPI(t *testing.T) {
	d := testDefinition(t)
	v := d.Version("v1")
	v3, err := v.OpenAPIV3()
	if err != nil {
		t.Fatalf("OpenAPIV3() = %v", err)
	}
	w := v3.Components.Schemas["com.example.v1.Widget"]
	if w == nil {
		t.Fatalf("OpenAPIV3() has no com.example.v1.Widget schema")
	}
	size := w.Properties["spec"].Properties["size"]
	if diff := cmp.Diff([]interface{}{"small", "medium", "large"}, size.Enum); diff != "" {
		t.Errorf("OpenAPIV3() spec.size enum diff (-want +got):\n%s", diff)
	}
	if got := w.Properties["spec"].Properties["replicas"].Default; got != float64(1) && got != int64(1) {
		t.Errorf("OpenAPIV3() spec.replicas default = %v, want 1", got)
	}
	for _, p := range []string{
		"/apis/example.com/v1/namespaces/{namespace}/widgets/{name}",
		"/apis/example.com/v1/namespaces/{namespace}/widgets/{name}/status",
		"/apis/example.com/v1/namespaces/{namespace}/widgets/{name}/scale",
		"/apis/example.com/v1/widgets",
	} {
		if v3.Paths.Paths[p] == nil {
			t.Errorf("OpenAPIV3() has no path %s", p)
		}
	}
	again, _ := v.OpenAPIV3()
	if again != v3 {
		t.Errorf("OpenAPIV3() built twice")
	}

	v2, err := v.OpenAPIV2()
	if err != nil {
		t.Fatalf("OpenAPIV2() = %v", err)
	}
	w2, ok := v2.Definitions["com.example.v1.Widget"]
	if !ok || len(w2.Properties["spec"].Properties["size"].Enum) != 3 {
		t.Errorf("OpenAPIV2() com.example.v1.Widget = %v", w2.Properties["spec"])
	}
	b, err := json.Marshal(v3)
	if err != nil || !strings.Contains(string(b), `"x-kubernetes-group-version-kind"`) {
		t.Errorf("json.Marshal(OpenAPIV3()) = %.200s, %v", b, err)
	}
}

func TestConcurrentUse(t *testing.T) {
	d := testDefinition(t)
	v := d.Version("v1")
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				obj, err := decodeJSON(validWidget)
				if err != nil {
					errc <- err
					return
				}
				if _, err := d.Decode(obj, "v1"); err != nil {
					errc <- err
					return
				}
				if errs := v.Validate(context.Background(), obj); len(errs) > 0 {
					errc <- errs.ToAggregate()
					return
				}
				if _, err := v.ConvertToTable(context.Background(), &unstructured.Unstructured{Object: obj}, nil); err != nil {
					errc <- err
					return
				}
				if _, err := v.OpenAPIV3(); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}
