package webhook_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// Admission webhooks against a real server: each rule of
// ValidatingWebhookConfiguration and MutatingWebhookConfiguration as a
// scenario. Expected messages are kube-apiserver v1.37's.

func TestWebhookDenyAllowWarnMutate(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	var v, m servertest.Seen
	env.Webhook(t, testenv.WebhookOptions{
		Rules: servertest.ConfigMapRules,
		Validating: func(_ context.Context, r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			v.Add(r)
			var obj metav1.PartialObjectMetadata
			json.Unmarshal(r.Object.Raw, &obj)
			switch obj.Labels["verdict"] {
			case "deny":
				return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: "no way", Code: 403, Reason: metav1.StatusReasonForbidden}, Warnings: []string{"denied warning"}}
			case "bare":
				return &admissionv1.AdmissionResponse{}
			}
			return &admissionv1.AdmissionResponse{Allowed: true, Warnings: []string{"be careful", "second"}}
		},
		Mutating: func(_ context.Context, r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			m.Add(r)
			if r.Operation == admissionv1.Delete {
				return nil
			}
			return servertest.JSONPatch(`{"op":"add","path":"/data/mutated","value":"yes"}`)
		},
	})

	r := a.JSON("POST", servertest.CMs, servertest.CM("denied", `,"labels":{"verdict":"deny"}`))
	servertest.WantStatus(t, r, 403, `admission webhook "testenv.testenv.objwatch.io" denied the request: no way`)
	if w := r.Header.Values("Warning"); len(w) != 1 || !strings.Contains(w[0], "denied warning") {
		t.Errorf("denial warnings = %q", w)
	}
	r = a.JSON("POST", servertest.CMs, servertest.CM("bare", `,"labels":{"verdict":"bare"}`))
	servertest.WantStatus(t, r, 400, `admission webhook "testenv.testenv.objwatch.io" denied the request without explanation`)
	for _, name := range []string{"denied", "bare"} {
		if r := a.JSON("GET", servertest.CMs+"/"+name, ""); r.Code != 404 {
			t.Errorf("denied %s was stored: %d", name, r.Code)
		}
	}

	r = a.JSON("POST", servertest.CMs+"?fieldManager=tester", servertest.CM("ok", ""))
	if r.Code != 201 {
		t.Fatalf("create = %d %s", r.Code, r.Body)
	}
	if w := r.Header.Values("Warning"); len(w) != 2 || !strings.Contains(w[0], "be careful") || !strings.Contains(w[1], "second") {
		t.Errorf("warnings = %q", w)
	}
	stored := a.JSON("GET", servertest.CMs+"/ok", "").Object()
	if d, _ := stored["data"].(map[string]any); d["mutated"] != "yes" {
		t.Errorf("stored data = %v, want the webhook's patch", d)
	}

	// The review, as Kubernetes builds it.
	reqs := v.All()
	last := reqs[len(reqs)-1]
	if last.Operation != admissionv1.Create || last.Kind.Kind != "ConfigMap" || last.Resource.Resource != "configmaps" ||
		last.RequestKind == nil || last.RequestKind.Kind != "ConfigMap" || last.Namespace != "default" || last.Name != "ok" ||
		last.UserInfo.Username != "admin" || last.DryRun == nil || *last.DryRun || last.OldObject.Raw != nil && string(last.OldObject.Raw) != "null" {
		t.Errorf("review = %+v", last)
	}
	var opts metav1.CreateOptions
	json.Unmarshal(last.Options.Raw, &opts)
	if opts.Kind != "CreateOptions" || opts.APIVersion != "meta.k8s.io/v1" || opts.FieldManager != "tester" {
		t.Errorf("options = %s", last.Options.Raw)
	}
	// The validating webhook sees the mutated object.
	if !strings.Contains(string(last.Object.Raw), `"mutated":"yes"`) {
		t.Errorf("validating webhook saw %s, want the mutation", last.Object.Raw)
	}

	// Update: old object, UpdateOptions.
	r = a.JSON("PUT", servertest.CMs+"/ok", servertest.CM("ok", `,"labels":{"x":"1"}`))
	if r.Code != 200 {
		t.Fatalf("update = %d %s", r.Code, r.Body)
	}
	reqs = v.All()
	last = reqs[len(reqs)-1]
	json.Unmarshal(last.Options.Raw, &opts)
	if last.Operation != admissionv1.Update || !strings.Contains(string(last.OldObject.Raw), `"name":"ok"`) || opts.Kind != "UpdateOptions" {
		t.Errorf("update review = %s %s %s", last.Operation, last.OldObject.Raw, last.Options.Raw)
	}

	// Delete: no object, the old one, DeleteOptions; mutating webhooks
	// are called too.
	if r := a.JSON("DELETE", servertest.CMs+"/ok", ""); r.Code != 200 {
		t.Fatalf("delete = %d %s", r.Code, r.Body)
	}
	reqs = v.All()
	last = reqs[len(reqs)-1]
	var dopts metav1.DeleteOptions
	json.Unmarshal(last.Options.Raw, &dopts)
	if last.Operation != admissionv1.Delete || (last.Object.Raw != nil && string(last.Object.Raw) != "null") || !strings.Contains(string(last.OldObject.Raw), `"name":"ok"`) || dopts.Kind != "DeleteOptions" {
		t.Errorf("delete review = %s object %s old %s options %s", last.Operation, last.Object.Raw, last.OldObject.Raw, last.Options.Raw)
	}
	if mr := m.All(); mr[len(mr)-1].Operation != admissionv1.Delete {
		t.Errorf("mutating webhook did not see the delete")
	}
}

