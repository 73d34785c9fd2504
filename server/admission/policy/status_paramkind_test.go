package policy_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestPolicyParamKindPermission: creating an admission policy with a
// paramKind, or changing its paramKind, needs "get" on every object of
// that kind (a namespace's grant is not enough); an update keeping the
// paramKind does not, as Kubernetes' policy strategies.
func TestPolicyParamKindPermission(t *testing.T) {
	env := testenv.Start(t)
	admin := servertest.NewAPI(t, env)
	const rbacAPI = "/apis/rbac.authorization.k8s.io/v1/"
	admin.Must("POST", rbacAPI+"clusterroles", `{"metadata":{"name":"policy-writer"},
		"rules":[{"apiGroups":["admissionregistration.k8s.io"],"resources":["validatingadmissionpolicies","mutatingadmissionpolicies"],"verbs":["create","update","get"]}]}`)
	admin.Must("POST", rbacAPI+"clusterrolebindings", `{"metadata":{"name":"alice-writes"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"policy-writer"},"subjects":[{"kind":"User","name":"alice"}]}`)
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", servertest.RoleReader)
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", servertest.BindAlice)
	alice := servertest.UserAPI(t, env, "alice")
	vap := func(kind, expr string) string {
		return fmt.Sprintf(`{"metadata":{"name":"pk"},"spec":{"paramKind":{"apiVersion":"v1","kind":%q},
		"matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"]}]},
		"validations":[{"expression":%q}]}}`, kind, expr)
	}
	forbidden := func(what string, r servertest.Response, kind, want string) {
		t.Helper()
		msg := fmt.Sprintf(`%s "pk" is invalid: spec.paramKind: Forbidden: user &{alice  [system:authenticated] map[]} must have "get" permission on all objects of the referenced paramKind (kind=%s, apiVersion=v1)`, want, kind)
		if s := r.Status(); r.Code != http.StatusUnprocessableEntity || s.Message != msg {
			t.Fatalf("%s = %d %s, want 422 %q", what, r.Code, r.Body, msg)
		}
	}
	var r servertest.Response
	servertest.Eventually(t, "alice may create policies", func() bool {
		r = alice.JSON("POST", servertest.VAPs, vap("ConfigMap", "true"))
		return r.Code != http.StatusForbidden
	})
	forbidden("create", r, "ConfigMap", "ValidatingAdmissionPolicy.admissionregistration.k8s.io")
	forbidden("create a mutating policy", alice.JSON("POST", servertest.MAPs, `{"metadata":{"name":"pk"},"spec":{"paramKind":{"apiVersion":"v1","kind":"ConfigMap"},
		"matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"]}]},
		"reinvocationPolicy":"Never","mutations":[{"patchType":"JSONPatch","jsonPatch":{"expression":"[JSONPatch{op: \"add\", path: \"/metadata/labels/x\", value: \"y\"}]"}}]}}`),
		"ConfigMap", "MutatingAdmissionPolicy.admissionregistration.k8s.io")
	servertest.MustCode(t, "create without paramKind", alice.JSON("POST", servertest.VAPs, `{"metadata":{"name":"plain"},"spec":{
		"matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"]}]},
		"validations":[{"expression":"true"}]}}`), http.StatusCreated)
	// Admin makes it; alice may then update it keeping the paramKind,
	// not change the paramKind.
	admin.Must("POST", servertest.VAPs, vap("ConfigMap", "true"))
	// The server's status controller writes each generation's status
	// (typeChecking): update from the resourceVersion after it.
	settled := func() string {
		var rv string
		servertest.Eventually(t, "the policy's status written", func() bool {
			o := admin.JSON("GET", servertest.VAPs+"/pk", "").Object()
			md, _ := o["metadata"].(map[string]any)
			st, _ := o["status"].(map[string]any)
			rv, _ = md["resourceVersion"].(string)
			return st != nil && st["observedGeneration"] == md["generation"]
		})
		return rv
	}
	withRV := func(body string) string {
		return strings.Replace(body, `"name":"pk"}`, `"name":"pk","resourceVersion":"`+settled()+`"}`, 1)
	}
	r = alice.JSON("PUT", servertest.VAPs+"/pk", withRV(vap("ConfigMap", "1 == 1")))
	servertest.MustCode(t, "update keeping paramKind", r, http.StatusOK)
	forbidden("update changing paramKind", alice.JSON("PUT", servertest.VAPs+"/pk", withRV(vap("Secret", "true"))), "Secret", "ValidatingAdmissionPolicy.admissionregistration.k8s.io")
	// With "get" on configmaps everywhere, the create passes.
	admin.Must("POST", rbacAPI+"clusterrolebindings", `{"metadata":{"name":"alice-views"},
		"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cm-getter"},"subjects":[{"kind":"User","name":"alice"}]}`)
	admin.Must("POST", rbacAPI+"clusterroles", `{"metadata":{"name":"cm-getter"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}]}`)
	servertest.Eventually(t, "alice may reference configmaps", func() bool {
		return alice.JSON("POST", servertest.VAPs+"?dryRun=All", strings.Replace(vap("ConfigMap", "true"), `"pk"`, `"pk2"`, 1)).Code == http.StatusCreated
	})
}

