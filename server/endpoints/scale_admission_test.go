package endpoints_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestScaleAdmission: a write through a custom resource's /scale reaches
// admission as kube-apiserver's ScaleREST hands it over: webhooks get an
// autoscaling/v1 Scale (kind and requestKind Scale, subResource scale,
// resource the custom resource's), old and new; a mutating webhook's
// patch of the Scale's spec.replicas lands in the object; a validating
// policy on widgets/scale sees the Scale.
func TestScaleAdmission(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	servertest.MustCode(t, "create CRD", a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", servertest.ScaleCRD), http.StatusCreated)
	servertest.WaitServed(t, a, servertest.Widgets)
	servertest.MustCode(t, "create widget", a.JSON("POST", servertest.Widgets, servertest.Widget("w", `"replicas":1,"image":"x"`)), http.StatusCreated)
	var v, m servertest.Seen
	env.Webhook(t, testenv.WebhookOptions{
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{"UPDATE"},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"scale.objwatch.io"}, APIVersions: []string{"v1"}, Resources: []string{"widgets/scale"}},
		}},
		Validating: func(_ context.Context, r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			v.Add(r)
			return &admissionv1.AdmissionResponse{Allowed: true}
		},
		Mutating: func(_ context.Context, r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			m.Add(r)
			return servertest.JSONPatch(`{"op":"replace","path":"/spec/replicas","value":9}`)
		},
	})
	r := a.JSON("PUT", servertest.Widgets+"/w/scale", servertest.ScaleBody("w", "", 3))
	servertest.MustCode(t, "scale", r, http.StatusOK)
	if sc := servertest.DecodeScale(t, r); sc.Spec.Replicas != 9 {
		t.Errorf("scale answered replicas %d, want the webhook's 9", sc.Spec.Replicas)
	}
	if rep, _, _ := servertest.WidgetState(t, a, "w"); rep != float64(9) {
		t.Errorf("stored spec.replicas %v, want 9", rep)
	}
	for _, c := range []struct {
		name  string
		s     *servertest.Seen
		wantN int64
	}{{"mutating", &m, 3}, {"validating", &v, 9}} {
		reqs := c.s.All()
		if len(reqs) == 0 {
			t.Fatalf("%s webhook not called", c.name)
		}
		rq := reqs[len(reqs)-1]
		if rq.Kind.Group != "autoscaling" || rq.Kind.Version != "v1" || rq.Kind.Kind != "Scale" || rq.RequestKind == nil || rq.RequestKind.Kind != "Scale" ||
			rq.SubResource != "scale" || rq.Resource.Resource != "widgets" || rq.Resource.Group != "scale.objwatch.io" || rq.Name != "w" {
			t.Errorf("%s review: kind %v requestKind %v resource %v subResource %q", c.name, rq.Kind, rq.RequestKind, rq.Resource, rq.SubResource)
		}
		var obj, old struct {
			APIVersion, Kind string
			Spec             struct{ Replicas int64 }
		}
		json.Unmarshal(rq.Object.Raw, &obj)
		json.Unmarshal(rq.OldObject.Raw, &old)
		if obj.Kind != "Scale" || obj.APIVersion != "autoscaling/v1" || obj.Spec.Replicas != c.wantN || old.Kind != "Scale" || old.Spec.Replicas != 1 {
			t.Errorf("%s review objects: %s old %s", c.name, rq.Object.Raw, rq.OldObject.Raw)
		}
		if strings.Contains(string(rq.Object.Raw), "image") {
			t.Errorf("%s review has the whole object: %s", c.name, rq.Object.Raw)
		}
	}

	// A policy on widgets/scale: its first validation fails on anything
	// but a Scale, its second on the webhook's 9.
	servertest.MustCode(t, "policy", a.PostYAML(servertest.VAPs, `
metadata: {name: scale-cap}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: ["scale.objwatch.io"], apiVersions: ["v1"], operations: ["UPDATE"], resources: ["widgets/scale"]}
  validations:
  - expression: "object.kind == 'Scale' && oldObject.kind == 'Scale' && !has(object.spec.image)"
    message: "not a Scale"
  - expression: "object.spec.replicas < 5"
    message: "too many"
`), http.StatusCreated)
	servertest.MustCode(t, "binding", a.PostYAML(servertest.VAPBs, "metadata: {name: scale-cap}\nspec: {policyName: scale-cap, validationActions: [Deny]}\n"), http.StatusCreated)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := a.JSON("PUT", servertest.Widgets+"/w/scale", servertest.ScaleBody("w", "", 2))
		if r.Code == http.StatusUnprocessableEntity && strings.Contains(r.Status().Message, "too many") {
			break // the webhook's 9 is what the policy sees, in a Scale
		}
		if r.Code != http.StatusOK {
			t.Fatalf("scale under scale-cap = %d %s", r.Code, r.Body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("scale under scale-deny = %d %s", r.Code, r.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