// webhookConfig creates a configuration of one webhook at url with the
// given JSON fields added, and waits until it is enforced.
func webhookConfig(t *testing.T, env *testenv.Env, kind, name, url string, ca []byte, extra string) {
	t.Helper()
	h := fmt.Sprintf(`{"name":%q,"clientConfig":{"url":%q,"caBundle":%q},"rules":[{"operations":["CREATE","UPDATE","DELETE"],"apiGroups":[""],"apiVersions":["v1"],"resources":["configmaps"]}],"sideEffects":"None","admissionReviewVersions":["v1"]%s}`,
		name+".example.com", url, base64.StdEncoding.EncodeToString(ca), extra)
	var vc *admissionregistrationv1.ValidatingWebhookConfiguration
	var mc *admissionregistrationv1.MutatingWebhookConfiguration
	body := fmt.Sprintf(`{"metadata":{"name":%q},"webhooks":[%s]}`, name, h)
	var err error
	if kind == "ValidatingWebhookConfiguration" {
		vc = &admissionregistrationv1.ValidatingWebhookConfiguration{}
		err = json.Unmarshal([]byte(body), vc)
	} else {
		mc = &admissionregistrationv1.MutatingWebhookConfiguration{}
		err = json.Unmarshal([]byte(body), mc)
	}
	if err != nil {
		t.Fatal(err)
	}
	env.RegisterWebhooks(t, vc, mc)
}

// faultyWebhooks serves webhooks that misbehave in each way Kubernetes
// handles: by path.
func faultyWebhooks(t *testing.T) *testenv.WebhookServer {
	return testenv.StartWebhookServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		json.NewDecoder(r.Body).Decode(&review)
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		pt := admissionv1.PatchTypeJSONPatch
		switch r.URL.Path {
		case "/slow":
			select {
			case <-time.After(3 * time.Second):
			case <-r.Context().Done():
			}
			return
		case "/garbage":
			w.Write([]byte("<html>"))
			return
		case "/500":
			http.Error(w, "boom", 500)
			return
		case "/wronguid":
			resp.UID = "nope"
		case "/patchname":
			resp.PatchType, resp.Patch = &pt, []byte(`[{"op":"replace","path":"/metadata/name","value":"renamed"}]`)
		case "/patchns":
			resp.PatchType, resp.Patch = &pt, []byte(`[{"op":"replace","path":"/metadata/namespace","value":"kube-system"}]`)
		case "/patchuid":
			resp.PatchType, resp.Patch = &pt, []byte(`[{"op":"add","path":"/metadata/uid","value":"1234"}]`)
		case "/badpatch":
			resp.PatchType, resp.Patch = &pt, []byte(`[{"op":"replace","path":"/nothere/x","value":"y"}]`)
		}
		json.NewEncoder(w).Encode(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Response: resp})
	}))
}

