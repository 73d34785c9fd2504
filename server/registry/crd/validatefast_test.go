package crd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apimachinery/pkg/api/validate"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// featuresCRDYAML is a cluster-scoped CRD with embedded resources and
// list types (which the fast path validates by calling Kubernetes) but no
// CEL rules or scale subresource (for which it leaves the work to the
// strategy).
const featuresCRDYAML = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Cluster
  names:
    plural: gadgets
    kind: Gadget
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              template:
                type: object
                x-kubernetes-embedded-resource: true
                x-kubernetes-preserve-unknown-fields: true
              tags:
                type: array
                x-kubernetes-list-type: set
                items: {type: string}
              ports:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    port: {type: integer}
`

func crdFromYAML(t testing.TB, s string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict([]byte(s), crd); err != nil {
		t.Fatal(err)
	}
	SetDefaults(crd)
	return crd
}

func newDefinition(t testing.TB, crd *apiextensionsv1.CustomResourceDefinition) *Definition {
	t.Helper()
	d, err := New(crd)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return d
}

func md(obj map[string]interface{}) map[string]interface{} {
	return obj["metadata"].(map[string]interface{})
}

func specOf(obj map[string]interface{}) map[string]interface{} {
	return obj["spec"].(map[string]interface{})
}

// checkCreate asserts that the fast path returns exactly what the
// strategy does for obj, and that it is taken (or not) as fast says.
func checkCreate(t *testing.T, ctx context.Context, v *Version, obj map[string]interface{}, fast, invalid bool) {
	t.Helper()
	in := runtime.DeepCopyJSON(obj)
	want := v.strategy.Validate(ctx, &unstructured.Unstructured{Object: runtime.DeepCopyJSON(obj)})
	got, ok := v.fast.validate(ctx, obj)
	if ok != fast {
		t.Errorf("fast path taken = %v, want %v", ok, fast)
	}
	if ok && !sameErrors(t, got, want) {
		t.Errorf("fast path errors differ from the strategy's:\n got %s\nwant %s", dump(got), dump(want))
	}
	if all := v.Validate(ctx, obj); !sameErrors(t, all, want) {
		t.Errorf("Validate() differs from the strategy:\n got %s\nwant %s", dump(all), dump(want))
	}
	if invalid != (len(want) > 0) {
		t.Errorf("strategy errors %s, want invalid %v", dump(want), invalid)
	}
	if diff := cmp.Diff(in, obj); diff != "" {
		t.Errorf("validation changed the object (-before +after):\n%s", diff)
	}
}

// checkUpdate is checkCreate for the update of old to obj.
func checkUpdate(t *testing.T, ctx context.Context, v *Version, obj, old map[string]interface{}, fast, invalid bool) {
	t.Helper()
	in, inOld := runtime.DeepCopyJSON(obj), runtime.DeepCopyJSON(old)
	want := v.strategy.ValidateUpdate(ctx, &unstructured.Unstructured{Object: runtime.DeepCopyJSON(obj)}, &unstructured.Unstructured{Object: runtime.DeepCopyJSON(old)})
	got, ok := v.fast.validateUpdate(ctx, obj, old)
	if ok != fast {
		t.Errorf("fast path taken = %v, want %v", ok, fast)
	}
	if ok && !sameErrors(t, got, want) {
		t.Errorf("fast path errors differ from the strategy's:\n got %s\nwant %s", dump(got), dump(want))
	}
	if all := v.ValidateUpdate(ctx, obj, old); !sameErrors(t, all, want) {
		t.Errorf("ValidateUpdate() differs from the strategy:\n got %s\nwant %s", dump(all), dump(want))
	}
	if invalid != (len(want) > 0) {
		t.Errorf("strategy errors %s, want invalid %v", dump(want), invalid)
	}
	if diff := cmp.Diff(in, obj); diff != "" {
		t.Errorf("validation changed the object (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(inOld, old); diff != "" {
		t.Errorf("validation changed the old object (-before +after):\n%s", diff)
	}
}

// unordered names the test cases whose errors come in no fixed order: the
// schema validator reports the errors of an object's properties in the
// order of a walk over a Go map, which differs between two runs of the
// strategy itself.
var unordered = map[string]bool{
	"TestValidateFastCreate/several_schema_errors": true,
}

// sameErrors reports whether got and want are deeply equal, in any order
// for the test cases in unordered.
func sameErrors(t *testing.T, got, want field.ErrorList) bool {
	if reflect.DeepEqual(got, want) {
		return true
	}
	if !unordered[t.Name()] || len(got) != len(want) {
		return false
	}
	key := func(e *field.Error) string { return fmt.Sprintf("%#v", *e) }
	got, want = slices.Clone(got), slices.Clone(want)
	for _, l := range []field.ErrorList{got, want} {
		slices.SortFunc(l, func(a, b *field.Error) int { return strings.Compare(key(a), key(b)) })
	}
	return reflect.DeepEqual(got, want)
}

func dump(errs field.ErrorList) string {
	if errs == nil {
		return "nil"
	}
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "\n\t%#v", *e)
	}
	return b.String()
}

type validateCase struct {
	name    string
	mutate  func(obj map[string]interface{})
	fast    bool // the fast path is taken
	invalid bool // the strategy reports errors
}

func TestValidateFastCreate(t *testing.T) {
	d := benchDefinition(t)
	v := d.Version("v1")
	long := strings.Repeat("a", 254)
	tests := []validateCase{
		{"valid", func(map[string]interface{}) {}, true, false},
		{"no labels", func(o map[string]interface{}) { delete(md(o), "labels") }, true, false},
		{"annotations and finalizers", func(o map[string]interface{}) {
			md(o)["annotations"] = map[string]interface{}{"example.com/a": "x"}
			md(o)["finalizers"] = []interface{}{"example.com/f"}
		}, true, false},
		{"no metadata", func(o map[string]interface{}) { delete(o, "metadata") }, true, true},
		{"no name", func(o map[string]interface{}) { delete(md(o), "name") }, true, true},
		{"name too long", func(o map[string]interface{}) { md(o)["name"] = long }, true, true},
		{"name not a DNS subdomain", func(o map[string]interface{}) { md(o)["name"] = "Bad_Name" }, true, true},
		{"generateName valid", func(o map[string]interface{}) { md(o)["generateName"] = "obj-" }, true, false},
		{"generateName invalid", func(o map[string]interface{}) { md(o)["generateName"] = "Bad_" }, true, true},
		{"no namespace", func(o map[string]interface{}) { delete(md(o), "namespace") }, true, true},
		{"bad namespace", func(o map[string]interface{}) { md(o)["namespace"] = "Bad.NS" }, true, true},
		{"bad label key", func(o map[string]interface{}) { md(o)["labels"].(map[string]interface{})["bad key!"] = "x" }, true, true},
		{"bad label prefix", func(o map[string]interface{}) {
			md(o)["labels"].(map[string]interface{})[strings.Repeat("p", 254)+"/k"] = "x"
		}, true, true},
		{"label value too long", func(o map[string]interface{}) {
			md(o)["labels"].(map[string]interface{})["app"] = strings.Repeat("v", 64)
		}, true, true},
		{"bad label value", func(o map[string]interface{}) { md(o)["labels"].(map[string]interface{})["app"] = "-x-" }, true, true},
		{"bad annotation key", func(o map[string]interface{}) {
			md(o)["annotations"] = map[string]interface{}{"Bad Key": "x", "ok": "y"}
		}, true, true},
		{"annotations too large", func(o map[string]interface{}) {
			md(o)["annotations"] = map[string]interface{}{"big": strings.Repeat("x", 256<<10)}
		}, true, true},
		{"bad finalizer", func(o map[string]interface{}) { md(o)["finalizers"] = []interface{}{"bad finalizer!"} }, true, true},
		{"duplicate bad finalizers", func(o map[string]interface{}) {
			md(o)["finalizers"] = []interface{}{"bad finalizer!", "ok/f", "bad finalizer!"}
		}, true, true},
		{"conflicting finalizers", func(o map[string]interface{}) {
			md(o)["finalizers"] = []interface{}{"orphan", "foregroundDeletion"}
		}, true, true},
		{"negative generation", func(o map[string]interface{}) { md(o)["generation"] = int64(-1) }, true, true},
		{"deletion fields", func(o map[string]interface{}) {
			md(o)["deletionTimestamp"] = "2026-01-02T03:04:05Z"
			md(o)["deletionGracePeriodSeconds"] = int64(30)
		}, true, false},
		{"bad name and schema error", func(o map[string]interface{}) {
			md(o)["name"] = "Bad_Name"
			specOf(o)["mode"] = "medium"
		}, true, true},

		// Schema.
		{"missing required", func(o map[string]interface{}) { delete(specOf(o), "owner") }, true, true},
		{"wrong type", func(o map[string]interface{}) { specOf(o)["owner"] = int64(3) }, true, true},
		{"not in enum", func(o map[string]interface{}) { specOf(o)["mode"] = "medium" }, true, true},
		{"too long", func(o map[string]interface{}) { specOf(o)["owner"] = strings.Repeat("o", 64) }, true, true},
		{"pattern", func(o map[string]interface{}) { specOf(o)["image"] = "Not An Image" }, true, true},
		{"minimum", func(o map[string]interface{}) { specOf(o)["replicas"] = int64(-1) }, true, true},
		{"float for integer", func(o map[string]interface{}) { specOf(o)["replicas"] = 1.5 }, true, true},
		{"map value type", func(o map[string]interface{}) { specOf(o)["data"].(map[string]interface{})["key-0"] = true }, true, true},
		{"spec not an object", func(o map[string]interface{}) { o["spec"] = "x" }, true, true},
		{"unknown field", func(o map[string]interface{}) { specOf(o)["bogus"] = "x" }, true, false},
		{"unknown top-level field", func(o map[string]interface{}) { o["bogus"] = int64(1) }, true, false},
		{"several schema errors", func(o map[string]interface{}) {
			specOf(o)["mode"] = "medium"
			specOf(o)["owner"] = strings.Repeat("o", 64)
			specOf(o)["replicas"] = int64(-1)
		}, true, true},

		// What the fast path leaves to the strategy.
		{"wrong kind", func(o map[string]interface{}) { o["kind"] = "Other" }, false, true},
		{"wrong apiVersion", func(o map[string]interface{}) { o["apiVersion"] = "bench.example.com/v2" }, false, true},
		{"no kind", func(o map[string]interface{}) { delete(o, "kind") }, false, true},
		{"owner references", func(o map[string]interface{}) {
			md(o)["ownerReferences"] = []interface{}{map[string]interface{}{"apiVersion": "v1", "kind": "Event", "name": "", "uid": "u"}}
		}, false, true},
		{"managed fields", func(o map[string]interface{}) {
			md(o)["managedFields"] = []interface{}{map[string]interface{}{"manager": "m", "operation": "Apply"}}
		}, true, false},
		{"managed fields as the field manager writes them", func(o map[string]interface{}) {
			md(o)["managedFields"] = managedEntry("2026-01-02T03:04:05Z", "Update")
		}, true, false},
		{"managed fields with an unknown operation", func(o map[string]interface{}) {
			md(o)["managedFields"] = []interface{}{map[string]interface{}{"manager": "m", "operation": "Bogus", "fieldsType": "FieldsV1", "fieldsV1": map[string]interface{}{}}}
		}, true, true},
		{"managed fields of another type", func(o map[string]interface{}) {
			md(o)["managedFields"] = []interface{}{map[string]interface{}{"manager": "m", "operation": "Update", "fieldsType": "FieldsV2"}}
		}, true, true},
		{"managed fields not canonical", func(o map[string]interface{}) {
			md(o)["managedFields"] = []interface{}{map[string]interface{}{"manager": "m", "operation": "Update", "time": "2026-01-02T05:04:05+02:00"}}
		}, false, false},
		{"metadata not an object", func(o map[string]interface{}) { o["metadata"] = "x" }, false, true},
		{"empty metadata", func(o map[string]interface{}) { o["metadata"] = map[string]interface{}{} }, false, true},
		{"non-string label", func(o map[string]interface{}) { md(o)["labels"].(map[string]interface{})["n"] = int64(1) }, false, true},
		{"unknown metadata field", func(o map[string]interface{}) { md(o)["bogus"] = "x" }, false, false},
		{"empty namespace", func(o map[string]interface{}) { md(o)["namespace"] = "" }, false, true},
		{"offset timestamp", func(o map[string]interface{}) { md(o)["creationTimestamp"] = "2026-01-02T05:04:05+02:00" }, false, false},
		{"bad timestamp", func(o map[string]interface{}) { md(o)["creationTimestamp"] = "yesterday" }, false, true},
		{"float generation", func(o map[string]interface{}) { md(o)["generation"] = 1.0 }, false, false},
	}
	ctx := context.Background()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := benchObject(i, rand.New(rand.NewPCG(uint64(i), 1)))
			prepareForCreate(t, d, v, obj)
			tt.mutate(obj)
			checkCreate(t, ctx, v, obj, tt.fast, tt.invalid)
		})
	}

	t.Run("declarative validation enforced", func(t *testing.T) {
		obj := benchObject(1, rand.New(rand.NewPCG(1, 1)))
		prepareForCreate(t, d, v, obj)
		md(obj)["generation"] = int64(-1)
		checkCreate(t, validate.WithAllDeclarativeEnforcedForTest(ctx), v, obj, false, true)
	})
}

// updatePair returns a stored object as the server reads it and its update
// as the server validates it (PrepareForUpdate done), after mutate.
func updatePair(t *testing.T, d *Definition, v *Version, i int, mutateOld, mutate func(obj map[string]interface{})) (obj, old map[string]interface{}) {
	t.Helper()
	old = benchObject(i, rand.New(rand.NewPCG(uint64(i), 1)))
	prepareForCreate(t, d, v, old)
	md(old)["resourceVersion"] = "7"
	if mutateOld != nil {
		mutateOld(old)
	}
	obj = runtime.DeepCopyJSON(old)
	md(obj)["labels"].(map[string]interface{})["shard"] = "changed"
	specOf(obj)["description"] = "changed"
	v.PrepareForUpdate(obj, old)
	mutate(obj)
	return obj, old
}

func TestValidateFastUpdate(t *testing.T) {
	d := benchDefinition(t)
	v := d.Version("v1")
	deleting := func(o map[string]interface{}) {
		md(o)["deletionTimestamp"] = "2026-01-02T03:04:05Z"
		md(o)["deletionGracePeriodSeconds"] = int64(30)
		md(o)["finalizers"] = []interface{}{"example.com/a"}
	}
	tests := []struct {
		validateCase
		mutateOld func(map[string]interface{})
	}{
		{validateCase{"valid", func(map[string]interface{}) {}, true, false}, nil},
		{validateCase{"managed fields restamped", func(o map[string]interface{}) {
			md(o)["managedFields"] = managedEntry("2026-01-02T03:04:06Z", "Update")
		},
			true, false}, func(o map[string]interface{}) {
			md(o)["managedFields"] = managedEntry("2026-01-02T03:04:05Z", "Update")
		}},
		{validateCase{"managed fields given a bad operation", func(o map[string]interface{}) { md(o)["managedFields"] = managedEntry("2026-01-02T03:04:06Z", "Bogus") },
			true, true}, func(o map[string]interface{}) {
			md(o)["managedFields"] = managedEntry("2026-01-02T03:04:05Z", "Update")
		}},
		{validateCase{"generation bumped", func(o map[string]interface{}) { md(o)["generation"] = int64(5) }, true, false}, nil},
		{validateCase{"name changed", func(o map[string]interface{}) { md(o)["name"] = "other" }, true, true}, nil},
		{validateCase{"bad name changed", func(o map[string]interface{}) { md(o)["name"] = "Bad_Name" }, true, true}, nil},
		{validateCase{"namespace changed", func(o map[string]interface{}) { md(o)["namespace"] = "other" }, true, true}, nil},
		{validateCase{"namespace removed", func(o map[string]interface{}) { delete(md(o), "namespace") }, true, true}, nil},
		{validateCase{"uid changed", func(o map[string]interface{}) { md(o)["uid"] = "other" }, true, true}, nil},
		{validateCase{"uid removed", func(o map[string]interface{}) { delete(md(o), "uid") }, true, true}, nil},
		{validateCase{"creationTimestamp changed", func(o map[string]interface{}) {
			md(o)["creationTimestamp"] = "2020-01-02T03:04:05Z"
		}, true, true}, nil},
		{validateCase{"creationTimestamp removed", func(o map[string]interface{}) { delete(md(o), "creationTimestamp") }, true, true}, nil},
		{validateCase{"deletionTimestamp set", func(o map[string]interface{}) {
			md(o)["deletionTimestamp"] = "2026-01-02T03:04:05Z"
		}, true, true}, nil},
		{validateCase{"deletionGracePeriodSeconds set", func(o map[string]interface{}) {
			md(o)["deletionGracePeriodSeconds"] = int64(10)
		}, true, true}, nil},
		{validateCase{"no resourceVersion", func(o map[string]interface{}) { delete(md(o), "resourceVersion") }, true, true}, nil},
		{validateCase{"generation decremented", func(o map[string]interface{}) { md(o)["generation"] = int64(1) }, true, true},
			func(o map[string]interface{}) { md(o)["generation"] = int64(3) }},
		{validateCase{"negative generation", func(o map[string]interface{}) { md(o)["generation"] = int64(-2) }, true, true}, nil},
		{validateCase{"finalizer removed while deleting", func(o map[string]interface{}) { delete(md(o), "finalizers") }, true, false}, deleting},
		{validateCase{"finalizer added while deleting", func(o map[string]interface{}) {
			md(o)["finalizers"] = []interface{}{"example.com/a", "example.com/b"}
		}, true, true}, deleting},
		{validateCase{"deletion undone", func(o map[string]interface{}) {
			delete(md(o), "deletionTimestamp")
			delete(md(o), "deletionGracePeriodSeconds")
		}, true, true}, deleting},
		{validateCase{"bad label", func(o map[string]interface{}) { md(o)["labels"].(map[string]interface{})["bad key!"] = "x" }, true, true}, nil},
		{validateCase{"bad annotation", func(o map[string]interface{}) {
			md(o)["annotations"] = map[string]interface{}{"Bad Key": "x"}
		}, true, true}, nil},
		// Finalizer names are not validated on update.
		{validateCase{"bad finalizer", func(o map[string]interface{}) { md(o)["finalizers"] = []interface{}{"bad finalizer!"} }, true, false}, nil},
		{validateCase{"schema error", func(o map[string]interface{}) { specOf(o)["mode"] = "medium" }, true, true}, nil},
		{validateCase{"unchanged schema error ratcheted", func(map[string]interface{}) {}, true, false},
			func(o map[string]interface{}) { specOf(o)["mode"] = "medium" }},
		{validateCase{"changed schema error", func(o map[string]interface{}) { specOf(o)["mode"] = "large" }, true, true},
			func(o map[string]interface{}) { specOf(o)["mode"] = "medium" }},
		{validateCase{"missing required", func(o map[string]interface{}) { delete(specOf(o), "owner") }, true, true}, nil},
		{validateCase{"immutable and schema errors", func(o map[string]interface{}) {
			md(o)["uid"] = "other"
			md(o)["name"] = "other"
			specOf(o)["owner"] = int64(1)
		}, true, true}, nil},

		// What the fast path leaves to the strategy.
		{validateCase{"wrong kind", func(o map[string]interface{}) { o["kind"] = "Other" }, false, true}, nil},
		{validateCase{"old owner references", func(map[string]interface{}) {}, false, false}, func(o map[string]interface{}) {
			md(o)["ownerReferences"] = []interface{}{map[string]interface{}{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u"}}
		}},
		{validateCase{"new owner references", func(o map[string]interface{}) {
			md(o)["ownerReferences"] = []interface{}{map[string]interface{}{"apiVersion": "v1", "kind": "X", "name": "o"}}
		}, false, true}, nil},
		{validateCase{"old unknown metadata field", func(map[string]interface{}) {}, false, false},
			func(o map[string]interface{}) { md(o)["bogus"] = "x" }},
		{validateCase{"empty resourceVersion", func(o map[string]interface{}) { md(o)["resourceVersion"] = "" }, false, true}, nil},
	}
	ctx := context.Background()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj, old := updatePair(t, d, v, i, tt.mutateOld, tt.mutate)
			checkUpdate(t, ctx, v, obj, old, tt.fast, tt.invalid)
		})
	}
}

func TestValidateFastFeatures(t *testing.T) {
	d := newDefinition(t, crdFromYAML(t, featuresCRDYAML))
	v := d.Version("v1")
	if !v.fast.ok || !v.fast.embedded || !v.fast.listTypes {
		t.Fatalf("fast validator ok %v, embedded %v, list types %v; want all true", v.fast.ok, v.fast.embedded, v.fast.listTypes)
	}
	base := func(t *testing.T) map[string]interface{} {
		obj := object(t, `{"apiVersion": "example.com/v1", "kind": "Gadget",
			"metadata": {"name": "g", "uid": "u-1", "creationTimestamp": "2026-01-02T03:04:05Z", "resourceVersion": "3"},
			"spec": {
				"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}}},
				"tags": ["a", "b"],
				"ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]}}`)
		if _, err := d.Decode(obj, "v1"); err != nil {
			t.Fatal(err)
		}
		v.PrepareForCreate(obj)
		return obj
	}
	tmpl := func(o map[string]interface{}) map[string]interface{} {
		return specOf(o)["template"].(map[string]interface{})
	}
	create := []validateCase{
		{"valid", func(map[string]interface{}) {}, true, false},
		{"namespace on a cluster-scoped object", func(o map[string]interface{}) { md(o)["namespace"] = "default" }, true, true},
		{"embedded without kind", func(o map[string]interface{}) { delete(tmpl(o), "kind") }, true, true},
		{"embedded bad apiVersion", func(o map[string]interface{}) { tmpl(o)["apiVersion"] = "a/b/c" }, true, true},
		{"embedded bad kind", func(o map[string]interface{}) { tmpl(o)["kind"] = "Bad Kind" }, true, true},
		{"embedded bad name", func(o map[string]interface{}) { md(tmpl(o))["name"] = "a/b" }, true, true},
		{"embedded bad label", func(o map[string]interface{}) { md(tmpl(o))["labels"] = map[string]interface{}{"bad key!": "x"} }, true, true},
		{"embedded metadata not an object", func(o map[string]interface{}) { tmpl(o)["metadata"] = "x" }, true, true},
		{"duplicate set item", func(o map[string]interface{}) { specOf(o)["tags"] = []interface{}{"a", "b", "a"} }, true, true},
		{"duplicate map key", func(o map[string]interface{}) {
			specOf(o)["ports"] = []interface{}{
				map[string]interface{}{"name": "http", "port": int64(80)},
				map[string]interface{}{"name": "http", "port": int64(81)},
			}
		}, true, true},
		{"map item without key", func(o map[string]interface{}) {
			specOf(o)["ports"] = []interface{}{map[string]interface{}{"port": int64(80)}}
		}, true, true},
		{"bad name, embedded and list errors", func(o map[string]interface{}) {
			md(o)["name"] = "Bad_Name"
			delete(tmpl(o), "apiVersion")
			specOf(o)["tags"] = []interface{}{"a", "a"}
		}, true, true},
	}
	ctx := context.Background()
	for _, tt := range create {
		t.Run("create/"+tt.name, func(t *testing.T) {
			obj := base(t)
			tt.mutate(obj)
			checkCreate(t, ctx, v, obj, tt.fast, tt.invalid)
		})
	}

	update := []struct {
		validateCase
		mutateOld func(map[string]interface{})
	}{
		{validateCase{"valid", func(map[string]interface{}) {}, true, false}, nil},
		{validateCase{"duplicate set item added", func(o map[string]interface{}) { specOf(o)["tags"] = []interface{}{"a", "a"} }, true, true}, nil},
		{validateCase{"duplicate set item kept", func(map[string]interface{}) {}, true, false},
			func(o map[string]interface{}) { specOf(o)["tags"] = []interface{}{"a", "a"} }},
		{validateCase{"embedded error", func(o map[string]interface{}) { delete(tmpl(o), "kind") }, true, true}, nil},
		// Embedded resources are not ratcheted.
		{validateCase{"embedded error kept", func(map[string]interface{}) {}, true, true},
			func(o map[string]interface{}) { delete(tmpl(o), "kind") }},
	}
	for _, tt := range update {
		t.Run("update/"+tt.name, func(t *testing.T) {
			old := base(t)
			if tt.mutateOld != nil {
				tt.mutateOld(old)
			}
			obj := runtime.DeepCopyJSON(old)
			md(obj)["labels"] = map[string]interface{}{"x": "y"}
			v.PrepareForUpdate(obj, old)
			tt.mutate(obj)
			checkUpdate(t, ctx, v, obj, old, tt.fast, tt.invalid)
		})
	}
}

