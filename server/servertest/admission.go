package servertest

import (
	"fmt"

	"net/http"

	"time"
)

// LabelsOf is the labels of the object in r.
func LabelsOf(r Response) map[string]any {
	l, _ := r.Object()["metadata"].(map[string]any)["labels"].(map[string]any)
	return l
}

// dryRunUntil retries a dry-run create of obj at path until the labels
// of the answer satisfy ok: policies reach enforcement through a watch.
func (a *API) DryRunUntil(path, obj, what string, ok func(labels map[string]any) bool) {
	a.T.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := a.JSON("POST", path+"?dryRun=All", obj)
		MustCode(a.T, "dry-run create", r, http.StatusCreated)
		if ok(LabelsOf(r)) {
			return
		}
		if time.Now().After(deadline) {
			a.T.Fatalf("%s: not within 10 s: %s", what, r.Body)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mutatingPolicy creates a MutatingAdmissionPolicy on configmap creates
// Labelled label=yes, with reinvocationPolicy reinv and one JSONPatch
// mutation, and its binding.
func (a *API) MutatingPolicy(name, label, reinv, patch string) {
	a.T.Helper()
	MustCode(a.T, "create "+name, a.PostYAML(MAPs, fmt.Sprintf(`
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
	MustCode(a.T, "bind "+name, a.PostYAML(MAPBs, fmt.Sprintf("metadata: {name: %s}\nspec: {policyName: %s}\n", name, name)), http.StatusCreated)
}