func TestWebhookFailures(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	s := faultyWebhooks(t)
	for _, tc := range []struct {
		path, want string
	}{
		{"/slow", `Internal error occurred: failed calling webhook "slow.example.com": failed to call webhook: Post "` + s.URL + `/slow?timeout=1s": context deadline exceeded`},
		{"/garbage", `Internal error occurred: failed calling webhook "garbage.example.com": failed to call webhook: couldn't get version/kind; json parse error: json: cannot unmarshal string into Go value of type struct { APIVersion string "json:\"apiVersion,omitempty\""; Kind string "json:\"kind,omitempty\"" }`},
		{"/500", `Internal error occurred: failed calling webhook "500.example.com": failed to call webhook: an error on the server ("boom") has prevented the request from succeeding`},
		{"/wronguid", `Internal error occurred: failed calling webhook "wronguid.example.com": received invalid webhook response: expected response.uid=`},
	} {
		name := strings.TrimPrefix(tc.path, "/")
		t.Run(name, func(t *testing.T) {
			obj := servertest.CM("cm-"+name, fmt.Sprintf(`,"labels":{"probe":%q}`, name))
			sel := fmt.Sprintf(`,"timeoutSeconds":1,"objectSelector":{"matchLabels":{"probe":%q}}`, name)
			webhookConfig(t, env, "ValidatingWebhookConfiguration", name, s.URL+tc.path, s.Certs.CABundle, sel+`,"failurePolicy":"Fail"`)
			r := a.JSON("POST", servertest.CMs, obj)
			if st := r.Status(); r.Code != 500 || st.Reason != metav1.StatusReasonInternalError || !strings.HasPrefix(st.Message, tc.want) {
				t.Errorf("Fail: got %d %q\nwant 500 %q", r.Code, st.Message, tc.want)
			}
			if r := a.JSON("GET", servertest.CMs+"/cm-"+name, ""); r.Code != 404 {
				t.Errorf("object stored despite the failure: %d", r.Code)
			}
			// The same webhook with failurePolicy Ignore: the write goes on.
			webhookConfig(t, env, "ValidatingWebhookConfiguration", name+"-ignore", s.URL+tc.path, s.Certs.CABundle, fmt.Sprintf(`,"timeoutSeconds":1,"objectSelector":{"matchLabels":{"probe":"%s-ignore"}},"failurePolicy":"Ignore"`, name))
			if r := a.JSON("POST", servertest.CMs, servertest.CM("cm-"+name+"-ignore", fmt.Sprintf(`,"labels":{"probe":"%s-ignore"}`, name))); r.Code != 201 {
				t.Errorf("Ignore: got %d %s, want 201", r.Code, r.Body)
			}
		})
	}
}

func TestWebhookPatchesOfIdentity(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	s := faultyWebhooks(t)
	for _, p := range []string{"patchname", "patchns", "patchuid", "badpatch"} {
		webhookConfig(t, env, "MutatingWebhookConfiguration", p, s.URL+"/"+p, s.Certs.CABundle, fmt.Sprintf(`,"objectSelector":{"matchLabels":{"probe":%q}}`, p))
	}
	// As kube-apiserver: a create may be renamed by a webhook, not moved
	// to another namespace; an update may change neither name nor uid.
	r := a.JSON("POST", servertest.CMs, servertest.CM("c-patchname", `,"labels":{"probe":"patchname"}`))
	if md, _ := r.Object()["metadata"].(map[string]any); r.Code != 201 || md["name"] != "renamed" {
		t.Errorf("create renamed by a webhook = %d %s", r.Code, r.Body)
	}
	servertest.WantStatus(t, a.JSON("POST", servertest.CMs, servertest.CM("c-patchns", `,"labels":{"probe":"patchns"}`)), 400, "the namespace of the provided object does not match the namespace sent on the request")
	servertest.WantStatus(t, a.JSON("POST", servertest.CMs, servertest.CM("c-bad", `,"labels":{"probe":"badpatch"}`)), 500, "Internal error occurred: replace operation does not apply: doc is missing path: /nothere/x: missing value")
	if r := a.JSON("POST", servertest.CMs, servertest.CM("c-patchuid", `,"labels":{"probe":"patchuid"}`)); r.Code != 201 || strings.Contains(string(r.Body), `"1234"`) {
		t.Errorf("create with a uid patched = %d %s, want the server's uid", r.Code, r.Body)
	}

	a.Must("POST", servertest.CMs, servertest.CM("u1", ""))
	servertest.WantStatus(t, a.JSON("PUT", servertest.CMs+"/u1", servertest.CM("u1", `,"labels":{"probe":"patchname"}`)), 422, `ConfigMap "renamed" is invalid: metadata.name: Invalid value: "renamed": field is immutable`)
	servertest.WantStatus(t, a.JSON("PUT", servertest.CMs+"/u1", servertest.CM("u1", `,"labels":{"probe":"patchns"}`)), 400, "the namespace of the provided object does not match the namespace sent on the request")
	servertest.WantStatus(t, a.JSON("PUT", servertest.CMs+"/u1", servertest.CM("u1", `,"labels":{"probe":"patchuid"}`)), 422, `ConfigMap "u1" is invalid: metadata.uid: Invalid value: "1234": field is immutable`)
	if md, _ := a.JSON("GET", servertest.CMs+"/u1", "").Object()["metadata"].(map[string]any); md["labels"] != nil {
		t.Errorf("refused updates were stored: %v", md)
	}
}

