package crd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// benchCRDYAML is a typical CRD: a structural schema, a spec with a few
// string fields (enum, pattern, maxLength, required) and a data map, a
// status subresource; no CEL rules, embedded resources, list types or scale.
const benchCRDYAML = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: benchobjects.bench.example.com
spec:
  group: bench.example.com
  scope: Namespaced
  names:
    plural: benchobjects
    kind: BenchObject
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [owner]
            properties:
              owner:
                type: string
                maxLength: 63
              mode:
                type: string
                enum: [fast, slow]
              image:
                type: string
                pattern: '^[a-z0-9./:-]+$'
              description:
                type: string
              replicas:
                type: integer
                minimum: 0
              data:
                type: object
                additionalProperties:
                  type: string
          status:
            type: object
            properties:
              phase: {type: string}
`

func benchCRD(tb testing.TB) *apiextensionsv1.CustomResourceDefinition {
	return crdFromYAML(tb, benchCRDYAML)
}

func benchDefinition(tb testing.TB) *Definition { return newDefinition(tb, benchCRD(tb)) }

// benchObject returns BenchObject i, about 1 KiB as JSON, shaped like
// internal/testobj's ConfigMap: three labels and 8 data values of 100
// random alphanumeric characters.
func benchObject(i int, rnd *rand.Rand) map[string]interface{} {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	data := make(map[string]interface{}, 8)
	for k := range 8 {
		v := make([]byte, 100)
		for j := range v {
			v[j] = letters[rnd.IntN(len(letters))]
		}
		data[fmt.Sprint("key-", k)] = string(v)
	}
	return map[string]interface{}{
		"apiVersion": "bench.example.com/v1",
		"kind":       "BenchObject",
		"metadata": map[string]interface{}{
			"name":      fmt.Sprintf("obj-%05d", i),
			"namespace": "default",
			"labels": map[string]interface{}{
				"app": "bench", "shard": fmt.Sprint(i % 16), "index": fmt.Sprint(i),
			},
		},
		"spec": map[string]interface{}{
			"owner":       "team-a",
			"mode":        "fast",
			"image":       "registry.example.com/app:1.2.3",
			"description": "an object for benchmarks",
			"replicas":    int64(3),
			"data":        data,
		},
	}
}

// prepareForCreate does what the server does to a custom object before
// validating its creation: Decode, the server's own metadata (uid,
// creationTimestamp, generation) and PrepareForCreate.
func prepareForCreate(tb testing.TB, d *Definition, v *Version, obj map[string]interface{}) {
	tb.Helper()
	if _, err := d.Decode(obj, v.Name()); err != nil {
		tb.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetUID(uuid.NewUUID())
	u.SetCreationTimestamp(metav1.NewTime(time.Now().UTC().Truncate(time.Second)))
	v.PrepareForCreate(obj)
}

// BenchmarkValidateCreate compares Kubernetes' custom resource strategy
// (kube) with Version.Validate (fast) on a plain ~1 KiB object.
func BenchmarkValidateCreate(b *testing.B) {
	d := benchDefinition(b)
	v := d.Version("v1")
	obj := benchObject(1, rand.New(rand.NewPCG(1, 2)))
	prepareForCreate(b, d, v, obj)
	ctx := context.Background()
	kubeVsFast(b,
		func() field.ErrorList { return v.strategy.Validate(ctx, &unstructured.Unstructured{Object: obj}) },
		func() field.ErrorList { return v.Validate(ctx, obj) })
}

// kubeVsFast runs the strategy's validation and Version's (the fast path)
// as sub-benchmarks; neither may report an error.
func kubeVsFast(b *testing.B, kube, fast func() field.ErrorList) {
	for _, c := range []struct {
		name     string
		validate func() field.ErrorList
	}{{"kube", kube}, {"fast", fast}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if errs := c.validate(); len(errs) > 0 {
					b.Fatal(errs)
				}
			}
		})
	}
}

// BenchmarkValidateUpdate is BenchmarkValidateCreate for an update that
// changes a label and a spec field.
func BenchmarkValidateUpdate(b *testing.B) {
	d := benchDefinition(b)
	v := d.Version("v1")
	old := benchObject(1, rand.New(rand.NewPCG(1, 2)))
	prepareForCreate(b, d, v, old)
	unstructured.SetNestedField(old, "5", "metadata", "resourceVersion")
	obj := benchObject(1, rand.New(rand.NewPCG(1, 2)))
	if _, err := d.Decode(obj, "v1"); err != nil {
		b.Fatal(err)
	}
	md := obj["metadata"].(map[string]interface{})
	for _, k := range []string{"uid", "creationTimestamp", "resourceVersion"} {
		md[k] = old["metadata"].(map[string]interface{})[k]
	}
	md["labels"].(map[string]interface{})["shard"] = "x"
	obj["spec"].(map[string]interface{})["mode"] = "slow"
	v.PrepareForUpdate(obj, old)
	ctx := context.Background()
	kubeVsFast(b,
		func() field.ErrorList {
			return v.strategy.ValidateUpdate(ctx, &unstructured.Unstructured{Object: obj}, &unstructured.Unstructured{Object: old})
		},
		func() field.ErrorList { return v.ValidateUpdate(ctx, obj, old) })
}
