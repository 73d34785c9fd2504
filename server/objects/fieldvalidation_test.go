package objects_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestUnknownFieldsOfPreparedKinds: a kind whose strategy prepares objects
// through its Go type (a Node, a Deployment) still reports the body's
// unknown fields, as kube-apiserver does: 400 with Strict, a warning
// otherwise, on create and on update. The preparation's round trip used
// to drop them before they were looked for.
func TestUnknownFieldsOfPreparedKinds(t *testing.T) {
	a := servertest.NewAPI(t, testenv.Start(t))
	const nodes = "/api/v1/nodes"
	node := func(spec string) string {
		return `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"},"spec":{` + spec + `}}`
	}
	strict := func(method, path, body string) {
		t.Helper()
		r := a.JSON(method, path+"?fieldValidation=Strict", body)
		if want := `strict decoding error: unknown field "spec.invalidField"`; r.Code != http.StatusBadRequest || r.Status().Message != want {
			t.Errorf("%s %s Strict = %d %s, want 400 %q", method, path, r.Code, r.Body, want)
		}
	}
	strict("POST", nodes, node(`"invalidField":"x"`))
	if r := a.JSON("POST", nodes, node(`"invalidField":"x"`)); r.Code != http.StatusCreated || !strings.Contains(r.Header.Get("Warning"), `unknown field \"spec.invalidField\"`) {
		t.Fatalf("POST with the default Warn = %d %s, warning %q", r.Code, r.Body, r.Header.Get("Warning"))
	}
	strict("PUT", nodes+"/n1", node(`"invalidField":"x"`))
	if r := a.JSON("PUT", nodes+"/n1?fieldValidation=Strict", node(`"unschedulable":true`)); r.Code != http.StatusOK {
		t.Errorf("PUT of known fields, Strict = %d %s", r.Code, r.Body)
	}
	deploy := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"invalidField":1,"selector":{"matchLabels":{"a":"b"}},` +
		`"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"a","image":"b"}]}}}}`
	strict("POST", "/apis/apps/v1/namespaces/default/deployments", deploy)
}
