package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/objwatch/objwatch/testenv"
)

// labelsOf is the labels of the object in r.
func labelsOf(r response) map[string]any {
	l, _ := r.object()["metadata"].(map[string]any)["labels"].(map[string]any)
	return l
}

// mutatingPolicy creates a MutatingAdmissionPolicy on configmap creates
// labelled label=yes, with reinvocationPolicy reinv and one JSONPatch
// mutation, and its binding.
func (a *api) mutatingPolicy(name, label, reinv, patch string) {
	a.t.Helper()
	mustCode(a.t, "create "+name, a.postYAML(maps, fmt.Sprintf(`
metadata: {name: %s}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}
    objectSelector: {matchLabels: {%s: "yes"}}
  reinvocationPolicy: %s
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: '%s'
`, name, label, reinv, patch)), http.StatusCreated)
	mustCode(a.t, "bind "+name, a.postYAML(mapbs, fmt.Sprintf("metadata: {name: %s}\nspec: {policyName: %s}\n", name, name)), http.StatusCreated)
}

// TestReinvocationAcrossPlugins: a MutatingAdmissionPolicy with
// reinvocationPolicy IfNeeded is invoked once more when a mutating
// webhook, which runs after the policies, changed the object, and then
// sees the webhook's change; one with Never is not, and a webhook with
// Never is not called again for the policy's change, as kube-apiserver's
// reinvoking admission chain.
func TestReinvocationAcrossPlugins(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	copyB := func(to string) string {
		return fmt.Sprintf(`[JSONPatch{op: "add", path: "/metadata/labels/%s", value: ("b" in object.metadata.labels) ? object.metadata.labels["b"] : "none"}]`, to)
	}
	a.mutatingPolicy("copy-if-needed", "reinv", "IfNeeded", copyB("a"))
	a.mutatingPolicy("copy-never", "reinv", "Never", copyB("c"))
	obj := labelled("r", "reinv", "")
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := a.json("POST", cms+"?dryRun=All", obj)
		mustCode(t, "dry-run create", r, http.StatusCreated)
		if l := labelsOf(r); l["a"] == "none" && l["c"] == "none" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("policies not enforced within 10 s: %s", r.body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var calls atomic.Int32
	env.Webhook(t, testenv.WebhookOptions{Name: "set-b", Rules: configMapRules,
		Mutating: func(_ context.Context, r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			calls.Add(1)
			if strings.Contains(string(r.Object.Raw), `"b":"from-webhook"`) {
				return nil
			}
			return jsonPatch(`{"op":"add","path":"/metadata/labels/b","value":"from-webhook"}`)
		}})
	r := a.must("POST", cms, obj)
	l := labelsOf(r)
	if l["a"] != "from-webhook" || l["b"] != "from-webhook" || l["c"] != "none" || calls.Load() != 1 {
		t.Errorf("labels %v, webhook calls %d; want a=b=from-webhook (the IfNeeded policy reinvoked), c=none, one webhook call", l, calls.Load())
	}
}
