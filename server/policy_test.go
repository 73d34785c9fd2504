package server_test

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
	"github.com/objwatch/objwatch/testenv"
)

const (
	admissionAPI = "/apis/admissionregistration.k8s.io/v1/"
	vaps         = admissionAPI + "validatingadmissionpolicies"
	vapbs        = admissionAPI + "validatingadmissionpolicybindings"
	maps         = admissionAPI + "mutatingadmissionpolicies"
	mapbs        = admissionAPI + "mutatingadmissionpolicybindings"
)

// postYAML creates the object written in YAML at path, as admin.
func (a *api) postYAML(path, doc string) response {
	a.t.Helper()
	b, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		a.t.Fatal(err)
	}
	return a.do("POST", path, "application/json", b)
}

// policy creates a ValidatingAdmissionPolicy on configmaps (CREATE and
// UPDATE, unless ops says otherwise) whose objects carry label=yes, with
// the given extra spec lines, and its binding.
func (a *api) policy(name, label, spec, binding string) {
	a.t.Helper()
	mustCode(a.t, "create policy "+name, a.postYAML(vaps, fmt.Sprintf(`
metadata: {name: %s}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["configmaps"]}
    objectSelector: {matchLabels: {%s: "yes"}}
%s`, name, label, spec)), http.StatusCreated)
	mustCode(a.t, "create binding "+name, a.postYAML(vapbs, fmt.Sprintf(`
metadata: {name: %s-binding}
spec:
  policyName: %s
%s`, name, name, binding)), http.StatusCreated)
}

// labelled is a ConfigMap named name with label=yes and data.
func labelled(name, label, data string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"labels":{%q:"yes"}},"data":{%s}}`, name, label, data)
}

// until retries a dry-run create of obj until its status code is code:
// policies reach enforcement through a watch. It returns how long that took.
func (a *api) until(path, obj string, code int) time.Duration {
	a.t.Helper()
	start := time.Now()
	for {
		r := a.json("POST", path+"?dryRun=All", obj)
		if r.code == code {
			return time.Since(start)
		}
		if time.Since(start) > 10*time.Second {
			a.t.Fatalf("dry-run create = %d %s, want %d within 10 s", r.code, truncate(r.body), code)
		}
		time.Sleep(time.Millisecond)
	}
}

// denial checks r is Kubernetes' denial of configmap name by policy with
// its binding: 422 Invalid (unless the validation's reason says
// otherwise) with the message kube-apiserver v1.37.2 sends.
func denial(t *testing.T, r response, name, policy, msg string) {
	t.Helper()
	want := fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s-binding' denied request: %s", policy, policy, msg)
	s := r.status()
	if r.code != http.StatusUnprocessableEntity || s.Reason != metav1.StatusReasonInvalid ||
		s.Message != fmt.Sprintf("configmaps %q is forbidden: %s", name, want) ||
		s.Details == nil || len(s.Details.Causes) != 1 || s.Details.Causes[0].Message != want || s.Details.Kind != "configmaps" {
		t.Fatalf("denial of %s = %d %s, want 422 %q", name, r.code, r.body, want)
	}
}

// TestValidatingAdmissionPolicies: the CEL environment, selectors, match
// conditions, params, validation actions and failure policies, each
// against kube-apiserver's wording; a denied write stores nothing.
func TestValidatingAdmissionPolicies(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	t.Cleanup(a.c.CloseIdleConnections)

	t.Run("DenyWithMessageAndMessageExpression", func(t *testing.T) {
		a.policy("deny", "deny", `
  validations:
  - expression: "!('bad' in object.data)"
    message: "no bad key"
  - expression: "!('worse' in object.data)"
    messageExpression: "'key worse in ' + object.metadata.name"
