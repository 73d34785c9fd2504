package policy_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/objwatch/objwatch/bench"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// denial checks r is Kubernetes' denial of configmap name by policy with
// its binding: 422 Invalid (unless the validation's reason says
// otherwise) with the message kube-apiserver v1.37.2 sends.
func denial(t *testing.T, r servertest.Response, name, policy, msg string) {
	t.Helper()
	want := fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s-binding' denied request: %s", policy, policy, msg)
	s := r.Status()
	if r.Code != http.StatusUnprocessableEntity || s.Reason != metav1.StatusReasonInvalid ||
		s.Message != fmt.Sprintf("configmaps %q is forbidden: %s", name, want) ||
		s.Details == nil || len(s.Details.Causes) != 1 || s.Details.Causes[0].Message != want || s.Details.Kind != "configmaps" {
		t.Fatalf("denial of %s = %d %s, want 422 %q", name, r.Code, r.Body, want)
	}
}

// TestValidatingAdmissionPolicies: the CEL environment, selectors, match
// conditions, params, validation actions and failure policies, each
// against kube-apiserver's wording; a denied write stores nothing.
func TestValidatingAdmissionPolicies(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	t.Cleanup(a.C.CloseIdleConnections)

	t.Run("DenyWithMessageAndMessageExpression", func(t *testing.T) {
		a.Policy("deny", "deny", `
  validations:
  - expression: "!('bad' in object.data)"
    message: "no bad key"
  - expression: "!('worse' in object.data)"
    messageExpression: "'key worse in ' + object.metadata.name"
`, "  validationActions: [Deny]")
		lag := a.Until(servertest.CMs, servertest.Labelled("probe", "deny", `"bad":"1"`), http.StatusUnprocessableEntity)
		t.Logf("policy enforced %v after its binding was created", lag)
		denial(t, a.JSON("POST", servertest.CMs, servertest.Labelled("a", "deny", `"bad":"1"`)), "a", "deny", "no bad key")
		denial(t, a.JSON("POST", servertest.CMs, servertest.Labelled("b", "deny", `"worse":"1"`)), "b", "deny", "key worse in b")
		// Not selected (no label): allowed.
		servertest.MustCode(t, "unlabelled", a.JSON("POST", servertest.CMs, servertest.CM("c", "")), http.StatusCreated)
		// Nothing half-written: a denied update leaves the object as it was.
		ok := a.JSON("POST", servertest.CMs, servertest.Labelled("d", "deny", `"good":"1"`))
		servertest.MustCode(t, "good", ok, http.StatusCreated)
		denial(t, a.JSON("PUT", servertest.CMs+"/d", servertest.Labelled("d", "deny", `"bad":"1"`)), "d", "deny", "no bad key")
		got := a.JSON("GET", servertest.CMs+"/d", "")
		if servertest.RVOf(t, got) != servertest.RVOf(t, ok) || servertest.DataOf(got)["bad"] != nil {
			t.Fatalf("after a denied update: %s", got.Body)
		}
		servertest.MustCode(t, "denied create stored nothing", a.JSON("GET", servertest.CMs+"/a", ""), http.StatusNotFound)
		// Dry run: the same denial, and nothing stored when allowed.
		denial(t, a.JSON("POST", servertest.CMs+"?dryRun=All", servertest.Labelled("e", "deny", `"bad":"1"`)), "e", "deny", "no bad key")
		servertest.MustCode(t, "dry run allowed", a.JSON("POST", servertest.CMs+"?dryRun=All", servertest.Labelled("e", "deny", `"ok":"1"`)), http.StatusCreated)
		servertest.MustCode(t, "dry run stored nothing", a.JSON("GET", servertest.CMs+"/e", ""), http.StatusNotFound)
	})

	t.Run("NamespaceSelector", func(t *testing.T) {
		a.Must("POST", "/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"strict","labels":{"policy":"on"}}}`)
		a.Must("POST", "/api/v1/namespaces", servertest.Namespace("lax"))
		a.Policy("nssel", "nssel", `
  validations:
  - expression: "namespaceObject.metadata.name != 'strict'"
    messageExpression: "'not in ' + namespaceObject.metadata.name"
`, `  validationActions: [Deny]
  matchResources:
    namespaceSelector: {matchLabels: {policy: "on"}}`)
		strict := "/api/v1/namespaces/strict/configmaps"
		a.Until(strict, servertest.Labelled("probe", "nssel", ""), http.StatusUnprocessableEntity)
		denial(t, a.JSON("POST", strict, servertest.Labelled("x", "nssel", "")), "x", "nssel", "not in strict")
		servertest.MustCode(t, "other namespace", a.JSON("POST", "/api/v1/namespaces/lax/configmaps", servertest.Labelled("x", "nssel", "")), http.StatusCreated)
	})

	t.Run("MatchConditions", func(t *testing.T) {
		a.Policy("mc", "mc", `
  matchConditions:
  - name: prefixed
    expression: "object.metadata.name.startsWith('mc-')"
  validations:
  - expression: "false"
    message: "mc- names are refused"
`, "  validationActions: [Deny]")
		a.Until(servertest.CMs, servertest.Labelled("mc-probe", "mc", ""), http.StatusUnprocessableEntity)
		denial(t, a.JSON("POST", servertest.CMs, servertest.Labelled("mc-x", "mc", "")), "mc-x", "mc", "mc- names are refused")
		servertest.MustCode(t, "unmatched", a.JSON("POST", servertest.CMs, servertest.Labelled("other", "mc", "")), http.StatusCreated)
	})

	t.Run("Params", func(t *testing.T) {
		a.Policy("params", "params", `
  paramKind: {apiVersion: v1, kind: ConfigMap}
  validations:
  - expression: "size(object.data) <= int(params.data.max)"
    messageExpression: "'at most ' + params.data.max + ' keys'"
`, `  validationActions: [Deny]
  paramRef: {name: limits, namespace: default, parameterNotFoundAction: Deny}`)
		probe := servertest.Labelled("probe", "params", `"a":"1","b":"2"`)
		a.Until(servertest.CMs, probe, http.StatusUnprocessableEntity)
		denial(t, a.JSON("POST", servertest.CMs, servertest.Labelled("p", "params", "")), "p", "params",
			"failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction")
		limits := a.JSON("POST", servertest.CMs, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"limits"},"data":{"max":"1"}}`)
		servertest.MustCode(t, "limits", limits, http.StatusCreated)
		denial(t, a.JSON("POST", servertest.CMs, servertest.Labelled("p", "params", `"a":"1","b":"2"`)), "p", "params", "at most 1 keys")
		servertest.MustCode(t, "within limits", a.JSON("POST", servertest.CMs, servertest.Labelled("p1", "params", `"a":"1"`)), http.StatusCreated)
		// A changed param is read from the watch cache: soon in effect.
		a.Must("PUT", servertest.CMs+"/limits", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"limits"},"data":{"max":"2"}}`)
		a.Until(servertest.CMs, probe, http.StatusCreated)
	})

	t.Run("FailurePolicy", func(t *testing.T) {
		for _, fp := range []string{"Fail", "Ignore"} {
			name := "fp-" + strings.ToLower(fp)
			a.Policy(name, name, `
  failurePolicy: `+fp+`
  validations:
  - expression: "object.data.missing == 'x'"
`, "  validationActions: [Deny]")
			if fp == "Fail" {
				a.Until(servertest.CMs, servertest.Labelled("probe", name, ""), http.StatusUnprocessableEntity)
				denial(t, a.JSON("POST", servertest.CMs, servertest.Labelled("x", name, `"a":"1"`)), "x", name,
					"expression 'object.data.missing == 'x'' resulted in error: no such key: missing")
				continue
			}
			// Ignore: the runtime error lets the write through. Wait
			// until a second policy on the same label shows the
			// bindings are in.
			a.Policy(name+"-probe", name, `
  validations:
  - expression: "object.metadata.name != 'probe'"
`, "  validationActions: [Deny]")
			a.Until(servertest.CMs, servertest.Labelled("probe", name, ""), http.StatusUnprocessableEntity)
			servertest.MustCode(t, "ignored error", a.JSON("POST", servertest.CMs, servertest.Labelled("x", name, `"a":"1"`)), http.StatusCreated)
		}
	})

	t.Run("Warn", func(t *testing.T) {
		a.Policy("warn", "warn", `
  validations:
  - expression: "object.metadata.name == 'probe'"
    message: "just a warning"
`, "  validationActions: [Warn]")
		want := `299 - "Validation failed for ValidatingAdmissionPolicy 'warn' with binding 'warn-binding': just a warning"`
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := a.JSON("POST", servertest.CMs, servertest.Labelled(fmt.Sprintf("w%d", time.Now().UnixNano()), "warn", ""))
			servertest.MustCode(t, "warned create", r, http.StatusCreated)
			if w := r.Header.Values("Warning"); len(w) == 1 && w[0] == want {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("warnings %q, want %q", w, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})

	t.Run("Authorizer", func(t *testing.T) {
		a.Policy("authz", "authz", `
  validations:
  - expression: "authorizer.group('').resource('secrets').namespace(object.metadata.namespace).check('list').allowed()"
    messageExpression: "request.userInfo.username + ' may not list secrets'"
  - expression: "object.metadata.name != 'probe'"
`, "  validationActions: [Deny]")
		a.Until(servertest.CMs, servertest.Labelled("probe", "authz", ""), http.StatusUnprocessableEntity)
		servertest.MustCode(t, "admin may", a.JSON("POST", servertest.CMs, servertest.Labelled("admin", "authz", "")), http.StatusCreated)
		a.Must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
			`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"cm-writer"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["create"]}]}`)
		a.Must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
			`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"cm-writer"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"cm-writer"},"subjects":[{"kind":"User","name":"carol"}]}`)
		carol := servertest.UserAPI(t, env, "carol")
		var r servertest.Response
		servertest.Eventually(t, "carol's role", func() bool {
			r = carol.JSON("POST", servertest.CMs, servertest.Labelled("carol", "authz", ""))
			return r.Code != http.StatusForbidden || strings.Contains(r.Status().Message, "ValidatingAdmissionPolicy")
		})
		if s := r.Status(); r.Code != http.StatusUnprocessableEntity || !strings.HasSuffix(s.Message, "denied request: carol may not list secrets") {
			t.Fatalf("carol's create = %d %s", r.Code, r.Body)
		}
	})

	t.Run("PolicyChangeTakesEffect", func(t *testing.T) {
		a.Policy("change", "change", `
  validations:
  - expression: "object.metadata.name != 'one'"
`, "  validationActions: [Deny]")
		a.Until(servertest.CMs, servertest.Labelled("one", "change", ""), http.StatusUnprocessableEntity)
		// A patch, not a read-modify-write: the server's status controller
		// writes the policy's status (typeChecking) meanwhile.
		servertest.MustCode(t, "update policy", a.Do("PATCH", servertest.VAPs+"/change", "application/merge-patch+json",
			[]byte(`{"spec":{"validations":[{"expression":"object.metadata.name != 'two'"}]}}`)), http.StatusOK)
		lag := a.Until(servertest.CMs, servertest.Labelled("one", "change", ""), http.StatusCreated)
		a.Until(servertest.CMs, servertest.Labelled("two", "change", ""), http.StatusUnprocessableEntity)
		t.Logf("policy update enforced %v after it was written", lag)
		if g := a.JSON("GET", servertest.VAPs+"/change", "").Object()["metadata"].(map[string]any)["generation"]; g != float64(2) {
			t.Fatalf("generation after a spec change = %v, want 2", g)
		}
		servertest.MustCode(t, "delete binding", a.JSON("DELETE", servertest.VAPBs+"/change-binding", ""), http.StatusOK)
		a.Until(servertest.CMs, servertest.Labelled("two", "change", ""), http.StatusCreated)
	})
}