// TestWebhookConfigurationValidation: defaults and validation errors as
// kube-apiserver v1.37 answers them (its messages, copied).
func TestWebhookConfigurationValidation(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	const base = "/apis/admissionregistration.k8s.io/v1/"
	bad := `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration","metadata":{"name":"bad"},"webhooks":[{"name":"a.b.c","clientConfig":{"url":"https://127.0.0.1:1/x"},"rules":[{"operations":["CREATE","*"],"apiGroups":[""],"apiVersions":["v1"],"resources":["*","pods","*/*"]}],"timeoutSeconds":31,"matchConditions":[{"name":"c1","expression":"object.foo +"},{"name":"c1","expression":"1"}]},{"name":"a.b.c","clientConfig":{"url":"http://x"},"sideEffects":"Some","admissionReviewVersions":["v2"]},{"name":"nodots","clientConfig":{"service":{"namespace":"ns","name":"svc"}},"sideEffects":"None","admissionReviewVersions":["v1","v1"]}]}`
	want := "ValidatingWebhookConfiguration.admissionregistration.k8s.io \"bad\" is invalid: [webhooks[0].rules[0].operations: Invalid value: [\"CREATE\",\"*\"]: if '*' is present, must not specify other operations, webhooks[0].rules[0].resources: Invalid value: [\"*\",\"pods\",\"*/*\"]: if '*/*' is present, must not specify other resources, webhooks[0].rules[0].resources: Invalid value: [\"*\",\"pods\",\"*/*\"]: if '*' is present, must not specify other resources without subresources, webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun, webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds, webhooks[0].matchConditions[0].expression: Invalid value: \"object.foo +\": compilation failed: ERROR: <input>:1:13: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n | object.foo +\n | ............^, webhooks[0].matchConditions[1].expression: Invalid value: \"1\": must evaluate to bool but got int, webhooks[0].matchConditions[1].name: Duplicate value: \"c1\", webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1, webhooks[1].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\", webhooks[1].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path], webhooks[1].admissionReviewVersions: Invalid value: [\"v2\"]: must include at least one of v1, v1beta1, webhooks[1].name: Duplicate value: \"a.b.c\", webhooks[2].name: Invalid value: \"nodots\": should be a domain with at least three segments separated by dots, webhooks[2].admissionReviewVersions[1]: Invalid value: \"v1\": duplicate version]"
	servertest.WantStatus(t, a.JSON("POST", base+"validatingwebhookconfigurations", bad), 422, want)
	mutating := strings.Replace(strings.Replace(bad, "Validating", "Mutating", 1), "ValidatingWebhook", "MutatingWebhook", -1)
	servertest.WantStatus(t, a.JSON("POST", base+"mutatingwebhookconfigurations", mutating), 422, strings.Replace(want, "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", 1))

	r := a.Must("POST", base+"mutatingwebhookconfigurations", `{"metadata":{"name":"ok"},"webhooks":[{"name":"a.b.c","clientConfig":{"service":{"namespace":"ns","name":"svc"}},"sideEffects":"None","admissionReviewVersions":["v1"],"rules":[{"operations":["CREATE"],"apiGroups":[""],"apiVersions":["v1"],"resources":["pods"]}]}]}`)
	got := r.Object()
	md := got["metadata"].(map[string]any)
	if md["generation"] != float64(1) {
		t.Errorf("generation = %v", md["generation"])
	}
	hooks, _ := json.Marshal(got["webhooks"])
	const wantHooks = `[{"admissionReviewVersions":["v1"],"clientConfig":{"service":{"name":"svc","namespace":"ns","port":443}},"failurePolicy":"Fail","matchPolicy":"Equivalent","name":"a.b.c","namespaceSelector":{},"objectSelector":{},"reinvocationPolicy":"Never","rules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["pods"],"scope":"*"}],"sideEffects":"None","timeoutSeconds":10}]`
	if string(hooks) != wantHooks {
		t.Errorf("defaulted webhooks =\n%s\nwant\n%s", hooks, wantHooks)
	}
}

