package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/testenv"
)

// TestInvalidManagedFieldsInUpdate: an update whose managedFields do not
// decode as entries keeps the stored ones and records the update, as
// kube-apiserver v1.37.2 does (UpdateNoErrors); managedFields that are not
// a list are a 400 with kube-apiserver's message, and nothing is written.
func TestInvalidManagedFieldsInUpdate(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	mustCode(t, "create", a.json("POST", cms+"?fieldManager=creator", cm("mf", "")), http.StatusCreated)
	n := 0
	put := func(mf string) response {
		n++
		cur := a.json("GET", cms+"/mf", "")
		return a.json("PUT", cms+"/mf", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"mf","resourceVersion":"`+rvOf(t, cur)+`","managedFields":`+mf+`},"data":{"k":"`+strings.Repeat("w", n)+`"}}`)
	}
	for name, mf := range map[string]string{
		"unknown operation":  `[{"manager":"x","operation":"Bogus","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{}}}]`,
		"unknown fieldsType": `[{"manager":"x","operation":"Update","apiVersion":"v1","fieldsType":"FieldsV2","fieldsV1":{"f:data":{}}}]`,
		"bad fieldsV1":       `[{"manager":"x","operation":"Update","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"bogus":{}}}]`,
	} {
		r := put(mf)
		mustCode(t, name, r, http.StatusOK)
		got := entries(t, r)
		joined := strings.Join(got, "\n")
		if len(got) != 2 || !strings.Contains(joined, "creator/Update") || !strings.Contains(joined, `Go-http-client/Update v1 {"f:data":{"f:k":{}}}`) {
			t.Errorf("%s: entries %v, want the creator's and the update's", name, got)
		}
	}
	before := a.json("GET", cms+"/mf", "")
	r := put(`"notalist"`)
	mustCode(t, "not a list", r, http.StatusBadRequest)
	if after := a.json("GET", cms+"/mf", ""); rvOf(t, after) != rvOf(t, before) {
		t.Errorf("the refused update wrote")
	}
	if m := r.status().Message; m != `ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal string into Go struct field ObjectMeta.metadata.managedFields of type []v1.ManagedFieldsEntry` {
		t.Errorf("not a list: %q", m)
	}
}
