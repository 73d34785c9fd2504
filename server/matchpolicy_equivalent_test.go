package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// gadgetsNoneCRD is example.com's Gadget in v1 (spec.size) and v2
// (spec.size and spec.color), strategy None, stored in v2.
const gadgetsNoneCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"gadgets.example.com"},
 "spec":{"group":"example.com","scope":"Namespaced",
  "names":{"plural":"gadgets","singular":"gadget","kind":"Gadget","listKind":"GadgetList"},
  "versions":[
   {"name":"v1","served":true,"storage":false,"schema":{"openAPIV3Schema":{"type":"object","properties":{
     "spec":{"type":"object","properties":{"size":{"type":"string"}}}}}}},
   {"name":"v2","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","properties":{
     "spec":{"type":"object","properties":{"size":{"type":"string"},"color":{"type":"string"}}}}}}}]}}`

const (
	gadgetsV1 = "/apis/example.com/v1/namespaces/default/gadgets"
	gadgetsV2 = "/apis/example.com/v2/namespaces/default/gadgets"
)

// equivalentHooks registers, for resource's v1 only, a validating and a
// mutating webhook with matchPolicy Equivalent (the default) named "eq",
// and another pair with Exact named "exact"; the mutating "eq" applies
// patch. It returns what each pair saw.
func equivalentHooks(t *testing.T, env *testenv.Env, resource string, patch string) (eqV, eqM, exact *servertest.Seen) {
	eqV, eqM, exact = &servertest.Seen{}, &servertest.Seen{}, &servertest.Seen{}
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{"CREATE", "UPDATE"},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{resource, resource + "/scale"}},
	}}
	allow := func(s *servertest.Seen) testenv.AdmissionFunc {
		return func(_ context.Context, r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			s.Add(r)
			return &admissionv1.AdmissionResponse{Allowed: true}
		}
	}
	env.Webhook(t, testenv.WebhookOptions{Name: "eq", Rules: rules, Validating: allow(eqV),
		Mutating: func(_ context.Context, r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			eqM.Add(r)
			if r.SubResource != "" {
				return &admissionv1.AdmissionResponse{Allowed: true}
			}
			return servertest.JSONPatch(patch)
		}})
	exactPolicy := admissionregistrationv1.Exact
	env.Webhook(t, testenv.WebhookOptions{Name: "exact", Rules: rules, Validating: allow(exact), Mutating: allow(exact),
		Validate: func(h *admissionregistrationv1.ValidatingWebhook) { h.MatchPolicy = &exactPolicy },
		Mutate:   func(h *admissionregistrationv1.MutatingWebhook) { h.MatchPolicy = &exactPolicy }})
	return eqV, eqM, exact
}

// lastReview is the last review s saw, decoded.
func lastReview(t *testing.T, s *servertest.Seen) (*admissionv1.AdmissionRequest, map[string]any) {
	t.Helper()
	reqs := s.All()
	if len(reqs) == 0 {
		t.Fatal("webhook not called")
	}
	r := reqs[len(reqs)-1]
	var obj map[string]any
	if err := json.Unmarshal(r.Object.Raw, &obj); err != nil {
		t.Fatalf("review object %s: %v", r.Object.Raw, err)
	}
	return r, obj
}

func wantKinds(t *testing.T, what string, r *admissionv1.AdmissionRequest, kind, requestKind string) {
	t.Helper()
	gvk := func(k admissionv1.AdmissionRequest) string {
		return fmt.Sprintf("%s/%s", k.Kind.Version, k.Resource.Version)
	}
	got := gvk(*r)
	if r.RequestKind == nil || r.RequestResource == nil {
		t.Fatalf("%s: no requestKind/requestResource: %+v", what, r)
	}
	gotReq := r.RequestKind.Version + "/" + r.RequestResource.Version
	if got != kind+"/"+kind || gotReq != requestKind+"/"+requestKind {
		t.Errorf("%s: kind/resource %s, requestKind/requestResource %s; want %s and %s", what, got, gotReq, kind, requestKind)
	}
}

// wantV1Reviews checks the last reviews of a v2 request: in v1 (kind
// and resource v1, requestKind and requestResource v2), the mutating
// webhook's with spec.size before, the validating webhook's after the
// mutation.
func wantV1Reviews(t *testing.T, mutating, validating *servertest.Seen, before, after string) {
	t.Helper()
	for _, c := range []struct {
		what string
		s    *servertest.Seen
		size string
	}{{"mutating", mutating, before}, {"validating", validating, after}} {
		r, obj := lastReview(t, c.s)
		wantKinds(t, c.what, r, "v1", "v2")
		if obj["apiVersion"] != "example.com/v1" || servertest.SpecOf(obj)["size"] != c.size {
			t.Errorf("%s webhook got %s, want the object in v1 with spec.size %q", c.what, r.Object.Raw, c.size)
		}
	}
}

// TestWebhookMatchPolicyEquivalent: a webhook whose rules name v1 of a
// two-version CRD is called for a request in v2 when its matchPolicy is
// Equivalent (not when Exact), with the object converted to v1 (kind and
// resource v1, requestKind and requestResource v2), and its patch applied
// to the v1 object lands in the v2 object stored and answered: through a
// conversion webhook, and with strategy None (only apiVersion changes,
// so a v2-only field survives the round trip).
func TestWebhookMatchPolicyEquivalent(t *testing.T) {
	t.Run("Webhook", func(t *testing.T) {
		env, _ := servertest.StartWidgets(t)
		a := servertest.NewAPI(t, env)
		eqV, eqM, exact := equivalentHooks(t, env, "widgets", `{"op":"replace","path":"/spec/size","value":"7"}`)
		r := a.JSON("POST", servertest.WidgetsV2, servertest.WidgetV2("w", 5))
		servertest.MustCode(t, "create in v2", r, http.StatusCreated)
		if got := r.Object(); got["apiVersion"] != "example.com/v2" || servertest.SpecOf(got)["replicas"] != float64(7) {
			t.Errorf("create answered %s, want the mutation in v2 (replicas 7)", r.Body)
		}
		wantV1Reviews(t, eqM, eqV, "5", "7")
		if got := a.JSON("GET", servertest.WidgetsV2+"/w", "").Object(); servertest.SpecOf(got)["replicas"] != float64(7) {
			t.Errorf("stored %v, want replicas 7", got)
		}
		if n := len(exact.All()); n != 0 {
			t.Errorf("Exact webhooks called %d times for a v2 request", n)
		}
		// A v1 request: both, in v1.
		servertest.MustCode(t, "create in v1", a.JSON("POST", servertest.WidgetsV1, servertest.WidgetV1("w1", "2")), http.StatusCreated)
		v, _ := lastReview(t, eqV)
		wantKinds(t, "v1 request", v, "v1", "v1")
		if n := len(exact.All()); n != 2 {
			t.Errorf("Exact webhooks called %d times for a v1 request, want 2", n)
		}
	})

	t.Run("None", func(t *testing.T) {
		env := testenv.Start(t)
		a := servertest.NewAPI(t, env)
		servertest.MustCode(t, "create CRD", a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", gadgetsNoneCRD), http.StatusCreated)
		servertest.WaitServed(t, a, gadgetsV2)
		eqV, eqM, exact := equivalentHooks(t, env, "gadgets", `{"op":"replace","path":"/spec/size","value":"big"}`)
		r := a.JSON("POST", gadgetsV2, `{"apiVersion":"example.com/v2","kind":"Gadget","metadata":{"name":"g"},"spec":{"size":"small","color":"red"}}`)
		servertest.MustCode(t, "create in v2", r, http.StatusCreated)
		if got := servertest.SpecOf(r.Object()); got["size"] != "big" || got["color"] != "red" {
			t.Errorf("create answered %s, want size big and color red", r.Body)
		}
		wantV1Reviews(t, eqM, eqV, "small", "big")
		if got := servertest.SpecOf(a.JSON("GET", gadgetsV2+"/g", "").Object()); got["size"] != "big" || got["color"] != "red" {
			t.Errorf("stored spec %v", got)
		}
		if n := len(exact.All()); n != 0 {
			t.Errorf("Exact webhooks called %d times for a v2 request", n)
		}
	})
}

// TestPolicyMatchPolicyEquivalent: admission policies whose
// matchConstraints name v1 of a two-version CRD apply to a request in
// v2 with matchPolicy Equivalent (not Exact), on the object converted to
// v1; a mutating policy's change lands in the v2 object.
func TestPolicyMatchPolicyEquivalent(t *testing.T) {
	env, _ := servertest.StartWidgets(t)
	a := servertest.NewAPI(t, env)
	for _, mp := range []string{"Equivalent", "Exact"} {
		name := strings.ToLower(mp)
		servertest.MustCode(t, "policy "+name, a.PostYAML(servertest.VAPs, fmt.Sprintf(`