// TestWebhookReinvocation: a webhook with reinvocationPolicy IfNeeded is
// called once more when a later webhook changed the object; one with
// Never is not.
func TestWebhookReinvocation(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	var mu sync.Mutex
	calls := map[string]int{}
	handler := func(name, patch string) testenv.AdmissionFunc {
		return func(_ context.Context, r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			mu.Lock()
			calls[name]++
			mu.Unlock()
			if strings.Contains(string(r.Object.Raw), `"`+name+`":"done"`) {
				return nil
			}
			return servertest.JSONPatch(patch)
		}
	}
	ifNeeded := admissionregistrationv1.IfNeededReinvocationPolicy
	// Configurations run in name order: a-first, then b-second.
	env.Webhook(t, testenv.WebhookOptions{Name: "a-first", Rules: servertest.ConfigMapRules,
		Mutating: handler("first", `{"op":"add","path":"/data/first","value":"done"}`),
		Mutate:   func(h *admissionregistrationv1.MutatingWebhook) { h.ReinvocationPolicy = &ifNeeded }})
	env.Webhook(t, testenv.WebhookOptions{Name: "b-second", Rules: servertest.ConfigMapRules,
		Mutating: handler("second", `{"op":"add","path":"/data/second","value":"done"}`)})
	r := a.Must("POST", servertest.CMs, servertest.CM("x", ""))
	d, _ := r.Object()["data"].(map[string]any)
	mu.Lock()
	defer mu.Unlock()
	if d["first"] != "done" || d["second"] != "done" || calls["first"] != 2 || calls["second"] != 1 {
		t.Errorf("data %v, calls %v; want both patches, first called twice, second once", d, calls)
	}
}

// TestWebhookSelectorsAndConditions: namespaceSelector (a namespace's
// labels; a namespace's own for namespaces), objectSelector (old or new
// object) and matchConditions decide which requests a webhook gets.
func TestWebhookSelectorsAndConditions(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	deny := func(_ context.Context, r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: "caught " + r.Name}}
	}
	a.Must("POST", "/api/v1/namespaces", `{"metadata":{"name":"guarded","labels":{"guard":"on"}}}`)
	a.Must("POST", "/api/v1/namespaces", `{"metadata":{"name":"free"}}`)
	env.Webhook(t, testenv.WebhookOptions{Name: "ns", Validating: deny,
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{"CREATE"},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps", "namespaces"}},
		}},
		Validate: func(h *admissionregistrationv1.ValidatingWebhook) {
			h.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"guard": "on"}}
		}})
	servertest.WantStatus(t, a.JSON("POST", "/api/v1/namespaces/guarded/configmaps", servertest.CM("a", "")), 400, `admission webhook "ns.testenv.objwatch.io" denied the request: caught a`)
	a.Must("POST", "/api/v1/namespaces/free/configmaps", servertest.CM("a", ""))
	servertest.WantStatus(t, a.JSON("POST", "/api/v1/namespaces", `{"metadata":{"name":"other","labels":{"guard":"on"}}}`), 400, `admission webhook "ns.testenv.objwatch.io" denied the request: caught other`)
	a.Must("POST", "/api/v1/namespaces", `{"metadata":{"name":"other"}}`)

	env.Webhook(t, testenv.WebhookOptions{Name: "obj", Validating: deny, Rules: servertest.ConfigMapRules,
		Validate: func(h *admissionregistrationv1.ValidatingWebhook) {
			h.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"watched": "yes"}}
		}})
	a.Must("POST", servertest.CMs, servertest.CM("plain", ""))
	servertest.WantStatus(t, a.JSON("POST", servertest.CMs, servertest.CM("labelled", `,"labels":{"watched":"yes"}`)), 400, `admission webhook "obj.testenv.objwatch.io" denied the request: caught labelled`)
	// Removing the label is caught by the old object's.
	a.Must("POST", servertest.CMs+"?dryRun=All", servertest.CM("dry", ""))
	env.Webhook(t, testenv.WebhookOptions{Name: "cel", Validating: deny, Rules: servertest.ConfigMapRules,
		Validate: func(h *admissionregistrationv1.ValidatingWebhook) {
			h.MatchConditions = []admissionregistrationv1.MatchCondition{
				{Name: "big", Expression: `has(object.data) && size(object.data) > 1`},
				{Name: "not-admin", Expression: `request.userInfo.username != "nobody"`},
			}
		}})
	a.Must("POST", servertest.CMs, servertest.CM("small", ""))
	servertest.WantStatus(t, a.JSON("POST", servertest.CMs, `{"metadata":{"name":"big"},"data":{"a":"1","b":"2"}}`), 400, `admission webhook "cel.testenv.objwatch.io" denied the request: caught big`)
}

