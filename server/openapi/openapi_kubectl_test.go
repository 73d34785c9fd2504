package openapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestOpenAPIKubectl checks that kubectl's default (strict) validation,
// apply's strategic merge of built-in kinds and explain work from the
// served OpenAPI, without --validate=false.
func TestOpenAPIKubectl(t *testing.T) {
	env := testenv.Start(t)
	k := servertest.NewOAKubectl(t, env)

	cm := k.File("cm.yaml", `apiVersion: v1
kind: ConfigMap
metadata:
  name: cm1
  namespace: default
data:
  a: "1"
`)
	if out := k.Ok("apply", "-f", cm); !strings.Contains(out, "configmap/cm1 created") {
		t.Errorf("kubectl apply (create) = %q, want configmap/cm1 created", out)
	}
	// The second apply computes a strategic merge patch from OpenAPI v3:
	// the key the manifest drops is removed, the label is added.
	cm2 := k.File("cm2.yaml", `apiVersion: v1
kind: ConfigMap
metadata:
  name: cm1
  namespace: default
  labels: {app: demo}
data:
  b: "2"
`)
	if out := k.Ok("apply", "-f", cm2); !strings.Contains(out, "configmap/cm1 configured") {
		t.Errorf("kubectl apply (update) = %q, want configmap/cm1 configured", out)
	}
	if got := k.Ok("get", "configmap", "cm1", "-n", "default", "-o", "jsonpath={.data} {.metadata.labels}"); got != `{"b":"2"} {"app":"demo"}` {
		t.Errorf("configmap after apply = %s, want {\"b\":\"2\"} {\"app\":\"demo\"}", got)
	}

	bad := k.File("bad.yaml", `apiVersion: v1
kind: ConfigMap
metadata:
  name: cm2
  namespace: default
data:
  a: "1"
bogus: true
`)
	for _, verb := range []string{"apply", "create"} {
		_, stderr, err := k.Run(verb, "-f", bad)
		if err == nil || !strings.Contains(stderr, `strict decoding error: unknown field "bogus"`) {
			t.Errorf("kubectl %s of an object with an unknown field: err %v, stderr %q, want strict decoding error: unknown field \"bogus\"", verb, err, stderr)
		}
	}

	crd := k.File("crd.yaml", `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.openapi.objwatch.io
spec:
  group: openapi.objwatch.io
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
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
            description: Spec of the gadget.
            properties:
              size:
                type: string
                description: How big the gadget is.
`)
	k.Ok("apply", "-f", crd)
	k.Ok("wait", "--for", "condition=established", "--timeout", "30s", "crd/gadgets.openapi.objwatch.io")

	cr := k.File("cr.yaml", `apiVersion: openapi.objwatch.io/v1
kind: Gadget
metadata:
  name: g1
  namespace: default
spec:
  size: large
`)
	// Established means served; kubectl's cached discovery may lag.
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, stderr, err := k.Run("apply", "-f", cr)
		if err == nil && stderr == "" && strings.Contains(out, "gadget.openapi.objwatch.io/g1 created") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl apply of a custom resource: %v\nstdout: %s\nstderr: %s", err, out, stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	badCR := k.File("badcr.yaml", `apiVersion: openapi.objwatch.io/v1
kind: Gadget
metadata:
  name: g2
  namespace: default
spec:
  size: small
  colour: red
`)
	if _, stderr, err := k.Run("apply", "-f", badCR); err == nil || !strings.Contains(stderr, `unknown field "spec.colour"`) {
		t.Errorf("kubectl apply of a custom resource with an unknown field: err %v, stderr %q, want unknown field \"spec.colour\"", err, stderr)
	}

	explain := []struct {
		args []string
		want []string
	}{
		{[]string{"gadgets.spec"}, []string{"KIND:       Gadget", "Spec of the gadget.", "size\t<string>", "How big the gadget is."}},
		{[]string{"configmaps"}, []string{"KIND:       ConfigMap", "ConfigMap holds configuration data for pods to consume.", "data\t<map[string]string>"}},
		{[]string{"namespaces.status.conditions"}, []string{"<[]NamespaceCondition>", "type\t<string> -required-"}},
		{[]string{"leases.spec.holderIdentity"}, []string{"GROUP:      coordination.k8s.io", "holderIdentity"}},
		{[]string{"crd.spec.names.plural"}, []string{"GROUP:      apiextensions.k8s.io", "plural is the plural name of the resource to serve"}},
		{[]string{"deployment.spec.template.spec.containers"}, []string{"GROUP:      apps", "KIND:       Deployment", "FIELD: containers <[]Container>", "name\t<string> -required-", "enum: Always, IfNotPresent, Never"}},
		{[]string{"cronjobs.spec.concurrencyPolicy"}, []string{"GROUP:      batch", "ENUM:", "Forbid"}},
	}
	for _, tc := range explain {
		out := k.Ok(append([]string{"explain"}, tc.args...)...)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("kubectl explain %s = %q, want it to contain %q", strings.Join(tc.args, " "), out, w)
			}
		}
	}
}
