package servertest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"

	"github.com/objwatch/objwatch/testenv"
)

// ScaleCRD has a scale subresource (with a label selector path) and a
// status subresource; gizmos have neither.
const ScaleCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"widgets.scale.objwatch.io"},
 "spec":{"group":"scale.objwatch.io","scope":"Namespaced",
  "names":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList"},
  "versions":[{"name":"v1","served":true,"storage":true,
   "subresources":{"status":{},"scale":{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas","labelSelectorPath":".status.selector"}},
   "schema":{"openAPIV3Schema":{"type":"object","properties":{
    "spec":{"type":"object","properties":{"replicas":{"type":"integer"},"image":{"type":"string"}}},
    "status":{"type":"object","properties":{"replicas":{"type":"integer"},"selector":{"type":"string"}}}}}}}]}}`

const NoScaleCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"gizmos.scale.objwatch.io"},
 "spec":{"group":"scale.objwatch.io","scope":"Namespaced",
  "names":{"plural":"gizmos","singular":"gizmo","kind":"Gizmo","listKind":"GizmoList"},
  "versions":[{"name":"v1","served":true,"storage":true,
   "schema":{"openAPIV3Schema":{"type":"object","properties":{
    "spec":{"type":"object","properties":{"replicas":{"type":"integer"}}}}}}}]}}`

const (
	Widgets = "/apis/scale.objwatch.io/v1/namespaces/default/widgets"
	Gizmos  = "/apis/scale.objwatch.io/v1/namespaces/default/gizmos"
)

// StartScale starts a server serving widgets and gizmos.
func StartScale(t *testing.T) *API {
	env := testenv.Start(t)
	a := NewAPI(t, env)
	t.Cleanup(a.C.CloseIdleConnections)
	for _, c := range []string{ScaleCRD, NoScaleCRD} {
		if r := a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", c); r.Code != http.StatusCreated {
			t.Fatalf("create CRD = %d %s", r.Code, r.Body)
		}
	}
	EventuallyWithin(t, 10*time.Second, func() bool {
		return a.JSON("GET", Widgets, "").Code == http.StatusOK && a.JSON("GET", Gizmos, "").Code == http.StatusOK
	})
	return a
}

func Widget(name, extra string) string {
	return fmt.Sprintf(`{"apiVersion":"scale.objwatch.io/v1","kind":"Widget","metadata":{"name":%q},"spec":{%s}}`, name, extra)
}

func ScaleBody(name, rv string, replicas int) string {
	return fmt.Sprintf(`{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":%q,"resourceVersion":%q},"spec":{"replicas":%d}}`, name, rv, replicas)
}

func DecodeScale(t *testing.T, r Response) autoscalingv1.Scale {
	t.Helper()
	var sc autoscalingv1.Scale
	if err := json.Unmarshal(r.Body, &sc); err != nil {
		t.Fatalf("decode Scale %s: %v", r.Body, err)
	}
	if sc.APIVersion != "autoscaling/v1" || sc.Kind != "Scale" {
		t.Fatalf("Scale type = %s %s, want autoscaling/v1 Scale (%s)", sc.APIVersion, sc.Kind, r.Body)
	}
	return sc
}

// WidgetState returns a widget's spec.replicas, metadata.generation and
// ResourceVersion.
func WidgetState(t *testing.T, a *API, name string) (replicas, generation any, rv string) {
	t.Helper()
	r := a.JSON("GET", Widgets+"/"+name, "")
	if r.Code != http.StatusOK {
		t.Fatalf("GET widget %s = %d %s", name, r.Code, r.Body)
	}
	o := r.Object()
	spec, _ := o["spec"].(map[string]any)
	md := o["metadata"].(map[string]any)
	return spec["replicas"], md["generation"], md["resourceVersion"].(string)
}