// TestWebhookOldObjectSelectorAndDryRun: an update that removes the
// selected label still matches (the old object has it); a dry run is
// sent with dryRun true and stores nothing.
func TestWebhookOldObjectSelectorAndDryRun(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	a.Must("POST", servertest.CMs, servertest.CM("w", `,"labels":{"watched":"yes"}`))
	var got servertest.Seen
	env.Webhook(t, testenv.WebhookOptions{Name: "obj", Rules: servertest.ConfigMapRules,
		Validating: func(_ context.Context, r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			got.Add(r)
			return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: "caught"}}
		},
		Validate: func(h *admissionregistrationv1.ValidatingWebhook) {
			h.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"watched": "yes"}}
			s := admissionregistrationv1.SideEffectClassNoneOnDryRun
			h.SideEffects = &s
		}})
	servertest.WantStatus(t, a.JSON("PUT", servertest.CMs+"/w", servertest.CM("w", "")), 400, `admission webhook "obj.testenv.objwatch.io" denied the request: caught`)
	servertest.WantStatus(t, a.JSON("POST", servertest.CMs+"?dryRun=All", servertest.CM("d", `,"labels":{"watched":"yes"}`)), 400, `admission webhook "obj.testenv.objwatch.io" denied the request: caught`)
	// (An update that started from the watch cache's copy and failed is
	// redone from etcd, admission included, as kube-apiserver's cacher
	// does: the update may have been reviewed twice.)
	reqs := got.All()
	if last := reqs[len(reqs)-1]; last.DryRun == nil || !*last.DryRun || last.Operation != admissionv1.Create {
		t.Fatalf("last review %+v, want a dry-run create", last)
	}
	if md, _ := a.JSON("GET", servertest.CMs+"/w", "").Object()["metadata"].(map[string]any); md["labels"] == nil {
		t.Errorf("denied update was stored")
	}
}

