package crd_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

const deprecatedCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"gizmos.warn.objwatch.io"},
 "spec":{"group":"warn.objwatch.io","scope":"Namespaced",
  "names":{"plural":"gizmos","singular":"gizmo","kind":"Gizmo","listKind":"GizmoList"},
  "versions":[
   {"name":"v1alpha1","served":true,"storage":false,"deprecated":true,"deprecationWarning":"gizmos v1alpha1 go away soon",
    "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}},
   {"name":"v1beta1","served":true,"storage":false,"deprecated":true,
    "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}},
   {"name":"v1","served":true,"storage":true,
    "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`

// Every request to a deprecated custom resource version carries its
// deprecation warning, with kube-apiserver's default text where the CRD
// gives none ("<group>/<version> <Kind> is deprecated; use <newest>"), and
// requests to other versions carry none.
func TestDeprecatedCRDVersionWarns(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	servertest.MustCode(t, "create CRD", a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", deprecatedCRD), http.StatusCreated)
	base := "/apis/warn.objwatch.io/"
	servertest.EventuallyWithin(t, 10*time.Second, func() bool {
		return a.JSON("GET", base+"v1alpha1/namespaces/default/gizmos", "").Code == http.StatusOK
	})
	obj := func(v, name string) string {
		return `{"apiVersion":"warn.objwatch.io/` + v + `","kind":"Gizmo","metadata":{"name":"` + name + `"}}`
	}
	for _, tc := range []struct{ version, want string }{
		{"v1alpha1", `299 - "gizmos v1alpha1 go away soon"`},
		{"v1beta1", `299 - "warn.objwatch.io/v1beta1 Gizmo is deprecated; use warn.objwatch.io/v1 Gizmo"`},
		{"v1", ""},
	} {
		coll := base + tc.version + "/namespaces/default/gizmos"
		for _, req := range []struct{ method, path, body string }{
			{"POST", coll, obj(tc.version, "g-"+tc.version)},
			{"GET", coll, ""},
			{"GET", coll + "/g-" + tc.version, ""},
			{"GET", coll + "?watch=1&timeoutSeconds=1&resourceVersion=0", ""},
			{"DELETE", coll + "/g-" + tc.version, ""},
		} {
			r := a.JSON(req.method, req.path, req.body)
			if r.Code >= 300 {
				t.Fatalf("%s %s = %d %s", req.method, req.path, r.Code, servertest.Truncate(r.Body))
			}
			got := r.Header.Values("Warning")
			switch {
			case tc.want == "" && len(got) != 0:
				t.Errorf("%s %s Warning = %q, want none", req.method, req.path, got)
			case tc.want != "" && (len(got) != 1 || got[0] != tc.want):
				t.Errorf("%s %s Warning = %q, want %q", req.method, req.path, got, tc.want)
			}
		}
	}
}