// Versions with CEL rules or a scale subresource are validated by the
// strategy alone.
func TestValidateFastFallback(t *testing.T) {
	ctx := context.Background()

	t.Run("widgets", func(t *testing.T) {
		d := testDefinition(t)
		if !d.Version("v1beta1").fast.ok {
			t.Errorf("v1beta1: fast path not enabled")
		}
		v := d.Version("v1")
		if v.fast.ok {
			t.Fatalf("v1 (CEL rules, scale): fast path enabled")
		}
		obj := object(t, validWidget)
		if _, err := d.Decode(obj, "v1"); err != nil {
			t.Fatal(err)
		}
		v.PrepareForCreate(obj)
		checkCreate(t, ctx, v, obj, false, false)
		specOf(obj)["min"] = int64(5) // min must not exceed max (CEL)
		checkCreate(t, ctx, v, obj, false, true)
	})

	celRule := func(crd *apiextensionsv1.CustomResourceDefinition) {
		s := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		s.XValidations = apiextensionsv1.ValidationRules{{Rule: "self.owner != 'nobody'", Message: "no owner"}}
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = s
	}
	scale := func(crd *apiextensionsv1.CustomResourceDefinition) {
		s := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]
		s.Properties["replicas"] = apiextensionsv1.JSONSchemaProps{Type: "integer"}
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"] = s
		crd.Spec.Versions[0].Subresources.Scale = &apiextensionsv1.CustomResourceSubresourceScale{
			SpecReplicasPath: ".spec.replicas", StatusReplicasPath: ".status.replicas",
		}
	}
	for name, mutate := range map[string]func(*apiextensionsv1.CustomResourceDefinition){
		"CEL rule": celRule, "scale": scale,
	} {
		t.Run(name, func(t *testing.T) {
			crd := benchCRD(t)
			mutate(crd)
			d := newDefinition(t, crd)
			v := d.Version("v1")
			if v.fast.ok {
				t.Fatalf("fast path enabled")
			}
			obj := benchObject(1, rand.New(rand.NewPCG(1, 1)))
			prepareForCreate(t, d, v, obj)
			checkCreate(t, ctx, v, obj, false, false)
			specOf(obj)["owner"] = "nobody"
			specOf(obj)["replicas"] = int64(-1)
			checkCreate(t, ctx, v, obj, false, true)
		})
	}
}