// TestAdmissionPolicyValidation: a policy whose CEL does not compile is
// refused on create with kube-apiserver's message, and nothing is stored.
func TestAdmissionPolicyValidation(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	r := a.PostYAML(servertest.VAPs, `
metadata: {name: bad}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}
  validations:
  - expression: "object.data.foo =="
  - expression: "1 + 'a'"
    messageExpression: "'x' + 1"
`)
	// kube-apiserver v1.37.2's answer to the same policy.
	const want = `ValidatingAdmissionPolicy.admissionregistration.k8s.io "bad" is invalid: [` +
		`spec.validations[0].expression: Invalid value: "object.data.foo ==": compilation failed: ERROR: <input>:1:19: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}
 | object.data.foo ==
 | ..................^, ` +
		`spec.validations[1].expression: Invalid value: "1 + 'a'": compilation failed: ERROR: <input>:1:3: found no matching overload for '_+_' applied to '(int, string)'
 | 1 + 'a'
 | ..^, ` +
		`spec.validations[1].messageExpression: Invalid value: "'x' + 1": compilation failed: ERROR: <input>:1:5: found no matching overload for '_+_' applied to '(string, int)'
 | 'x' + 1
 | ....^]`
	if s := r.Status(); r.Code != http.StatusUnprocessableEntity || s.Message != want {
		t.Fatalf("create = %d %s\nwant message %s", r.Code, s.Message, want)
	}
	servertest.MustCode(t, "nothing stored", a.JSON("GET", servertest.VAPs+"/bad", ""), http.StatusNotFound)
	// Defaults, as Kubernetes fills them in.
	r = a.PostYAML(servertest.VAPs, `
metadata: {name: good}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}
  validations:
  - expression: "true"
`)
	servertest.MustCode(t, "good policy", r, http.StatusCreated)
	spec := r.Object()["spec"].(map[string]any)
	mc := spec["matchConstraints"].(map[string]any)
	if spec["failurePolicy"] != "Fail" || mc["matchPolicy"] != "Equivalent" || mc["namespaceSelector"] == nil ||
		mc["resourceRules"].([]any)[0].(map[string]any)["scope"] != "*" || r.Object()["metadata"].(map[string]any)["generation"] != float64(1) {
		t.Fatalf("defaults: %s", r.Body)
	}
	r = a.PostYAML(servertest.VAPBs, `
metadata: {name: b}
spec:
  policyName: good
  validationActions: [Deny, Warn]
`)
	if s := r.Status(); r.Code != http.StatusUnprocessableEntity || !strings.Contains(s.Message, "must not contain both Deny and Warn") {
		t.Fatalf("binding with Deny and Warn = %d %s", r.Code, r.Body)
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		f := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(f, []byte("apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicy\n"+`
metadata: {name: bad}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{metadata: Object.metadata{labels: 1}"}
`), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "create", "-f", f).CombinedOutput()
		// kubectl's output for kube-apiserver v1.37.2's answer.
		const want = `The MutatingAdmissionPolicy "bad" is invalid: spec.mutations[0].applyConfiguration.expression: Invalid value: "Object{metadata: Object.metadata{labels: 1}": compilation failed: ERROR: <input>:1:44: Syntax error: mismatched input '<EOF>' expecting {'}', ','}
 | Object{metadata: Object.metadata{labels: 1}
 | ...........................................^`
		if err == nil || strings.TrimSpace(string(out)) != want {
			t.Fatalf("kubectl create of a bad mutating policy: %v\n%s", err, out)
		}
	}
}