`, "  validationActions: [Deny]")
		lag := a.until(cms, labelled("probe", "deny", `"bad":"1"`), http.StatusUnprocessableEntity)
		t.Logf("policy enforced %v after its binding was created", lag)
		denial(t, a.json("POST", cms, labelled("a", "deny", `"bad":"1"`)), "a", "deny", "no bad key")
		denial(t, a.json("POST", cms, labelled("b", "deny", `"worse":"1"`)), "b", "deny", "key worse in b")
		// Not selected (no label): allowed.
		mustCode(t, "unlabelled", a.json("POST", cms, cm("c", "")), http.StatusCreated)
		// Nothing half-written: a denied update leaves the object as it was.
		ok := a.json("POST", cms, labelled("d", "deny", `"good":"1"`))
		mustCode(t, "good", ok, http.StatusCreated)
		denial(t, a.json("PUT", cms+"/d", labelled("d", "deny", `"bad":"1"`)), "d", "deny", "no bad key")
		got := a.json("GET", cms+"/d", "")
		if rvOf(t, got) != rvOf(t, ok) || dataOf(got)["bad"] != nil {
			t.Fatalf("after a denied update: %s", got.body)
		}
		mustCode(t, "denied create stored nothing", a.json("GET", cms+"/a", ""), http.StatusNotFound)
		// Dry run: the same denial, and nothing stored when allowed.
		denial(t, a.json("POST", cms+"?dryRun=All", labelled("e", "deny", `"bad":"1"`)), "e", "deny", "no bad key")
		mustCode(t, "dry run allowed", a.json("POST", cms+"?dryRun=All", labelled("e", "deny", `"ok":"1"`)), http.StatusCreated)
		mustCode(t, "dry run stored nothing", a.json("GET", cms+"/e", ""), http.StatusNotFound)
	})

	t.Run("NamespaceSelector", func(t *testing.T) {
		a.must("POST", "/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"strict","labels":{"policy":"on"}}}`)
		a.must("POST", "/api/v1/namespaces", namespace("lax"))
		a.policy("nssel", "nssel", `
  validations:
  - expression: "namespaceObject.metadata.name != 'strict'"
    messageExpression: "'not in ' + namespaceObject.metadata.name"
`, `  validationActions: [Deny]
  matchResources:
    namespaceSelector: {matchLabels: {policy: "on"}}`)
		strict := "/api/v1/namespaces/strict/configmaps"
		a.until(strict, labelled("probe", "nssel", ""), http.StatusUnprocessableEntity)
		denial(t, a.json("POST", strict, labelled("x", "nssel", "")), "x", "nssel", "not in strict")
		mustCode(t, "other namespace", a.json("POST", "/api/v1/namespaces/lax/configmaps", labelled("x", "nssel", "")), http.StatusCreated)
	})

	t.Run("MatchConditions", func(t *testing.T) {
		a.policy("mc", "mc", `
  matchConditions:
  - name: prefixed
    expression: "object.metadata.name.startsWith('mc-')"
  validations:
  - expression: "false"
    message: "mc- names are refused"
`, "  validationActions: [Deny]")
		a.until(cms, labelled("mc-probe", "mc", ""), http.StatusUnprocessableEntity)
		denial(t, a.json("POST", cms, labelled("mc-x", "mc", "")), "mc-x", "mc", "mc- names are refused")
		mustCode(t, "unmatched", a.json("POST", cms, labelled("other", "mc", "")), http.StatusCreated)
	})

	t.Run("Params", func(t *testing.T) {
		a.policy("params", "params", `
  paramKind: {apiVersion: v1, kind: ConfigMap}
  validations:
  - expression: "size(object.data) <= int(params.data.max)"
    messageExpression: "'at most ' + params.data.max + ' keys'"
`, `  validationActions: [Deny]
  paramRef: {name: limits, namespace: default, parameterNotFoundAction: Deny}`)
		probe := labelled("probe", "params", `"a":"1","b":"2"`)
		a.until(cms, probe, http.StatusUnprocessableEntity)
		denial(t, a.json("POST", cms, labelled("p", "params", "")), "p", "params",
			"failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction")
		limits := a.json("POST", cms, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"limits"},"data":{"max":"1"}}`)
		mustCode(t, "limits", limits, http.StatusCreated)
		denial(t, a.json("POST", cms, labelled("p", "params", `"a":"1","b":"2"`)), "p", "params", "at most 1 keys")
		mustCode(t, "within limits", a.json("POST", cms, labelled("p1", "params", `"a":"1"`)), http.StatusCreated)
		// A changed param is read from the watch cache: soon in effect.
		a.must("PUT", cms+"/limits", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"limits"},"data":{"max":"2"}}`)
		a.until(cms, probe, http.StatusCreated)
	})

	t.Run("FailurePolicy", func(t *testing.T) {
		for _, fp := range []string{"Fail", "Ignore"} {
			name := "fp-" + strings.ToLower(fp)
			a.policy(name, name, `
  failurePolicy: `+fp+`
  validations:
  - expression: "object.data.missing == 'x'"
`, "  validationActions: [Deny]")
			if fp == "Fail" {
				a.until(cms, labelled("probe", name, ""), http.StatusUnprocessableEntity)
				denial(t, a.json("POST", cms, labelled("x", name, `"a":"1"`)), "x", name,
					"expression 'object.data.missing == 'x'' resulted in error: no such key: missing")
				continue
			}
			// Ignore: the runtime error lets the write through. Wait
			// until a second policy on the same label shows the
			// bindings are in.
			a.policy(name+"-probe", name, `
  validations:
  - expression: "object.metadata.name != 'probe'"
`, "  validationActions: [Deny]")
			a.until(cms, labelled("probe", name, ""), http.StatusUnprocessableEntity)
			mustCode(t, "ignored error", a.json("POST", cms, labelled("x", name, `"a":"1"`)), http.StatusCreated)
		}
	})

	t.Run("Warn", func(t *testing.T) {
		a.policy("warn", "warn", `
  validations:
  - expression: "object.metadata.name == 'probe'"
    message: "just a warning"
`, "  validationActions: [Warn]")
		want := `299 - "Validation failed for ValidatingAdmissionPolicy 'warn' with binding 'warn-binding': just a warning"`
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := a.json("POST", cms, labelled(fmt.Sprintf("w%d", time.Now().UnixNano()), "warn", ""))
			mustCode(t, "warned create", r, http.StatusCreated)
			if w := r.header.Values("Warning"); len(w) == 1 && w[0] == want {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("warnings %q, want %q", w, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})

	t.Run("Authorizer", func(t *testing.T) {
		a.policy("authz", "authz", `
  validations:
  - expression: "authorizer.group('').resource('secrets').namespace(object.metadata.namespace).check('list').allowed()"
    messageExpression: "request.userInfo.username + ' may not list secrets'"
  - expression: "object.metadata.name != 'probe'"
`, "  validationActions: [Deny]")
		a.until(cms, labelled("probe", "authz", ""), http.StatusUnprocessableEntity)
		mustCode(t, "admin may", a.json("POST", cms, labelled("admin", "authz", "")), http.StatusCreated)
		a.must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
			`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"cm-writer"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["create"]}]}`)
		a.must("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
			`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"cm-writer"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"cm-writer"},"subjects":[{"kind":"User","name":"carol"}]}`)
		carol := userAPI(t, env, "carol")
		var r response
		eventually(t, "carol's role", func() bool {
			r = carol.json("POST", cms, labelled("carol", "authz", ""))
			return r.code != http.StatusForbidden || strings.Contains(r.status().Message, "ValidatingAdmissionPolicy")
		})
		if s := r.status(); r.code != http.StatusUnprocessableEntity || !strings.HasSuffix(s.Message, "denied request: carol may not list secrets") {
			t.Fatalf("carol's create = %d %s", r.code, r.body)
		}
	})

	t.Run("PolicyChangeTakesEffect", func(t *testing.T) {
		a.policy("change", "change", `
  validations:
  - expression: "object.metadata.name != 'one'"
`, "  validationActions: [Deny]")
		a.until(cms, labelled("one", "change", ""), http.StatusUnprocessableEntity)
		// A patch, not a read-modify-write: the server's status controller
		// writes the policy's status (typeChecking) meanwhile.
		mustCode(t, "update policy", a.do("PATCH", vaps+"/change", "application/merge-patch+json",
			[]byte(`{"spec":{"validations":[{"expression":"object.metadata.name != 'two'"}]}}`)), http.StatusOK)
		lag := a.until(cms, labelled("one", "change", ""), http.StatusCreated)
		a.until(cms, labelled("two", "change", ""), http.StatusUnprocessableEntity)
		t.Logf("policy update enforced %v after it was written", lag)
		if g := a.json("GET", vaps+"/change", "").object()["metadata"].(map[string]any)["generation"]; g != float64(2) {
			t.Fatalf("generation after a spec change = %v, want 2", g)
		}
		mustCode(t, "delete binding", a.json("DELETE", vapbs+"/change-binding", ""), http.StatusOK)
		a.until(cms, labelled("two", "change", ""), http.StatusCreated)
	})
}

