package crd_test

import (
	"context"
	"encoding/json"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/objwatch/objwatch/server/registry/crd"
)

const crontabs = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names: {plural: crontabs, kind: CronTab}
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
              cronSpec: {type: string, pattern: '^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$'}
              replicas: {type: integer, default: 1, maximum: 10}
`

// A custom resource goes through Decode, PrepareForCreate and Validate, as in
// kube-apiserver.
func Example() {
	ctx := context.Background()
	def := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal([]byte(crontabs), def); err != nil {
		panic(err)
	}
	crd.SetDefaults(def)
	crd.PrepareDefinitionForCreate(def)
	if errs := crd.ValidateDefinition(ctx, def); len(errs) > 0 {
		panic(errs.ToAggregate())
	}
	d, err := crd.New(def)
	if err != nil {
		panic(err)
	}

	obj := map[string]interface{}{
		"apiVersion": "stable.example.com/v1",
		"kind":       "CronTab",
		"metadata":   map[string]interface{}{"name": "daily", "namespace": "default"},
		"spec":       map[string]interface{}{"cronSpec": "0 0 * * *", "image": "unknown to the schema"},
	}
	unknown, err := d.Decode(obj, "v1")
	if err != nil {
		panic(err)
	}
	v := d.Version("v1")
	v.PrepareForCreate(obj)
	fmt.Println("validation errors:", len(v.Validate(ctx, obj)))
	fmt.Println("unknown fields:", unknown)
	b, _ := json.Marshal(obj["spec"])
	fmt.Println("spec:", string(b))

	obj["spec"].(map[string]interface{})["replicas"] = int64(20)
	fmt.Println(v.Validate(ctx, obj).ToAggregate())
	// Output:
	// validation errors: 0
	// unknown fields: [spec.image]
	// spec: {"cronSpec":"0 0 * * *","replicas":1}
	// spec.replicas: Invalid value: 20: spec.replicas in body should be less than or equal to 10
}
