package endpoints_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/server/servertest"
)

func TestScaleSubresource(t *testing.T) {
	a := servertest.StartScale(t)
	created := a.JSON("POST", servertest.Widgets, servertest.Widget("w1", `"replicas":1,"image":"a"`))
	if created.Code != http.StatusCreated {
		t.Fatalf("create widget = %d %s", created.Code, created.Body)
	}
	st := a.Do("PATCH", servertest.Widgets+"/w1/status", "application/merge-patch+json", []byte(`{"status":{"replicas":1,"selector":"app=w1"}}`))
	if st.Code != http.StatusOK {
		t.Fatalf("PATCH status = %d %s", st.Code, st.Body)
	}
	scale := servertest.Widgets + "/w1/scale"

	t.Run("get", func(t *testing.T) {
		r := a.JSON("GET", scale, "")
		if r.Code != http.StatusOK {
			t.Fatalf("GET scale = %d %s", r.Code, r.Body)
		}
		sc := servertest.DecodeScale(t, r)
		var obj metav1.PartialObjectMetadata
		json.Unmarshal(st.Body, &obj)
		want := metav1.ObjectMeta{Name: "w1", Namespace: "default", UID: obj.UID, ResourceVersion: obj.ResourceVersion, CreationTimestamp: obj.CreationTimestamp}
		if sc.Name != want.Name || sc.Namespace != want.Namespace || sc.UID != want.UID || sc.ResourceVersion != want.ResourceVersion || !sc.CreationTimestamp.Equal(&want.CreationTimestamp) {
			t.Errorf("GET scale metadata = %+v, want %+v", sc.ObjectMeta, want)
		}
		if sc.Spec.Replicas != 1 || sc.Status.Replicas != 1 || sc.Status.Selector != "app=w1" {
			t.Errorf("GET scale = spec %+v status %+v, want replicas 1, status 1 app=w1", sc.Spec, sc.Status)
		}
	})

	t.Run("put", func(t *testing.T) {
		_, gen, rv := servertest.WidgetState(t, a, "w1")
		r := a.JSON("PUT", scale, servertest.ScaleBody("w1", rv, 5))
		if r.Code != http.StatusOK {
			t.Fatalf("PUT scale = %d %s", r.Code, r.Body)
		}
		sc := servertest.DecodeScale(t, r)
		replicas, gen2, rv2 := servertest.WidgetState(t, a, "w1")
		if sc.Spec.Replicas != 5 || sc.ResourceVersion != rv2 || sc.Status.Selector != "app=w1" {
			t.Errorf("PUT scale returned %+v, want replicas 5 at resourceVersion %s", sc, rv2)
		}
		if replicas != float64(5) || gen2 != gen.(float64)+1 {
			t.Errorf("after PUT scale spec.replicas, generation = %v, %v, want 5, %v", replicas, gen2, gen.(float64)+1)
		}
		// The rest of the object is untouched.
		o := a.JSON("GET", servertest.Widgets+"/w1", "").Object()
		if o["spec"].(map[string]any)["image"] != "a" || o["status"].(map[string]any)["replicas"] != float64(1) {
			t.Errorf("after PUT scale object = %v, want image a and status.replicas 1", o)
		}
	})

	t.Run("put with stale resourceVersion conflicts", func(t *testing.T) {
		stale := servertest.RVOf(t, created)
		r := a.JSON("PUT", scale, servertest.ScaleBody("w1", stale, 9))
		if s := r.Status(); r.Code != http.StatusConflict || s.Reason != metav1.StatusReasonConflict {
			t.Fatalf("PUT scale with stale resourceVersion = %d %s, want 409 Conflict", r.Code, r.Body)
		}
		if replicas, _, _ := servertest.WidgetState(t, a, "w1"); replicas != float64(5) {
			t.Errorf("after conflict spec.replicas = %v, want 5", replicas)
		}
	})

	t.Run("put without resourceVersion is unconditional", func(t *testing.T) {
		r := a.JSON("PUT", scale, `{"metadata":{"name":"w1"},"spec":{"replicas":4}}`)
		if r.Code != http.StatusOK || servertest.DecodeScale(t, r).Spec.Replicas != 4 {
			t.Fatalf("PUT scale without resourceVersion = %d %s, want 200 with replicas 4", r.Code, r.Body)
		}
	})

	t.Run("put with another uid conflicts", func(t *testing.T) {
		r := a.JSON("PUT", scale, `{"metadata":{"name":"w1","uid":"00000000-0000-0000-0000-000000000000"},"spec":{"replicas":8}}`)
		if r.Code != http.StatusConflict {
			t.Fatalf("PUT scale with another uid = %d %s, want 409", r.Code, r.Body)
		}
	})

	t.Run("merge patch", func(t *testing.T) {
		_, gen, _ := servertest.WidgetState(t, a, "w1")
		r := a.Do("PATCH", scale, "application/merge-patch+json", []byte(`{"spec":{"replicas":7}}`))
		if r.Code != http.StatusOK || servertest.DecodeScale(t, r).Spec.Replicas != 7 {
			t.Fatalf("merge PATCH scale = %d %s, want 200 with replicas 7", r.Code, r.Body)
		}
		if replicas, gen2, _ := servertest.WidgetState(t, a, "w1"); replicas != float64(7) || gen2 != gen.(float64)+1 {
			t.Errorf("after merge PATCH spec.replicas, generation = %v, %v, want 7, %v", replicas, gen2, gen.(float64)+1)
		}
	})

	t.Run("json patch", func(t *testing.T) {
		r := a.Do("PATCH", scale, "application/json-patch+json", []byte(`[{"op":"replace","path":"/spec/replicas","value":2}]`))
		if r.Code != http.StatusOK || servertest.DecodeScale(t, r).Spec.Replicas != 2 {
			t.Fatalf("JSON PATCH scale = %d %s, want 200 with replicas 2", r.Code, r.Body)
		}
		if replicas, _, _ := servertest.WidgetState(t, a, "w1"); replicas != float64(2) {
			t.Errorf("after JSON PATCH spec.replicas = %v, want 2", replicas)
		}
	})

	t.Run("patch pinning a stale resourceVersion conflicts", func(t *testing.T) {
		body := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"spec":{"replicas":3}}`, servertest.RVOf(t, created))
		r := a.Do("PATCH", scale, "application/merge-patch+json", []byte(body))
		if r.Code != http.StatusConflict {
			t.Fatalf("PATCH scale with stale resourceVersion = %d %s, want 409", r.Code, r.Body)
		}
	})

	t.Run("dry run", func(t *testing.T) {
		r := a.Do("PATCH", scale+"?dryRun=All", "application/merge-patch+json", []byte(`{"spec":{"replicas":9}}`))
		if r.Code != http.StatusOK || servertest.DecodeScale(t, r).Spec.Replicas != 9 {
			t.Fatalf("dry-run PATCH scale = %d %s, want 200 with replicas 9", r.Code, r.Body)
		}
		if replicas, _, _ := servertest.WidgetState(t, a, "w1"); replicas != float64(2) {
			t.Errorf("after dry run spec.replicas = %v, want 2", replicas)
		}
	})

	t.Run("negative replicas are invalid", func(t *testing.T) {
		_, _, rv := servertest.WidgetState(t, a, "w1")
		for _, r := range []servertest.Response{
			a.JSON("PUT", scale, servertest.ScaleBody("w1", rv, -1)),
			a.Do("PATCH", scale, "application/merge-patch+json", []byte(`{"spec":{"replicas":-1}}`)),
		} {
			if s := r.Status(); r.Code != http.StatusUnprocessableEntity || s.Reason != metav1.StatusReasonInvalid || s.Details == nil || s.Details.Kind != "Widget" {
				t.Errorf("negative replicas = %d %s, want 422 Invalid for a Widget", r.Code, r.Body)
			}
		}
		if replicas, _, rv2 := servertest.WidgetState(t, a, "w1"); replicas != float64(2) || rv2 != rv {
			t.Errorf("after invalid scale spec.replicas = %v at %s, want 2 at %s", replicas, rv2, rv)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		tests := []struct {
			name, method, ctype, body string
			code                      int
		}{
			{"name mismatch", "PUT", "application/json", servertest.ScaleBody("other", "", 1), http.StatusBadRequest},
			{"wrong kind", "PUT", "application/json", servertest.Widget("w1", `"replicas":1`), http.StatusBadRequest},
			{"replicas beyond int32", "PUT", "application/json", `{"metadata":{"name":"w1"},"spec":{"replicas":3000000000}}`, http.StatusBadRequest},
			{"replicas not a number", "PUT", "application/json", `{"metadata":{"name":"w1"},"spec":{"replicas":"x"}}`, http.StatusBadRequest},
			{"strict unknown field", "PUT", "application/json", `{"metadata":{"name":"w1"},"spec":{"replicas":1,"bogus":1}}`, http.StatusBadRequest},
			{"strategic merge patch", "PATCH", "application/strategic-merge-patch+json", `{"spec":{"replicas":1}}`, http.StatusUnsupportedMediaType},
			{"delete", "DELETE", "", "", http.StatusMethodNotAllowed},
			{"create", "POST", "application/json", servertest.ScaleBody("w1", "", 1), http.StatusMethodNotAllowed},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				path := scale
				if tc.name == "strict unknown field" {
					path += "?fieldValidation=Strict"
				}
				r := a.Do(tc.method, path, tc.ctype, []byte(tc.body))
				if r.Code != tc.code || r.Status().Kind != "Status" {
					t.Errorf("%s scale = %d %s, want %d Status", tc.method, r.Code, r.Body, tc.code)
				}
			})
		}
		if replicas, _, _ := servertest.WidgetState(t, a, "w1"); replicas != float64(2) {
			t.Errorf("after bad requests spec.replicas = %v, want 2", replicas)
		}
	})

	t.Run("unknown field warns", func(t *testing.T) {
		r := a.JSON("PUT", scale, `{"metadata":{"name":"w1"},"spec":{"replicas":2,"bogus":1}}`)
		if r.Code != http.StatusOK || r.Header.Get("Warning") != `299 - "unknown field \"spec.bogus\""` {
			t.Errorf("PUT scale with an unknown field = %d Warning %q, want 200 with an unknown field warning", r.Code, r.Header.Get("Warning"))
		}
	})

	t.Run("table", func(t *testing.T) {
		req, _ := http.NewRequest("GET", a.Host+scale, nil)
		req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		resp, err := a.C.Do(req)
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
	a := servertest.StartScale(t)
	if r := a.JSON("POST", servertest.Widgets, servertest.Widget("empty", "")); r.Code != http.StatusCreated {
		t.Fatalf("create widget = %d %s", r.Code, r.Body)
	}
	scale := servertest.Widgets + "/empty/scale"
	if r := a.JSON("GET", scale, ""); r.Code != http.StatusInternalServerError {
		t.Errorf("GET scale without spec.replicas = %d %s, want 500", r.Code, r.Body)
	}
	if r := a.Do("PATCH", scale, "application/merge-patch+json", []byte(`{"metadata":{"labels":{"a":"b"}}}`)); r.Code != http.StatusBadRequest {
		t.Errorf("PATCH scale leaving spec.replicas unset = %d %s, want 400", r.Code, r.Body)
	}
	if r := a.Do("PATCH", scale, "application/merge-patch+json", []byte(`{"spec":{"replicas":2}}`)); r.Code != http.StatusOK || servertest.DecodeScale(t, r).Spec.Replicas != 2 {
		t.Errorf("PATCH scale setting spec.replicas = %d %s, want 200 with replicas 2", r.Code, r.Body)
	}
	if r := a.JSON("GET", scale, ""); r.Code != http.StatusOK || servertest.DecodeScale(t, r).Status.Replicas != 0 {
		t.Errorf("GET scale = %d %s, want 200 with status.replicas 0", r.Code, r.Body)
	}
}

func TestScaleDiscoveryAndAbsence(t *testing.T) {
	a := servertest.StartScale(t)
	r := a.JSON("GET", "/apis/scale.objwatch.io/v1", "")
	var list metav1.APIResourceList
	if err := json.Unmarshal(r.Body, &list); err != nil || r.Code != http.StatusOK {
		t.Fatalf("discovery = %d %s, %v", r.Code, r.Body, err)
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

	if r := a.JSON("POST", servertest.Gizmos, `{"apiVersion":"scale.objwatch.io/v1","kind":"Gizmo","metadata":{"name":"g1"},"spec":{"replicas":1}}`); r.Code != http.StatusCreated {
		t.Fatalf("create gizmo = %d %s", r.Code, r.Body)
	}
	for _, m := range []struct{ method, ctype, body string }{
		{"GET", "", ""},
		{"PUT", "application/json", servertest.ScaleBody("g1", "", 2)},
		{"PATCH", "application/merge-patch+json", `{"spec":{"replicas":2}}`},
	} {
		if r := a.Do(m.method, servertest.Gizmos+"/g1/scale", m.ctype, []byte(m.body)); r.Code != http.StatusNotFound || r.Status().Kind != "Status" {
			t.Errorf("%s scale of a CRD without a scale subresource = %d %s, want 404 Status", m.method, r.Code, r.Body)
		}
	}
	if r := a.JSON("GET", servertest.Gizmos+"/g1", ""); r.Object()["spec"].(map[string]any)["replicas"] != float64(1) {
		t.Errorf("gizmo after /scale requests = %s, want spec.replicas 1", r.Body)
	}
}