// TestAdmissionPolicyValidation: a policy whose CEL does not compile is
// refused on create with kube-apiserver's message, and nothing is stored.
func TestAdmissionPolicyValidation(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	r := a.postYAML(vaps, `
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
	if s := r.status(); r.code != http.StatusUnprocessableEntity || s.Message != want {
		t.Fatalf("create = %d %s\nwant message %s", r.code, s.Message, want)
	}
	mustCode(t, "nothing stored", a.json("GET", vaps+"/bad", ""), http.StatusNotFound)
	// Defaults, as Kubernetes fills them in.
	r = a.postYAML(vaps, `
metadata: {name: good}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}
  validations:
  - expression: "true"
`)
	mustCode(t, "good policy", r, http.StatusCreated)
	spec := r.object()["spec"].(map[string]any)
	mc := spec["matchConstraints"].(map[string]any)
	if spec["failurePolicy"] != "Fail" || mc["matchPolicy"] != "Equivalent" || mc["namespaceSelector"] == nil ||
		mc["resourceRules"].([]any)[0].(map[string]any)["scope"] != "*" || r.object()["metadata"].(map[string]any)["generation"] != float64(1) {
		t.Fatalf("defaults: %s", r.body)
	}
	r = a.postYAML(vapbs, `
metadata: {name: b}
spec:
  policyName: good
  validationActions: [Deny, Warn]
`)
	if s := r.status(); r.code != http.StatusUnprocessableEntity || !strings.Contains(s.Message, "must not contain both Deny and Warn") {
		t.Fatalf("binding with Deny and Warn = %d %s", r.code, r.body)
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
	a := newAPI(t, env)
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
		mustCode(t, "create "+m.name, a.postYAML(maps, fmt.Sprintf(`
metadata: {name: %s}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}
    objectSelector: {matchLabels: {mutate: "yes"}}
  reinvocationPolicy: Never
  mutations:%s
