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

// TestPolicyParamKindPermission: creating an admission policy with a
// paramKind, or changing its paramKind, needs "get" on every object of
// that kind (a namespace's grant is not enough); an update keeping the
// paramKind does not, as Kubernetes' policy strategies.
func TestPolicyParamKindPermission(t *testing.T) {
	env := testenv.Start(t)
	admin := newAPI(t, env)
	const rbacAPI = "/apis/rbac.authorization.k8s.io/v1/"
	admin.must("POST", rbacAPI+"clusterroles", `{"metadata":{"name":"policy-writer"},
		"rules":[{"apiGroups":["admissionregistration.k8s.io"],"resources":["validatingadmissionpolicies","mutatingadmissionpolicies"],"verbs":["create","update","get"]}]}`)
	admin.must("POST", rbacAPI+"clusterrolebindings", `{"metadata":{"name":"alice-writes"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"policy-writer"},"subjects":[{"kind":"User","name":"alice"}]}`)
	admin.must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", roleReader)
	admin.must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", bindAlice)
	alice := userAPI(t, env, "alice")
	vap := func(kind, expr string) string {
		return fmt.Sprintf(`{"metadata":{"name":"pk"},"spec":{"paramKind":{"apiVersion":"v1","kind":%q},
		"matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"]}]},
		"validations":[{"expression":%q}]}}`, kind, expr)
	}
	forbidden := func(what string, r response, kind, want string) {
		t.Helper()
		msg := fmt.Sprintf(`%s "pk" is invalid: spec.paramKind: Forbidden: user &{alice  [system:authenticated] map[]} must have "get" permission on all objects of the referenced paramKind (kind=%s, apiVersion=v1)`, want, kind)
		if s := r.status(); r.code != http.StatusUnprocessableEntity || s.Message != msg {
			t.Fatalf("%s = %d %s, want 422 %q", what, r.code, r.body, msg)
		}
	}
	var r response
	eventually(t, "alice may create policies", func() bool {
		r = alice.json("POST", vaps, vap("ConfigMap", "true"))
		return r.code != http.StatusForbidden
	})
	forbidden("create", r, "ConfigMap", "ValidatingAdmissionPolicy.admissionregistration.k8s.io")
	forbidden("create a mutating policy", alice.json("POST", maps, `{"metadata":{"name":"pk"},"spec":{"paramKind":{"apiVersion":"v1","kind":"ConfigMap"},
		"matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"]}]},
		"reinvocationPolicy":"Never","mutations":[{"patchType":"JSONPatch","jsonPatch":{"expression":"[JSONPatch{op: \"add\", path: \"/metadata/labels/x\", value: \"y\"}]"}}]}}`),
		"ConfigMap", "MutatingAdmissionPolicy.admissionregistration.k8s.io")
	mustCode(t, "create without paramKind", alice.json("POST", vaps, `{"metadata":{"name":"plain"},"spec":{
		"matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"]}]},
		"validations":[{"expression":"true"}]}}`), http.StatusCreated)
	// Admin makes it; alice may then update it keeping the paramKind,
	// not change the paramKind.
	created := admin.must("POST", vaps, vap("ConfigMap", "true"))
	rv := created.object()["metadata"].(map[string]any)["resourceVersion"].(string)
	withRV := func(body string) string {
		return strings.Replace(body, `"name":"pk"}`, `"name":"pk","resourceVersion":"`+rv+`"}`, 1)
	}
	r = alice.json("PUT", vaps+"/pk", withRV(vap("ConfigMap", "1 == 1")))
	mustCode(t, "update keeping paramKind", r, http.StatusOK)
	rv = r.object()["metadata"].(map[string]any)["resourceVersion"].(string)
	forbidden("update changing paramKind", alice.json("PUT", vaps+"/pk", withRV(vap("Secret", "true"))), "Secret", "ValidatingAdmissionPolicy.admissionregistration.k8s.io")
	// With "get" on configmaps everywhere, the create passes.
	admin.must("POST", rbacAPI+"clusterrolebindings", `{"metadata":{"name":"alice-views"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cm-getter"},"subjects":[{"kind":"User","name":"alice"}]}`)
	admin.must("POST", rbacAPI+"clusterroles", `{"metadata":{"name":"cm-getter"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}]}`)
	eventually(t, "alice may reference configmaps", func() bool {
		return alice.json("POST", vaps+"?dryRun=All", strings.Replace(vap("ConfigMap", "true"), `"pk"`, `"pk2"`, 1)).code == http.StatusCreated
	})
}