// Rules under allOf, anyOf, oneOf or not (which a structural schema does
// not allow) disable the fast path too.
func TestHasCELRules(t *testing.T) {
	rules := apiextensionsv1.ValidationRules{{Rule: "true"}}
	nested := structuralschema.NestedValueValidation{
		Properties: map[string]structuralschema.NestedValueValidation{"x": {
			Items: &structuralschema.NestedValueValidation{ValidationExtensions: structuralschema.ValidationExtensions{XValidations: rules}},
		}},
	}
	tests := []struct {
		name string
		s    *structuralschema.Structural
		want bool
	}{
		{"none", &structuralschema.Structural{Properties: map[string]structuralschema.Structural{"a": {}}}, false},
		{"property", &structuralschema.Structural{Properties: map[string]structuralschema.Structural{
			"a": {ValidationExtensions: structuralschema.ValidationExtensions{XValidations: rules}},
		}}, true},
		{"items", &structuralschema.Structural{Items: &structuralschema.Structural{ValidationExtensions: structuralschema.ValidationExtensions{XValidations: rules}}}, true},
		{"additionalProperties", &structuralschema.Structural{AdditionalProperties: &structuralschema.StructuralOrBool{
			Structural: &structuralschema.Structural{ValidationExtensions: structuralschema.ValidationExtensions{XValidations: rules}},
		}}, true},
		{"allOf", &structuralschema.Structural{ValueValidation: &structuralschema.ValueValidation{AllOf: []structuralschema.NestedValueValidation{nested}}}, true},
		{"anyOf", &structuralschema.Structural{ValueValidation: &structuralschema.ValueValidation{AnyOf: []structuralschema.NestedValueValidation{{}, nested}}}, true},
		{"oneOf", &structuralschema.Structural{ValueValidation: &structuralschema.ValueValidation{OneOf: []structuralschema.NestedValueValidation{nested}}}, true},
		{"not", &structuralschema.Structural{ValueValidation: &structuralschema.ValueValidation{Not: &nested}}, true},
		{"nested allOf", &structuralschema.Structural{ValueValidation: &structuralschema.ValueValidation{AllOf: []structuralschema.NestedValueValidation{{
			ValueValidation: structuralschema.ValueValidation{AnyOf: []structuralschema.NestedValueValidation{nested}},
		}}}}, true},
		{"allOf without rules", &structuralschema.Structural{ValueValidation: &structuralschema.ValueValidation{AllOf: []structuralschema.NestedValueValidation{{}}}}, false},
	}
	for _, tt := range tests {
		if got := anySchema(tt.s, hasCELRules); got != tt.want {
			t.Errorf("%s: anySchema(hasCELRules) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// The objects of BenchmarkValidateCreate and BenchmarkValidateUpdate take
// the fast path: this fails if the optimisation silently stops applying.
func TestValidateFastTaken(t *testing.T) {
	d := benchDefinition(t)
	v := d.Version("v1")
	if !v.fast.ok || v.fast.embedded || v.fast.listTypes {
		t.Fatalf("fast validator ok %v, embedded %v, list types %v; want true, false, false", v.fast.ok, v.fast.embedded, v.fast.listTypes)
	}
	ctx := context.Background()
	obj := benchObject(1, rand.New(rand.NewPCG(1, 2)))
	prepareForCreate(t, d, v, obj)
	if errs, ok := v.fast.validate(ctx, obj); !ok || errs != nil {
		t.Errorf("create: fast path = %v, %v; want nil, true", dump(errs), ok)
	}
	obj, old := updatePair(t, d, v, 1, nil, func(map[string]interface{}) {})
	if errs, ok := v.fast.validateUpdate(ctx, obj, old); !ok || errs != nil {
		t.Errorf("update: fast path = %v, %v; want nil, true", dump(errs), ok)
	}
}

// managedEntry is managedFields as the field manager writes them.
func managedEntry(time, op string) []interface{} {
	return []interface{}{map[string]interface{}{"manager": "m", "operation": op, "apiVersion": "bench.example.com/v1",
		"time": time, "fieldsType": "FieldsV1", "fieldsV1": map[string]interface{}{"f:spec": map[string]interface{}{"f:owner": map[string]interface{}{}}}}}
}