`, m.name, m.mutation)), http.StatusCreated)
		mustCode(t, "bind "+m.name, a.postYAML(mapbs, fmt.Sprintf("metadata: {name: %s}\nspec: {policyName: %s}\n", m.name, m.name)), http.StatusCreated)
	}
	a.dryRunUntil(cms, labelled("m", "mutate", `"a":"1","b":"2"`), "mutations applied", func(l map[string]any) bool {
		return l["applied"] == "by-admin" && l["patched"] == "2"
	})
	mustCode(t, "dry run stored nothing", a.json("GET", cms+"/m", ""), http.StatusNotFound)
	r := a.json("POST", cms, labelled("m", "mutate", `"a":"1"`))
	mustCode(t, "create", r, http.StatusCreated)
	got := labelsOf(a.json("GET", cms+"/m", ""))
	if got["applied"] != "by-admin" || got["patched"] != "1" || got["mutate"] != "yes" {
		t.Fatalf("stored labels %v", got)
	}
	// A mutation whose result fails the object's validation is refused
	// with the validation's error: mutation runs before validation.
	mustCode(t, "bad mutation", a.postYAML(maps, `
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
	mustCode(t, "bind badname", a.postYAML(mapbs, "metadata: {name: badname}\nspec: {policyName: badname}\n"), http.StatusCreated)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := a.json("POST", cms, labelled("bl", "badlabel", ""))
		if r.code == http.StatusUnprocessableEntity && strings.Contains(r.status().Message, "metadata.labels") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create with an invalid mutation = %d %s", r.code, r.body)
		}
		if r.code == http.StatusCreated {
			a.json("DELETE", cms+"/bl", "")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAdmissionPolicyAudit: Audit actions and auditAnnotations are
// annotations of the request's audit record.
func TestAdmissionPolicyAudit(t *testing.T) {
	env, path := startAudited(t, "")
	a := newAPI(t, env)
	a.policy("audited", "audited", `
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
		mustCode(t, "audited create", a.json("POST", cms, labelled(name, "audited", `"a":"1"`)), http.StatusCreated)
		var found map[string]string
		for _, ev := range completed(readEvents(t, path), "create", name) {
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
	g := startGC(t)
	mustCode(t, "policy", g.postYAML(vaps, `
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
	mustCode(t, "binding", g.postYAML(vapbs, "metadata: {name: keep-binding}\nspec: {policyName: keep, validationActions: [Deny]}\n"), http.StatusCreated)
	// The binding is in once a GC delete of a protected object is refused;
	// admin's deletes are not.
	owner := g.cm("owner", nil)
	ref := ownerRef(t, owner, false)
	mustCode(t, "protected", g.json("POST", cms, fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kept","labels":{"protected":"yes"},"ownerReferences":[%s]}}`, ref)), http.StatusCreated)
	g.cm("collected", nil, ref)
	g.cm("probe", nil)
	g.eventually("policy in effect", func() (bool, string) {
		r := g.json("DELETE", cms+"/probe?dryRun=All", "")
		return r.code == http.StatusUnprocessableEntity, fmt.Sprintf("%d %s", r.code, truncate(r.body))
	})
	mustCode(t, "delete owner", g.json("DELETE", cms+"/owner", ""), http.StatusOK)
	g.gone(cms + "/collected")
	time.Sleep(500 * time.Millisecond) // the collector retries; the policy keeps refusing
	mustCode(t, "protected dependent kept", g.json("GET", cms+"/kept", ""), http.StatusOK)
	mustCode(t, "admin may delete it", g.json("DELETE", cms+"/kept", ""), http.StatusOK)
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
				must(vaps, fmt.Sprintf(`
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
				must(vapbs, fmt.Sprintf(`
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
