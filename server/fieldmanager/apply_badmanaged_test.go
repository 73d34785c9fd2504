package fieldmanager_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestInvalidManagedFieldsInUpdate: an update whose managedFields do not
// decode as entries keeps the stored ones and records the update, as
// kube-apiserver v1.37.2 does (UpdateNoErrors); managedFields that are not
// a list are a 400 with kube-apiserver's message, and nothing is written.
func TestInvalidManagedFieldsInUpdate(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	servertest.MustCode(t, "create", a.JSON("POST", servertest.CMs+"?fieldManager=creator", servertest.CM("mf", "")), http.StatusCreated)
	n := 0
	put := func(mf string) servertest.Response {
		n++
		cur := a.JSON("GET", servertest.CMs+"/mf", "")
		return a.JSON("PUT", servertest.CMs+"/mf", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"mf","resourceVersion":"`+servertest.RVOf(t, cur)+`","managedFields":`+mf+`},"data":{"k":"`+strings.Repeat("w", n)+`"}}`)
	}
	for name, mf := range map[string]string{
		"unknown operation":  `[{"manager":"x","operation":"Bogus","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{}}}]`,
		"unknown fieldsType": `[{"manager":"x","operation":"Update","apiVersion":"v1","fieldsType":"FieldsV2","fieldsV1":{"f:data":{}}}]`,
		"bad fieldsV1":       `[{"manager":"x","operation":"Update","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"bogus":{}}}]`,
	} {
		r := put(mf)
		servertest.MustCode(t, name, r, http.StatusOK)
		got := servertest.Entries(t, r)
		joined := strings.Join(got, "\n")
		if len(got) != 2 || !strings.Contains(joined, "creator/Update") || !strings.Contains(joined, `Go-http-client/Update v1 {"f:data":{"f:k":{}}}`) {
			t.Errorf("%s: entries %v, want the creator's and the update's", name, got)
		}
	}
	before := a.JSON("GET", servertest.CMs+"/mf", "")
	r := put(`"notalist"`)
	servertest.MustCode(t, "not a list", r, http.StatusBadRequest)
	if after := a.JSON("GET", servertest.CMs+"/mf", ""); servertest.RVOf(t, after) != servertest.RVOf(t, before) {
		t.Errorf("the refused update wrote")
	}
	if m := r.Status().Message; m != `ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal string into Go struct field ObjectMeta.metadata.managedFields of type []v1.ManagedFieldsEntry` {
		t.Errorf("not a list: %q", m)
	}
}
