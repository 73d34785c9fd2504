package servertest

import (
	"fmt"

	"net/http"

	"time"

	"sigs.k8s.io/yaml"
)

const (
	AdmissionAPI = "/apis/admissionregistration.k8s.io/v1/"
	VAPs         = AdmissionAPI + "validatingadmissionpolicies"
	VAPBs        = AdmissionAPI + "validatingadmissionpolicybindings"
	MAPs         = AdmissionAPI + "mutatingadmissionpolicies"
	MAPBs        = AdmissionAPI + "mutatingadmissionpolicybindings"
)

// postYAML creates the object written in YAML at path, as admin.
func (a *API) PostYAML(path, doc string) Response {
	a.T.Helper()
	b, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		a.T.Fatal(err)
	}
	return a.Do("POST", path, "application/json", b)
}

// policy creates a ValidatingAdmissionPolicy on configmaps (CREATE and
// UPDATE, unless ops says otherwise) whose objects carry label=yes, with
// the given extra spec lines, and its binding.
func (a *API) Policy(name, label, spec, binding string) {
	a.T.Helper()
	MustCode(a.T, "create policy "+name, a.PostYAML(VAPs, fmt.Sprintf(`
metadata: {name: %s}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["configmaps"]}
    objectSelector: {matchLabels: {%s: "yes"}}
%s`, name, label, spec)), http.StatusCreated)
	MustCode(a.T, "create binding "+name, a.PostYAML(VAPBs, fmt.Sprintf(`
metadata: {name: %s-binding}
spec:
  policyName: %s
%s`, name, name, binding)), http.StatusCreated)
}

// Labelled is a ConfigMap named name with label=yes and data.
func Labelled(name, label, data string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"labels":{%q:"yes"}},"data":{%s}}`, name, label, data)
}

// until retries a dry-run create of obj until its status code is code:
// policies reach enforcement through a watch. It returns how long that took.
func (a *API) Until(path, obj string, code int) time.Duration {
	a.T.Helper()
	start := time.Now()
	for {
		r := a.JSON("POST", path+"?dryRun=All", obj)
		if r.Code == code {
			return time.Since(start)
		}
		if time.Since(start) > 10*time.Second {
			a.T.Fatalf("dry-run create = %d %s, want %d within 10 s", r.Code, Truncate(r.Body), code)
		}
		time.Sleep(time.Millisecond)
	}
}