// TestMutatingAdmissionPolicies: a label set through ApplyConfiguration
// and another through JSONPatch, before the object is validated; dry run
// answers with the mutated object and stores nothing.
func TestMutatingAdmissionPolicies(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	for _, m := range []struct{ name, mutation string }{
		{"apply", `
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{labels: {"applied": "by-" + request.userInfo.username}}}`},
		{"patch", `
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: "add", path: "/metadata/labels/patched", value: string(size(object.data))}]`},
	} {
		servertest.MustCode(t, "create "+m.name, a.PostYAML(servertest.MAPs, fmt.Sprintf(`
metadata: {name: %s}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}
    objectSelector: {matchLabels: {mutate: "yes"}}
  reinvocationPolicy: Never
  mutations:%s
`, m.name, m.mutation)), http.StatusCreated)
		servertest.MustCode(t, "bind "+m.name, a.PostYAML(servertest.MAPBs, fmt.Sprintf("metadata: {name: %s}\nspec: {policyName: %s}\n", m.name, m.name)), http.StatusCreated)
	}
	a.DryRunUntil(servertest.CMs, servertest.Labelled("m", "mutate", `"a":"1","b":"2"`), "mutations applied", func(l map[string]any) bool {
		return l["applied"] == "by-admin" && l["patched"] == "2"
	})
	servertest.MustCode(t, "dry run stored nothing", a.JSON("GET", servertest.CMs+"/m", ""), http.StatusNotFound)
	r := a.JSON("POST", servertest.CMs, servertest.Labelled("m", "mutate", `"a":"1"`))
	servertest.MustCode(t, "create", r, http.StatusCreated)
	got := servertest.LabelsOf(a.JSON("GET", servertest.CMs+"/m", ""))
	if got["applied"] != "by-admin" || got["patched"] != "1" || got["mutate"] != "yes" {
		t.Fatalf("stored labels %v", got)
	}
	// A mutation whose result fails the object's validation is refused
	// with the validation's error: mutation runs before validation.
	servertest.MustCode(t, "bad mutation", a.PostYAML(servertest.MAPs, `
metadata: {name: badname}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}
    objectSelector: {matchLabels: {badlabel: "yes"}}
  reinvocationPolicy: Never
  mutations:
  - patchType: JSONPatch
    jsonPatch: {expression: '[JSONPatch{op: "add", path: "/metadata/labels/bad~1~1key", value: "x"}]'}
`), http.StatusCreated)
	servertest.MustCode(t, "bind badname", a.PostYAML(servertest.MAPBs, "metadata: {name: badname}\nspec: {policyName: badname}\n"), http.StatusCreated)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := a.JSON("POST", servertest.CMs, servertest.Labelled("bl", "badlabel", ""))
		if r.Code == http.StatusUnprocessableEntity && strings.Contains(r.Status().Message, "metadata.labels") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create with an invalid mutation = %d %s", r.Code, r.Body)
		}
		if r.Code == http.StatusCreated {
			a.JSON("DELETE", servertest.CMs+"/bl", "")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAdmissionPolicyAudit: Audit actions and auditAnnotations are
// annotations of the request's audit record.
func TestAdmissionPolicyAudit(t *testing.T) {
	env, path := servertest.StartAudited(t, "")
	a := servertest.NewAPI(t, env)
	a.Policy("audited", "audited", `
  validations:
  - expression: "object.metadata.name == 'probe'"
    message: "recorded"
  auditAnnotations:
  - key: size
    valueExpression: "string(size(object.data))"
`, "  validationActions: [Audit]")
	// Probe with dry runs until the policy is in (an audited dry run has
	// the annotation too).
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		name := fmt.Sprintf("probe%d", i)
		servertest.MustCode(t, "audited create", a.JSON("POST", servertest.CMs, servertest.Labelled(name, "audited", `"a":"1"`)), http.StatusCreated)
		var found map[string]string
		for _, ev := range servertest.Completed(servertest.ReadEvents(t, path), "create", name) {
			found = ev.Annotations
		}
		if found["audited/size"] == "1" {
			want := `[{"message":"recorded","policy":"audited","binding":"audited-binding","expressionIndex":0,"validationActions":["Audit"]}]`
			if got := found["validation.policy.admission.k8s.io/validation_failure"]; got != want {
				t.Fatalf("validation failure annotation %q, want %q", got, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no admission annotations within 10 s: %v", found)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAdmissionPolicySeesServerWrites: the garbage collector's deletes go
// through admission as in Kubernetes, as its service account: a policy
// protecting labelled ConfigMaps from it keeps a dependent whose owner is
// gone, while other dependents are collected.
func TestAdmissionPolicySeesServerWrites(t *testing.T) {
	g := servertest.StartGC(t)
	servertest.MustCode(t, "policy", g.PostYAML(servertest.VAPs, `
metadata: {name: keep}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["DELETE"], resources: ["configmaps"]}
  validations:
  - expression: "!has(oldObject.metadata.labels) || !('protected' in oldObject.metadata.labels) || request.userInfo.username != 'system:serviceaccount:kube-system:generic-garbage-collector'"
    messageExpression: "request.userInfo.username + ' may not delete protected configmaps'"
  - expression: "oldObject.metadata.name != 'probe'"
`), http.StatusCreated)
	servertest.MustCode(t, "binding", g.PostYAML(servertest.VAPBs, "metadata: {name: keep-binding}\nspec: {policyName: keep, validationActions: [Deny]}\n"), http.StatusCreated)
	// The binding is in once a GC delete of a protected object is refused;
	// admin's deletes are not.
	owner := g.CM("owner", nil)
	ref := servertest.OwnerRef(t, owner, false)
	servertest.MustCode(t, "protected", g.JSON("POST", servertest.CMs, fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kept","labels":{"protected":"yes"},"ownerReferences":[%s]}}`, ref)), http.StatusCreated)
	g.CM("collected", nil, ref)
	g.CM("probe", nil)
	g.Eventually("policy in effect", func() (bool, string) {
		r := g.JSON("DELETE", servertest.CMs+"/probe?dryRun=All", "")
		return r.Code == http.StatusUnprocessableEntity, fmt.Sprintf("%d %s", r.Code, servertest.Truncate(r.Body))
	})
	servertest.MustCode(t, "delete owner", g.JSON("DELETE", servertest.CMs+"/owner", ""), http.StatusOK)
	g.Gone(servertest.CMs + "/collected")
	time.Sleep(500 * time.Millisecond) // the collector retries; the policy keeps refusing
	servertest.MustCode(t, "protected dependent kept", g.JSON("GET", servertest.CMs+"/kept", ""), http.StatusOK)
	servertest.MustCode(t, "admin may delete it", g.JSON("DELETE", servertest.CMs+"/kept", ""), http.StatusOK)
}

// BenchmarkCreateWithPolicy measures sequential ConfigMap creates with no
// admission policy and with a ValidatingAdmissionPolicy of three CEL
// expressions bound to the namespace written to; it reports each create's
// p50 and p99 latency. With $OBJWATCH_BENCH_KUBECONFIG it measures that
// server (kube-apiserver) instead of an in-process objwatch.
func BenchmarkCreateWithPolicy(b *testing.B) {
	path, name := os.Getenv("OBJWATCH_BENCH_KUBECONFIG"), "external"
	if path == "" {
		path, name = testenv.Start(b).Kubeconfig, "objwatch"
	}
	tg, err := bench.LoadTarget(name, path)
	if err != nil {
		b.Fatal(err)
	}
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	post := func(path string, doc string) (int, string) {
		body, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			b.Fatal(err)
		}
		resp, err := tg.Client.Post(tg.Host+path, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	must := func(path, doc string) {
		if code, out := post(path, doc); code != http.StatusCreated {
			b.Fatalf("POST %s = %d %s", path, code, out)
		}
	}
	for _, withPolicy := range []bool{false, true} {
		label := "none"
		if withPolicy {
			label = "vap3"
		}
		calls := 0
		b.Run("policy="+label, func(b *testing.B) {
			calls++ // the benchmark function runs more than once
			run := fmt.Sprintf("%s-%d", run, calls)
			ns := "bench-" + label + "-" + run
			must("/api/v1/namespaces", fmt.Sprintf("metadata: {name: %s, labels: {bench-policy: %s}}", ns, label))
			cmPath := "/api/v1/namespaces/" + ns + "/configmaps"
			if withPolicy {
				must(servertest.VAPs, fmt.Sprintf(`
metadata: {name: bench-%s}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["configmaps"]}
  validations:
  - expression: "object.metadata.name.size() < 64"
  - expression: "!has(object.data) || object.data.size() < 100"
  - expression: "!has(object.metadata.labels) || !('forbidden' in object.metadata.labels)"
`, run))
				must(servertest.VAPBs, fmt.Sprintf(`
metadata: {name: bench-%s}
spec:
  policyName: bench-%s
  validationActions: [Deny]
  matchResources:
    namespaceSelector: {matchLabels: {bench-policy: vap3}}
`, run, run))
				// In effect once a forbidden label is refused.
				deadline := time.Now().Add(30 * time.Second)
				for {
					code, _ := post(cmPath+"?dryRun=All", "metadata: {name: probe, labels: {forbidden: x}}")
					if code == http.StatusUnprocessableEntity {
						break
					}
					if time.Now().After(deadline) {
						b.Fatalf("policy not in effect: %d", code)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				must(cmPath, fmt.Sprintf("metadata: {name: cm-%d, labels: {app: bench}}\ndata: {a: b, c: d}", i))
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