metadata: {name: %s}
spec:
  matchConstraints:
    matchPolicy: %s
    resourceRules:
    - {apiGroups: ["example.com"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["widgets"]}
    objectSelector: {matchLabels: {policy: %s}}
  validations:
  - expression: "object.apiVersion == 'example.com/v1' && object.spec.size != '13'"
    message: "%s: size 13 in v1"
`, name, mp, name, name)), http.StatusCreated)
		servertest.MustCode(t, "binding "+name, a.PostYAML(servertest.VAPBs, fmt.Sprintf("metadata: {name: %s}\nspec: {policyName: %s, validationActions: [Deny]}\n", name, name)), http.StatusCreated)
	}
	servertest.MustCode(t, "mutating policy", a.PostYAML(servertest.MAPs, `
metadata: {name: grow}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: ["example.com"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["widgets"]}
    objectSelector: {matchLabels: {policy: grow}}
  reinvocationPolicy: Never
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: "replace", path: "/spec/size", value: object.apiVersion == "example.com/v1" ? object.spec.size + "0" : "wrong"}]
`), http.StatusCreated)
	servertest.MustCode(t, "bind grow", a.PostYAML(servertest.MAPBs, "metadata: {name: grow}\nspec: {policyName: grow}\n"), http.StatusCreated)
	labelled := func(name, policy string, replicas int) string {
		return fmt.Sprintf(`{"apiVersion":"example.com/v2","kind":"Widget","metadata":{"name":%q,"labels":{"policy":%q}},"spec":{"replicas":%d}}`, name, policy, replicas)
	}
	a.Until(servertest.WidgetsV2, labelled("e", "equivalent", 13), http.StatusUnprocessableEntity)
	if r := a.JSON("POST", servertest.WidgetsV2+"?dryRun=All", labelled("e", "equivalent", 13)); !strings.Contains(r.Status().Message, "equivalent: size 13 in v1") {
		t.Errorf("Equivalent policy denial = %d %s", r.Code, r.Body)
	}
	servertest.MustCode(t, "Equivalent policy allows 12", a.JSON("POST", servertest.WidgetsV2+"?dryRun=All", labelled("e", "equivalent", 12)), http.StatusCreated)
	// Exact: the v1 rule does not match a v2 request; give the policy
	// the time the Equivalent one took to be enforced.
	servertest.MustCode(t, "Exact policy does not apply to v2", a.JSON("POST", servertest.WidgetsV2+"?dryRun=All", labelled("x", "exact", 13)), http.StatusCreated)
	a.Until(servertest.WidgetsV1, strings.Replace(servertest.WidgetV1("x", "13"), `"name":"x"`, `"name":"x","labels":{"policy":"exact"}`, 1), http.StatusUnprocessableEntity)
	var r servertest.Response
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = a.JSON("POST", servertest.WidgetsV2+"?dryRun=All", labelled("m", "grow", 4))
		if r.Code == http.StatusCreated && servertest.SpecOf(r.Object())["replicas"] == float64(40) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mutating policy on v1 of a v2 create: %d %s, want replicas 40", r.Code, r.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