// TestPolicyTypeChecking: the server fills a ValidatingAdmissionPolicy's
// status as kube-controller-manager's status controller: observedGeneration
// and typeChecking.expressionWarnings for an expression that refers to a
// field the matched kind (or its params' kind) does not have, again after an update, with the
// controller's field manager.
func TestPolicyTypeChecking(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	servertest.MustCode(t, "create", a.PostYAML(servertest.VAPs, `
metadata: {name: tc}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}
  validations:
  - expression: "object.data.size() > 1 && object.nonsense == 'x'"
  - expression: "object.data.size() < int(params.data.max)"
    messageExpression: "'too many: ' + string(object.dataz)"
`), http.StatusCreated)
	status := func(gen float64) map[string]any {
		t.Helper()
		var st map[string]any
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := a.JSON("GET", servertest.VAPs+"/tc", "")
			st, _ = r.Object()["status"].(map[string]any)
			if st["observedGeneration"] == gen {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("status not observed generation %v within 10 s: %s", gen, r.Body)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	st := status(1)
	ws, _ := st["typeChecking"].(map[string]any)["expressionWarnings"].([]any)
	if len(ws) != 2 {
		t.Fatalf("status %v, want two warnings", st)
	}
	for i, want := range []struct{ ref, text string }{
		{"spec.validations[0].expression", "/v1, Kind=ConfigMap: ERROR: <input>:1:33: undefined field 'nonsense'"},
		{"spec.validations[1].messageExpression", "undefined field 'dataz'"},
	} {
		w := ws[i].(map[string]any)
		if w["fieldRef"] != want.ref || !strings.Contains(w["warning"].(string), want.text) {
			t.Errorf("warning %d = %v, want %s: %q", i, w, want.ref, want.text)
		}
	}
	r := a.JSON("GET", servertest.VAPs+"/tc", "")
	if !strings.Contains(string(r.Body), `"manager":"validatingadmissionpolicy-status","operation":"Apply"`) {
		t.Errorf("no managedFields entry of the status controller: %s", r.Body)
	}
	// Fixed: no warnings left.
	servertest.MustCode(t, "fix", a.Do("PATCH", servertest.VAPs+"/tc", "application/json-patch+json", []byte(`[
		{"op":"replace","path":"/spec/validations","value":[{"expression":"object.data.size() > 1"}]}]`)), http.StatusOK)
	// kube-apiserver v1.37.2, given the status controller's apply of
	// typeChecking: {} after warnings (kubectl apply --server-side
	// --subresource=status as its field manager), answers
	// status {observedGeneration: 2}: the emptied typeChecking goes.
	if st := status(2); st["typeChecking"] != nil {
		t.Errorf("status after the fix = %v, want typeChecking gone, as kube-apiserver", st)
	}
	// A policy without warnings from the start keeps the applied
	// typeChecking: {}, as in kube-apiserver.
	servertest.MustCode(t, "create clean", a.PostYAML(servertest.VAPs, `
metadata: {name: clean}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}
  validations:
  - expression: "object.data.size() > 1"
`), http.StatusCreated)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r := a.JSON("GET", servertest.VAPs+"/clean", "")
		st, _ := r.Object()["status"].(map[string]any)
		if st["observedGeneration"] == float64(1) {
			if tc, ok := st["typeChecking"].(map[string]any); !ok || len(tc) != 0 {
				t.Errorf("status of a policy without warnings = %v, want typeChecking: {}", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("clean policy's status not written: %s", r.Body)
		}
	}

	// A custom resource's schema is its CRD's.
	servertest.MustCode(t, "create CRD", a.PostYAML("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", `
metadata: {name: gadgets.example.com}
spec:
  group: example.com
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
          spec: {type: object, properties: {size: {type: string}}}
`), http.StatusCreated)
	deadline := time.Now().Add(10 * time.Second)
	for a.JSON("GET", "/apis/example.com/v1/gadgets", "").Code != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("gadgets not served within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	servertest.MustCode(t, "fix", a.Do("PATCH", servertest.VAPs+"/tc", "application/json-patch+json", []byte(`[
		{"op":"replace","path":"/spec/matchConstraints/resourceRules","value":[{"apiGroups":["example.com"],"apiVersions":["v1"],"operations":["CREATE"],"resources":["gadgets"]}]},
		{"op":"replace","path":"/spec/validations","value":[{"expression":"object.spec.size == 'x'"},{"expression":"object.spec.sise == 'x'"}]}]`)), http.StatusOK)
	ws, _ = status(3)["typeChecking"].(map[string]any)["expressionWarnings"].([]any)
	if len(ws) != 1 || ws[0].(map[string]any)["fieldRef"] != "spec.validations[1].expression" ||
		!strings.Contains(ws[0].(map[string]any)["warning"].(string), "example.com/v1, Kind=Gadget: ERROR: <input>:1:12: undefined field 'sise'") {
		t.Errorf("warnings on a custom resource = %v, want one on validations[1]", ws)
	}
}
