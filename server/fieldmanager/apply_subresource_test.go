package fieldmanager_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/server/servertest"
)

const applyYAML = "application/apply-patch+yaml"

func scaleApply(name string, replicas string) []byte {
	b := "apiVersion: autoscaling/v1\nkind: Scale\nmetadata:\n  name: " + name + "\n"
	if replicas != "" {
		b += "spec:\n  replicas: " + replicas + "\n"
	}
	return []byte(b)
}

// managedOf returns a widget's managedFields entries as
// "manager/operation/subresource fieldsV1", and its spec.
func managedOf(t *testing.T, a *servertest.API, name string) ([]string, map[string]any) {
	t.Helper()
	var w struct {
		Metadata struct {
			ManagedFields []struct {
				Manager, Operation, Subresource, Time string
				FieldsV1                              json.RawMessage
			}
		}
		Spec map[string]any
	}
	if err := json.Unmarshal(a.Must("GET", servertest.Widgets+"/"+name, "").Body, &w); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range w.Metadata.ManagedFields {
		s := e.Manager + "/" + e.Operation + "/" + e.Subresource + " " + string(e.FieldsV1)
		if e.Time == "" {
			s += " (no time)"
		}
		out = append(out, s)
	}
	return out, w.Spec
}

// TestApplyScale: server-side apply through a custom resource's scale
// subresource answers as kube-apiserver v1.37.2 does (asked): a conflict
// with the owner of the replicas is 409; an apply that changes the Scale
// fails with its field manager's conversion error (500), and so does one
// to a Scale no manager owns the replicas of; an apply that changes
// nothing records the manager (owning the replicas, without a time) and
// takes the replicas from the object's other Update owners, as
// managedfields.ScaleHandler maps them back. Nothing is written on failure.
func TestApplyScale(t *testing.T) {
	a := servertest.StartScale(t)
	a.Must("POST", servertest.Widgets+"?fieldManager=kc", servertest.Widget("w1", `"replicas":1,"image":"a"`))
	a.Must("POST", servertest.Widgets+"?fieldManager=kc", servertest.Widget("w2", `"image":"a"`))
	before, _ := managedOf(t, a, "w1")
	cases := []struct {
		name, path string
		body       []byte
		code       int
		message    string
	}{
		{"no fieldManager", servertest.Widgets + "/w1/scale", scaleApply("w1", "3"), 422,
			`PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch`},
		{"conflict", servertest.Widgets + "/w1/scale?fieldManager=scaler", scaleApply("w1", "3"), 409,
			`Apply failed with 1 conflict: conflict with "kc" using autoscaling/v1: .spec.replicas`},
		{"forced", servertest.Widgets + "/w1/scale?fieldManager=scaler&force=true", scaleApply("w1", "3"), 500,
			"failed to convert new object (/w1; autoscaling/v1, Kind=Scale) to proper version: request to convert CR to an invalid group/version: autoscaling/v1"},
		{"unowned replicas", servertest.Widgets + "/w2/scale?fieldManager=scaler", scaleApply("w2", "3"), 500,
			"failed to create manager for existing fields: failed to convert live object (/; autoscaling/v1, Kind=Scale) to proper version: request to convert CR to an invalid group/version: autoscaling/v1"},
		{"missing", servertest.Widgets + "/nope/scale?fieldManager=scaler", scaleApply("nope", "3"), 404,
			`widgets.scale.objwatch.io "nope" not found`},
	}
	for _, c := range cases {
		r := a.Do("PATCH", c.path, applyYAML, c.body)
		var st struct{ Message string }
		json.Unmarshal(r.Body, &st)
		if r.Code != c.code || st.Message != c.message {
			t.Errorf("%s: %d %q, want %d %q", c.name, r.Code, st.Message, c.code, c.message)
		}
	}
	if after, spec := managedOf(t, a, "w1"); strings.Join(after, "\n") != strings.Join(before, "\n") || spec["replicas"] != float64(1) {
		t.Errorf("failed applies changed w1: %q %v, was %q", after, spec, before)
	}

	// The same value: the manager is recorded, owning the replicas.
	r := a.Do("PATCH", servertest.Widgets+"/w1/scale?fieldManager=scaler", applyYAML, scaleApply("w1", "1"))
	if r.Code != http.StatusOK || servertest.DecodeScale(t, r).Spec.Replicas != 1 {
		t.Fatalf("apply of the current replicas = %d %s", r.Code, r.Body)
	}
	got, spec := managedOf(t, a, "w1")
	// kube-apiserver writes kc's share of the replicas back as a second
	// kc entry without a time (its Scale entry's identity names
	// autoscaling/v1, so ScaleHandler.ToParent takes it for another
	// manager); the next write decodes the two as one, keeping the last.
	want := []string{
		`scaler/Apply/scale {"f:spec":{"f:replicas":{}}} (no time)`,
		`kc/Update/ {"f:spec":{"f:replicas":{}}} (no time)`,
		`kc/Update/ {"f:spec":{".":{},"f:image":{}}}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || spec["replicas"] != float64(1) {
		t.Errorf("after the apply of the current replicas: %q %v, want %q", got, spec, want)
	}
	// Another manager applying nothing changes nothing and succeeds.
	if r := a.Do("PATCH", servertest.Widgets+"/w1/scale?fieldManager=s2", applyYAML, scaleApply("w1", "")); r.Code != http.StatusOK {
		t.Errorf("empty apply = %d %s, want 200", r.Code, r.Body)
	}
	got, _ = managedOf(t, a, "w1")
	want = []string{want[0], want[2]}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("after an empty apply: %q, want %q", got, want)
	}
	// The manager owns the replicas alone: a change fails as forced does.
	if r := a.Do("PATCH", servertest.Widgets+"/w1/scale?fieldManager=scaler", applyYAML, scaleApply("w1", "2")); r.Code != http.StatusInternalServerError {
		t.Errorf("apply of new replicas by their owner = %d %s, want 500", r.Code, r.Body)
	}
}

// TestApplyStatus: server-side apply through the status subresource
// takes only status (spec in the body is ignored), records the manager
// with subresource status, conflicts name it so, and never creates, as in
// kube-apiserver v1.37.2.
func TestApplyStatus(t *testing.T) {
	a := servertest.StartScale(t)
	a.Must("POST", servertest.Widgets+"?fieldManager=kc", servertest.Widget("w", `"image":"a"`))
	body := "apiVersion: scale.objwatch.io/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  image: zzz\nstatus:\n  replicas: 2\n"
	if r := a.Do("PATCH", servertest.Widgets+"/w/status?fieldManager=st", applyYAML, []byte(body)); r.Code != http.StatusOK {
		t.Fatalf("apply status = %d %s", r.Code, r.Body)
	}
	got, spec := managedOf(t, a, "w")
	want := []string{`st/Apply/status {"f:status":{"f:replicas":{}}}`, `kc/Update/ {"f:spec":{".":{},"f:image":{}}}`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || spec["image"] != "a" {
		t.Errorf("after apply status: %q %v, want %q and image a", got, spec, want)
	}
	r := a.Do("PATCH", servertest.Widgets+"/w/status?fieldManager=st2", applyYAML, []byte(strings.Replace(body, "replicas: 2", "replicas: 5", 1)))
	if !strings.Contains(string(r.Body), `Apply failed with 1 conflict: conflict with \"st\" with subresource \"status\": .status.replicas`) || r.Code != http.StatusConflict {
		t.Errorf("conflicting apply status = %d %s", r.Code, r.Body)
	}
	if r := a.Do("PATCH", servertest.Widgets+"/nope/status?fieldManager=st", applyYAML, []byte(strings.Replace(body, "name: w", "name: nope", 1))); r.Code != http.StatusNotFound {
		t.Errorf("apply status of a missing object = %d %s", r.Code, r.Body)
	}
}
