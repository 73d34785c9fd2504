package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/testenv"
)

// scaleCRD has a scale subresource (with a label selector path) and a
// status subresource; gizmos have neither.
const scaleCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"widgets.scale.objwatch.io"},
 "spec":{"group":"scale.objwatch.io","scope":"Namespaced",
  "names":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList"},
  "versions":[{"name":"v1","served":true,"storage":true,
   "subresources":{"status":{},"scale":{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas","labelSelectorPath":".status.selector"}},
   "schema":{"openAPIV3Schema":{"type":"object","properties":{
    "spec":{"type":"object","properties":{"replicas":{"type":"integer"},"image":{"type":"string"}}},
    "status":{"type":"object","properties":{"replicas":{"type":"integer"},"selector":{"type":"string"}}}}}}}]}}`

const noScaleCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"gizmos.scale.objwatch.io"},
 "spec":{"group":"scale.objwatch.io","scope":"Namespaced",
  "names":{"plural":"gizmos","singular":"gizmo","kind":"Gizmo","listKind":"GizmoList"},
  "versions":[{"name":"v1","served":true,"storage":true,
   "schema":{"openAPIV3Schema":{"type":"object","properties":{
    "spec":{"type":"object","properties":{"replicas":{"type":"integer"}}}}}}}]}}`

const (
	widgets = "/apis/scale.objwatch.io/v1/namespaces/default/widgets"
	gizmos  = "/apis/scale.objwatch.io/v1/namespaces/default/gizmos"
)

// startScale starts a server serving widgets and gizmos.
func startScale(t *testing.T) *api {
	env := testenv.Start(t)
	a := newAPI(t, env)
	t.Cleanup(a.c.CloseIdleConnections)
	for _, c := range []string{scaleCRD, noScaleCRD} {
		if r := a.json("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", c); r.code != http.StatusCreated {
			t.Fatalf("create CRD = %d %s", r.code, r.body)
		}
	}
	oaEventually(t, 10*time.Second, func() bool {
		return a.json("GET", widgets, "").code == http.StatusOK && a.json("GET", gizmos, "").code == http.StatusOK
	})
	return a
}

func widget(name, extra string) string {
	return fmt.Sprintf(`{"apiVersion":"scale.objwatch.io/v1","kind":"Widget","metadata":{"name":%q},"spec":{%s}}`, name, extra)
}

func scaleBody(name, rv string, replicas int) string {
	return fmt.Sprintf(`{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":%q,"resourceVersion":%q},"spec":{"replicas":%d}}`, name, rv, replicas)
}

func decodeScale(t *testing.T, r response) autoscalingv1.Scale {
	t.Helper()
	var sc autoscalingv1.Scale
	if err := json.Unmarshal(r.body, &sc); err != nil {
		t.Fatalf("decode Scale %s: %v", r.body, err)
	}
	if sc.APIVersion != "autoscaling/v1" || sc.Kind != "Scale" {
		t.Fatalf("Scale type = %s %s, want autoscaling/v1 Scale (%s)", sc.APIVersion, sc.Kind, r.body)
	}
	return sc
}

// widgetState returns a widget's spec.replicas, metadata.generation and
// resourceVersion.
func widgetState(t *testing.T, a *api, name string) (replicas, generation any, rv string) {
	t.Helper()
	r := a.json("GET", widgets+"/"+name, "")
	if r.code != http.StatusOK {
		t.Fatalf("GET widget %s = %d %s", name, r.code, r.body)
	}
	o := r.object()
	spec, _ := o["spec"].(map[string]any)
	md := o["metadata"].(map[string]any)
	return spec["replicas"], md["generation"], md["resourceVersion"].(string)
}

func TestScaleSubresource(t *testing.T) {
	a := startScale(t)
	created := a.json("POST", widgets, widget("w1", `"replicas":1,"image":"a"`))
	if created.code != http.StatusCreated {
		t.Fatalf("create widget = %d %s", created.code, created.body)
	}
	st := a.do("PATCH", widgets+"/w1/status", "application/merge-patch+json", []byte(`{"status":{"replicas":1,"selector":"app=w1"}}`))
	if st.code != http.StatusOK {
		t.Fatalf("PATCH status = %d %s", st.code, st.body)
	}
	scale := widgets + "/w1/scale"

	t.Run("get", func(t *testing.T) {
		r := a.json("GET", scale, "")
		if r.code != http.StatusOK {
			t.Fatalf("GET scale = %d %s", r.code, r.body)
		}
		sc := decodeScale(t, r)
		var obj metav1.PartialObjectMetadata
		json.Unmarshal(st.body, &obj)
		want := metav1.ObjectMeta{Name: "w1", Namespace: "default", UID: obj.UID, ResourceVersion: obj.ResourceVersion, CreationTimestamp: obj.CreationTimestamp}
		if sc.Name != want.Name || sc.Namespace != want.Namespace || sc.UID != want.UID || sc.ResourceVersion != want.ResourceVersion || !sc.CreationTimestamp.Equal(&want.CreationTimestamp) {
			t.Errorf("GET scale metadata = %+v, want %+v", sc.ObjectMeta, want)
		}
		if sc.Spec.Replicas != 1 || sc.Status.Replicas != 1 || sc.Status.Selector != "app=w1" {
			t.Errorf("GET scale = spec %+v status %+v, want replicas 1, status 1 app=w1", sc.Spec, sc.Status)
		}
	})

	t.Run("put", func(t *testing.T) {
		_, gen, rv := widgetState(t, a, "w1")
		r := a.json("PUT", scale, scaleBody("w1", rv, 5))
		if r.code != http.StatusOK {
			t.Fatalf("PUT scale = %d %s", r.code, r.body)
		}
		sc := decodeScale(t, r)
		replicas, gen2, rv2 := widgetState(t, a, "w1")
		if sc.Spec.Replicas != 5 || sc.ResourceVersion != rv2 || sc.Status.Selector != "app=w1" {
			t.Errorf("PUT scale returned %+v, want replicas 5 at resourceVersion %s", sc, rv2)
		}
		if replicas != float64(5) || gen2 != gen.(float64)+1 {
			t.Errorf("after PUT scale spec.replicas, generation = %v, %v, want 5, %v", replicas, gen2, gen.(float64)+1)
		}
		// The rest of the object is untouched.
		o := a.json("GET", widgets+"/w1", "").object()
		if o["spec"].(map[string]any)["image"] != "a" || o["status"].(map[string]any)["replicas"] != float64(1) {
			t.Errorf("after PUT scale object = %v, want image a and status.replicas 1", o)
		}
	})

	t.Run("put with stale resourceVersion conflicts", func(t *testing.T) {
		stale := rvOf(t, created)
		r := a.json("PUT", scale, scaleBody("w1", stale, 9))
		if s := r.status(); r.code != http.StatusConflict || s.Reason != metav1.StatusReasonConflict {
			t.Fatalf("PUT scale with stale resourceVersion = %d %s, want 409 Conflict", r.code, r.body)
		}
		if replicas, _, _ := widgetState(t, a, "w1"); replicas != float64(5) {
			t.Errorf("after conflict spec.replicas = %v, want 5", replicas)
		}
	})

	t.Run("put without resourceVersion is unconditional", func(t *testing.T) {
		r := a.json("PUT", scale, `{"metadata":{"name":"w1"},"spec":{"replicas":4}}`)
		if r.code != http.StatusOK || decodeScale(t, r).Spec.Replicas != 4 {
			t.Fatalf("PUT scale without resourceVersion = %d %s, want 200 with replicas 4", r.code, r.body)
		}
	})

	t.Run("put with another uid conflicts", func(t *testing.T) {
		r := a.json("PUT", scale, `{"metadata":{"name":"w1","uid":"00000000-0000-0000-0000-000000000000"},"spec":{"replicas":8}}`)
		if r.code != http.StatusConflict {
			t.Fatalf("PUT scale with another uid = %d %s, want 409", r.code, r.body)
		}
	})

	t.Run("merge patch", func(t *testing.T) {
		_, gen, _ := widgetState(t, a, "w1")
		r := a.do("PATCH", scale, "application/merge-patch+json", []byte(`{"spec":{"replicas":7}}`))
		if r.code != http.StatusOK || decodeScale(t, r).Spec.Replicas != 7 {
			t.Fatalf("merge PATCH scale = %d %s, want 200 with replicas 7", r.code, r.body)
		}
		if replicas, gen2, _ := widgetState(t, a, "w1"); replicas != float64(7) || gen2 != gen.(float64)+1 {
			t.Errorf("after merge PATCH spec.replicas, generation = %v, %v, want 7, %v", replicas, gen2, gen.(float64)+1)
		}
	})

	t.Run("json patch", func(t *testing.T) {
		r := a.do("PATCH", scale, "application/json-patch+json", []byte(`[{"op":"replace","path":"/spec/replicas","value":2}]`))
		if r.code != http.StatusOK || decodeScale(t, r).Spec.Replicas != 2 {
			t.Fatalf("JSON PATCH scale = %d %s, want 200 with replicas 2", r.code, r.body)
		}
		if replicas, _, _ := widgetState(t, a, "w1"); replicas != float64(2) {
			t.Errorf("after JSON PATCH spec.replicas = %v, want 2", replicas)
		}
	})

	t.Run("patch pinning a stale resourceVersion conflicts", func(t *testing.T) {
		body := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"spec":{"replicas":3}}`, rvOf(t, created))
		r := a.do("PATCH", scale, "application/merge-patch+json", []byte(body))
		if r.code != http.StatusConflict {
			t.Fatalf("PATCH scale with stale resourceVersion = %d %s, want 409", r.code, r.body)
		}
	})

	t.Run("dry run", func(t *testing.T) {
		r := a.do("PATCH", scale+"?dryRun=All", "application/merge-patch+json", []byte(`{"spec":{"replicas":9}}`))
		if r.code != http.StatusOK || decodeScale(t, r).Spec.Replicas != 9 {
			t.Fatalf("dry-run PATCH scale = %d %s, want 200 with replicas 9", r.code, r.body)
		}
		if replicas, _, _ := widgetState(t, a, "w1"); replicas != float64(2) {
			t.Errorf("after dry run spec.replicas = %v, want 2", replicas)
		}
	})

	t.Run("negative replicas are invalid", func(t *testing.T) {
		_, _, rv := widgetState(t, a, "w1")
		for _, r := range []response{
			a.json("PUT", scale, scaleBody("w1", rv, -1)),
			a.do("PATCH", scale, "application/merge-patch+json", []byte(`{"spec":{"replicas":-1}}`)),
		} {
			if s := r.status(); r.code != http.StatusUnprocessableEntity || s.Reason != metav1.StatusReasonInvalid || s.Details == nil || s.Details.Kind != "Widget" {
				t.Errorf("negative replicas = %d %s, want 422 Invalid for a Widget", r.code, r.body)
			}
		}
		if replicas, _, rv2 := widgetState(t, a, "w1"); replicas != float64(2) || rv2 != rv {
			t.Errorf("after invalid scale spec.replicas = %v at %s, want 2 at %s", replicas, rv2, rv)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		tests := []struct {
			name, method, ctype, body string
			code                      int
		}{
			{"name mismatch", "PUT", "application/json", scaleBody("other", "", 1), http.StatusBadRequest},
			{"wrong kind", "PUT", "application/json", widget("w1", `"replicas":1`), http.StatusBadRequest},
			{"replicas beyond int32", "PUT", "application/json", `{"metadata":{"name":"w1"},"spec":{"replicas":3000000000}}`, http.StatusBadRequest},
			{"replicas not a number", "PUT", "application/json", `{"metadata":{"name":"w1"},"spec":{"replicas":"x"}}`, http.StatusBadRequest},
			{"strict unknown field", "PUT", "application/json", `{"metadata":{"name":"w1"},"spec":{"replicas":1,"bogus":1}}`, http.StatusBadRequest},
			{"strategic merge patch", "PATCH", "application/strategic-merge-patch+json", `{"spec":{"replicas":1}}`, http.StatusUnsupportedMediaType},
			{"delete", "DELETE", "", "", http.StatusMethodNotAllowed},
			{"create", "POST", "application/json", scaleBody("w1", "", 1), http.StatusMethodNotAllowed},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				path := scale
				if tc.name == "strict unknown field" {
					path += "?fieldValidation=Strict"
				}
				r := a.do(tc.method, path, tc.ctype, []byte(tc.body))
				if r.code != tc.code || r.status().Kind != "Status" {
					t.Errorf("%s scale = %d %s, want %d Status", tc.method, r.code, r.body, tc.code)
				}
			})
		}
		if replicas, _, _ := widgetState(t, a, "w1"); replicas != float64(2) {
			t.Errorf("after bad requests spec.replicas = %v, want 2", replicas)
		}
	})

	t.Run("unknown field warns", func(t *testing.T) {
		r := a.json("PUT", scale, `{"metadata":{"name":"w1"},"spec":{"replicas":2,"bogus":1}}`)
		if r.code != http.StatusOK || r.header.Get("Warning") != `299 - "unknown field \"spec.bogus\""` {
			t.Errorf("PUT scale with an unknown field = %d Warning %q, want 200 with an unknown field warning", r.code, r.header.Get("Warning"))
		}
	})

	t.Run("table", func(t *testing.T) {
		req, _ := http.NewRequest("GET", a.host+scale, nil)
		req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		resp, err := a.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var tab metav1.Table
		if err := json.NewDecoder(resp.Body).Decode(&tab); err != nil || tab.Kind != "Table" {
			t.Fatalf("GET scale as Table = %d %+v, %v", resp.StatusCode, tab, err)
		}
		var cols []string
		for _, c := range tab.ColumnDefinitions {
			cols = append(cols, c.Name)
		}
		if fmt.Sprint(cols) != "[Name Desired Available Age]" || len(tab.Rows) != 1 || tab.Rows[0].Cells[0] != "w1" || tab.Rows[0].Cells[1] != float64(2) || tab.Rows[0].Cells[2] != float64(1) {
			t.Errorf("scale table = %v %+v, want columns Name Desired Available Age and row w1 2 1", cols, tab.Rows)
		}
	})
}

// Without the spec replicas field, Kubernetes' GET of the scale is a 500
// and a patch must set it; a PUT does.
func TestScaleWithoutSpecReplicas(t *testing.T) {
	a := startScale(t)
	if r := a.json("POST", widgets, widget("empty", "")); r.code != http.StatusCreated {
		t.Fatalf("create widget = %d %s", r.code, r.body)
	}
	scale := widgets + "/empty/scale"
	if r := a.json("GET", scale, ""); r.code != http.StatusInternalServerError {
		t.Errorf("GET scale without spec.replicas = %d %s, want 500", r.code, r.body)
	}
	if r := a.do("PATCH", scale, "application/merge-patch+json", []byte(`{"metadata":{"labels":{"a":"b"}}}`)); r.code != http.StatusBadRequest {
		t.Errorf("PATCH scale leaving spec.replicas unset = %d %s, want 400", r.code, r.body)
	}
	if r := a.do("PATCH", scale, "application/merge-patch+json", []byte(`{"spec":{"replicas":2}}`)); r.code != http.StatusOK || decodeScale(t, r).Spec.Replicas != 2 {
		t.Errorf("PATCH scale setting spec.replicas = %d %s, want 200 with replicas 2", r.code, r.body)
	}
	if r := a.json("GET", scale, ""); r.code != http.StatusOK || decodeScale(t, r).Status.Replicas != 0 {
		t.Errorf("GET scale = %d %s, want 200 with status.replicas 0", r.code, r.body)
	}
}

func TestScaleDiscoveryAndAbsence(t *testing.T) {
	a := startScale(t)
	r := a.json("GET", "/apis/scale.objwatch.io/v1", "")
	var list metav1.APIResourceList
	if err := json.Unmarshal(r.body, &list); err != nil || r.code != http.StatusOK {
		t.Fatalf("discovery = %d %s, %v", r.code, r.body, err)
	}
	found := map[string]metav1.APIResource{}
	for _, res := range list.APIResources {
		found[res.Name] = res
	}
	got, ok := found["widgets/scale"]
	want := metav1.APIResource{Name: "widgets/scale", Namespaced: true, Group: "autoscaling", Version: "v1", Kind: "Scale", Verbs: []string{"get", "patch", "update"}}
	if !ok || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("discovery widgets/scale = %+v, want %+v", got, want)
	}
	if _, ok := found["gizmos/scale"]; ok {
		t.Errorf("discovery lists gizmos/scale for a CRD without a scale subresource")
	}
	if _, ok := found["gizmos"]; !ok {
		t.Errorf("discovery does not list gizmos: %v", found)
	}

	if r := a.json("POST", gizmos, `{"apiVersion":"scale.objwatch.io/v1","kind":"Gizmo","metadata":{"name":"g1"},"spec":{"replicas":1}}`); r.code != http.StatusCreated {
		t.Fatalf("create gizmo = %d %s", r.code, r.body)
	}
	for _, m := range []struct{ method, ctype, body string }{
		{"GET", "", ""},
		{"PUT", "application/json", scaleBody("g1", "", 2)},
		{"PATCH", "application/merge-patch+json", `{"spec":{"replicas":2}}`},
	} {
		if r := a.do(m.method, gizmos+"/g1/scale", m.ctype, []byte(m.body)); r.code != http.StatusNotFound || r.status().Kind != "Status" {
			t.Errorf("%s scale of a CRD without a scale subresource = %d %s, want 404 Status", m.method, r.code, r.body)
		}
	}
	if r := a.json("GET", gizmos+"/g1", ""); r.object()["spec"].(map[string]any)["replicas"] != float64(1) {
		t.Errorf("gizmo after /scale requests = %s, want spec.replicas 1", r.body)
	}
}