// TestWebhookSeesGarbageCollectorDeletes: the garbage collector's
// cascading deletes go through validating webhooks with its user, as in
// Kubernetes; a webhook that denies them keeps the dependent.
func TestWebhookSeesGarbageCollectorDeletes(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	var got servertest.Seen
	env.Webhook(t, testenv.WebhookOptions{Name: "gc", Validating: func(_ context.Context, r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		got.Add(r)
		return nil
	}, Rules: []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{"DELETE"},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}})
	owner := a.Must("POST", servertest.CMs, servertest.CM("owner", "")).Object()
	uid := owner["metadata"].(map[string]any)["uid"].(string)
	a.Must("POST", servertest.CMs, servertest.CM("dep", fmt.Sprintf(`,"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":%q}]`, uid)))
	a.Must("DELETE", servertest.CMs+"/owner", "")
	deadline := time.Now().Add(20 * time.Second)
	for {
		var gcUser string
		for _, r := range got.All() {
			if r.Name == "dep" {
				gcUser = r.UserInfo.Username
			}
		}
		if gcUser != "" {
			if gcUser != "system:serviceaccount:kube-system:generic-garbage-collector" {
				t.Errorf("the collector's delete came as %q", gcUser)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook never saw the collector's delete of dep")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkCreateWebhook is sequential ConfigMap creates over HTTPS with
// no webhook, and with one no-op validating webhook (an in-process HTTPS
// server allowing everything); p50 and p99 latencies are reported.
func BenchmarkCreateWebhook(b *testing.B) {
	for _, withHook := range []bool{false, true} {
		name := "none"
		if withHook {
			name = "validating-noop"
		}
		b.Run(name, func(b *testing.B) {
			env := testenv.Start(b)
			if withHook {
				env.Webhook(b, testenv.WebhookOptions{Rules: servertest.ConfigMapRules,
					Validating: func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse { return nil }})
			}
			hc := env.HTTPClient()
			defer hc.CloseIdleConnections()
			create := func(i int) {
				resp, err := hc.Post(env.Config.Host+servertest.CMs, "application/json", strings.NewReader(servertest.CM(fmt.Sprintf("b-%d", i), "")))
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 201 {
					b.Fatalf("create = %d", resp.StatusCode)
				}
			}
			for i := range 50 { // warm the connections and caches
				create(-1 - i)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				create(i)
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// TestWebhookAudit: a webhook's audit annotations and the mutation
// annotation join the request's record, whose diff carries the
// webhook's change (the diff is of the stored objects).
func TestWebhookAudit(t *testing.T) {
	env, path := servertest.StartAudited(t, "")
	a := servertest.NewAPI(t, env)
	env.Webhook(t, testenv.WebhookOptions{Rules: servertest.ConfigMapRules,
		Mutating: func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			r := servertest.JSONPatch(`{"op":"add","path":"/data/mutated","value":"yes"}`)
			r.AuditAnnotations = map[string]string{"decision": "patched"}
			return r
		}})
	a.Must("POST", servertest.CMs, servertest.CM("audited", ""))
	evs := servertest.Completed(servertest.ReadEvents(t, path), "create", "audited")
	if len(evs) != 1 {
		t.Fatalf("%d records of the create", len(evs))
	}
	ann := evs[0].Annotations
	if ann["testenv.testenv.objwatch.io/decision"] != "patched" ||
		ann["mutation.webhook.admission.k8s.io/round_0_index_0"] != `{"configuration":"testenv","webhook":"testenv.testenv.objwatch.io","mutated":true}` ||
		!strings.Contains(ann["objwatch.io/patch"], "mutated") {
		t.Errorf("annotations = %v", ann)
	}
}

// TestWebhookValidatingInParallel: validating webhooks are called at
// once, as kube-apiserver calls them: two that each take 600 ms answer
// a create in well under 1.2 s.
func TestWebhookValidatingInParallel(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	slow := func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		time.Sleep(600 * time.Millisecond)
		return nil
	}
	env.Webhook(t, testenv.WebhookOptions{Name: "one", Rules: servertest.ConfigMapRules, Validating: slow})
	env.Webhook(t, testenv.WebhookOptions{Name: "two", Rules: servertest.ConfigMapRules, Validating: slow})
	start := time.Now()
	a.Must("POST", servertest.CMs, servertest.CM("p", ""))
	if d := time.Since(start); d < 600*time.Millisecond || d > 1100*time.Millisecond {
		t.Errorf("create took %v with two 600 ms webhooks, want them called in parallel", d)
	}
}

// TestWebhookMatchConditionAuthorizer: a matchCondition's authorizer
// checks what the request's user may do, as the server decides it.
func TestWebhookMatchConditionAuthorizer(t *testing.T) {
	env := testenv.Start(t)
	admin := servertest.NewAPI(t, env)
	deny := func(_ context.Context, r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: "caught " + r.Name}}
	}
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", servertest.RoleEditor)
	admin.Must("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", servertest.BindEditor("alice"))
	alice := servertest.UserAPI(t, env, "alice")
	servertest.Eventually(t, "alice's binding", func() bool { return alice.JSON("GET", servertest.CMs, "").Code == 200 })
	env.Webhook(t, testenv.WebhookOptions{Name: "authz", Validating: deny, Rules: servertest.ConfigMapRules,
		Validate: func(h *admissionregistrationv1.ValidatingWebhook) {
			h.MatchConditions = []admissionregistrationv1.MatchCondition{
				{Name: "no-secrets", Expression: `!authorizer.group('').resource('secrets').namespace('default').check('list').allowed()`},
			}
		}})
	admin.Must("POST", servertest.CMs, servertest.CM("by-admin", ""))
	servertest.WantStatus(t, alice.JSON("POST", servertest.CMs, servertest.CM("by-alice", "")), 400, `admission webhook "authz.testenv.objwatch.io" denied the request: caught by-alice`)
}
