package fieldmanager_test

import (
	"encoding/json"
	"net/http"

	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestApplyConfigMap: server-side apply of a built-in kind creates (201),
// changes, conflicts with another manager's field (409 with Kubernetes'
// message and a cause per field) and takes it with force, the other
// manager's entry pruned once it owns nothing.
func TestApplyConfigMap(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	path := servertest.CMs + "/ssa"
	body := func(v string) []byte {
		return []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  labels:\n    app: a\ndata:\n  key: " + v + "\n")
	}
	r := a.Do("PATCH", path+"?fieldManager=mgr", servertest.ApplyType, body("one"))
	servertest.MustCode(t, "apply create", r, http.StatusCreated)
	servertest.WantEntries(t, "after create", r, `mgr/Apply v1 {"f:data":{"f:key":{}},"f:metadata":{"f:labels":{"f:app":{}}}}`)
	if servertest.MetaOf(r)["uid"] == nil || servertest.MetaOf(r)["namespace"] != "default" {
		t.Errorf("created object's metadata: %v", servertest.MetaOf(r))
	}

	r = a.Do("PATCH", path+"?fieldManager=mgr", servertest.ApplyType, body("two"))
	servertest.MustCode(t, "apply change", r, http.StatusOK)
	if got := r.Object()["data"].(map[string]any)["key"]; got != "two" {
		t.Errorf("data.key = %v, want two", got)
	}

	r = a.Do("PATCH", path+"?fieldManager=other", "application/merge-patch+json", []byte(`{"data":{"key":"three","extra":"x"}}`))
	servertest.MustCode(t, "merge patch", r, http.StatusOK)
	servertest.WantEntries(t, "after merge patch", r,
		`mgr/Apply v1 {"f:metadata":{"f:labels":{"f:app":{}}}}`,
		`other/Update v1 {"f:data":{"f:extra":{},"f:key":{}}}`)

	r = a.Do("PATCH", path+"?fieldManager=mgr", servertest.ApplyType, body("four"))
	servertest.MustCode(t, "conflicting apply", r, http.StatusConflict)
	st := r.Status()
	if st.Reason != metav1.StatusReasonConflict || st.Message != `Apply failed with 1 conflict: conflict with "other" using v1: .data.key` {
		t.Errorf("conflict status %s %q", st.Reason, st.Message)
	}
	if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0] != (metav1.StatusCause{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "other" using v1`, Field: ".data.key"}) {
		t.Errorf("conflict details %+v", st.Details)
	}
	if got := a.JSON("GET", path, "").Object()["data"].(map[string]any)["key"]; got != "three" {
		t.Errorf("after the conflict data.key = %v, want three (unchanged)", got)
	}

	r = a.Do("PATCH", path+"?fieldManager=mgr&force=true", servertest.ApplyType, body("four"))
	servertest.MustCode(t, "forced apply", r, http.StatusOK)
	servertest.WantEntries(t, "after force", r,
		`mgr/Apply v1 {"f:data":{"f:key":{}},"f:metadata":{"f:labels":{"f:app":{}}}}`,
		`other/Update v1 {"f:data":{"f:extra":{}}}`)

	// Leaving a field out of the applied configuration removes it.
	r = a.Do("PATCH", path+"?fieldManager=mgr", servertest.ApplyType, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ssa"},"data":{"key":"four"}}`))
	servertest.MustCode(t, "apply without the label (JSON body)", r, http.StatusOK)
	if l := servertest.MetaOf(r)["labels"]; l != nil {
		t.Errorf("labels after applying without them: %v", l)
	}
	got := a.JSON("GET", path, "")
	servertest.WantEntries(t, "read back", got,
		`mgr/Apply v1 {"f:data":{"f:key":{}}}`,
		`other/Update v1 {"f:data":{"f:extra":{}}}`)
	if l := a.JSON("GET", servertest.CMs, ""); !strings.Contains(string(l.Body), `"manager":"mgr"`) {
		t.Errorf("list has no managedFields: %s", servertest.Truncate(l.Body))
	}
}

// TestManagedFieldsOnWrites: creates, updates and status writes get Update
// entries, the manager from fieldManager or the User-Agent's first
// segment; status writes own status as subresource "status"; an update
// that changes nothing changes no entry; managedFields a client sends are
// taken when they decode, an empty list resets them, undecodable ones are
// ignored for the live ones, as kube-apiserver does.
func TestManagedFieldsOnWrites(t *testing.T) {
	a := servertest.StartScale(t)
	w := servertest.Widgets + "/w"
	r := a.JSON("POST", servertest.Widgets, servertest.Widget("w", `"replicas":1`))
	servertest.MustCode(t, "create", r, http.StatusCreated)
	servertest.WantEntries(t, "create", r, `Go-http-client/Update scale.objwatch.io/v1 {"f:spec":{".":{},"f:replicas":{}}}`)

	obj := r.Object()
	obj["spec"].(map[string]any)["image"] = "nginx"
	b, _ := json.Marshal(obj)
	r = a.JSON("PUT", w+"?fieldManager=editor", string(b))
	servertest.MustCode(t, "update", r, http.StatusOK)
	servertest.WantEntries(t, "update", r,
		`Go-http-client/Update scale.objwatch.io/v1 {"f:spec":{".":{},"f:replicas":{}}}`,
		`editor/Update scale.objwatch.io/v1 {"f:spec":{"f:image":{}}}`)
	rv := servertest.RVOf(t, r)

	r = a.Do("PATCH", w+"/status?fieldManager=ctrl", "application/merge-patch+json", []byte(`{"status":{"replicas":1}}`))
	servertest.MustCode(t, "status patch", r, http.StatusOK)
	servertest.WantEntries(t, "status patch", r,
		`Go-http-client/Update scale.objwatch.io/v1 {"f:spec":{".":{},"f:replicas":{}}}`,
		`ctrl/Update/status scale.objwatch.io/v1 {"f:status":{".":{},"f:replicas":{}}}`,
		`editor/Update scale.objwatch.io/v1 {"f:spec":{"f:image":{}}}`)

	// The main resource ignores status: no entry for it.
	r = a.Do("PATCH", w+"?fieldManager=sneaky", "application/merge-patch+json", []byte(`{"status":{"replicas":5}}`))
	servertest.MustCode(t, "status through the main resource", r, http.StatusOK)
	if got := servertest.Entries(t, r); len(got) != 3 {
		t.Errorf("entries after a status change through the main resource: %v", got)
	}
	if servertest.RVOf(t, r) == rv {
		t.Errorf("the status patch did not write")
	}
	rv = servertest.RVOf(t, r)
	r = a.Do("PATCH", w+"?fieldManager=editor", "application/merge-patch+json", []byte(`{"spec":{"image":"nginx"}}`))
	if servertest.RVOf(t, r) != rv {
		t.Errorf("a patch that changes nothing wrote (resourceVersion %s, was %s)", servertest.RVOf(t, r), rv)
	}

	// Undecodable managedFields are replaced by the live ones.
	r = a.Do("PATCH", w+"?fieldManager=editor", "application/merge-patch+json", []byte(`{"metadata":{"managedFields":[{"manager":"x","operation":"Bogus","fieldsType":"FieldsV1","fieldsV1":{}}]},"spec":{"image":"busybox"}}`))
	servertest.MustCode(t, "invalid managedFields", r, http.StatusOK)
	if got := servertest.Entries(t, r); len(got) != 3 || !strings.HasPrefix(got[2], "editor/Update") {
		t.Errorf("entries after an update with invalid managedFields: %v", got)
	}
	// A list of one empty entry strips them all; an object without them
	// is not tracked again until an apply (kube-apiserver's
	// skip-non-applied manager).
	r = a.Do("PATCH", w+"?fieldManager=editor", "application/merge-patch+json", []byte(`{"metadata":{"managedFields":[{}]},"spec":{"image":"redis"}}`))
	servertest.MustCode(t, "reset", r, http.StatusOK)
	servertest.WantEntries(t, "reset", r)
	r = a.Do("PATCH", w+"?fieldManager=editor", "application/merge-patch+json", []byte(`{"spec":{"image":"nginx"}}`))
	servertest.WantEntries(t, "update after the reset", r)
	// The first apply then finds every field owned by before-first-apply.
	r = a.Do("PATCH", w+"?fieldManager=applier", servertest.ApplyType, []byte(servertest.Widget("w", `"replicas":2`)))
	if r.Code != http.StatusConflict || !strings.Contains(r.Status().Message, `conflict with "before-first-apply"`) {
		t.Errorf("first apply after the reset = %d %s, want a conflict with before-first-apply", r.Code, servertest.Truncate(r.Body))
	}
	r = a.Do("PATCH", w+"?fieldManager=applier&force=true", servertest.ApplyType, []byte(servertest.Widget("w", `"replicas":2`)))
	servertest.MustCode(t, "forced apply after the reset", r, http.StatusOK)
	if got := servertest.Entries(t, r); len(got) != 2 || got[0] != `applier/Apply scale.objwatch.io/v1 {"f:spec":{"f:replicas":{}}}` || !strings.HasPrefix(got[1], "before-first-apply/Update") {
		t.Errorf("entries after the first apply: %v", got)
	}
}

const listMapCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"routers.ssa.objwatch.io"},
 "spec":{"group":"ssa.objwatch.io","scope":"Namespaced",
  "names":{"plural":"routers","singular":"router","kind":"Router","listKind":"RouterList"},
  "versions":[{"name":"v1","served":true,"storage":true,"subresources":{"status":{}},
   "schema":{"openAPIV3Schema":{"type":"object","properties":{
    "spec":{"type":"object","properties":{
     "ports":{"type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["name"],
      "items":{"type":"object","required":["name"],"properties":{"name":{"type":"string"},"port":{"type":"integer"}}}},
     "tags":{"type":"array","x-kubernetes-list-type":"set","items":{"type":"string"}},
     "config":{"type":"object","x-kubernetes-map-type":"atomic","additionalProperties":{"type":"string"}}}},
    "status":{"type":"object","properties":{"ready":{"type":"boolean"}}}}}}}]}}`

const routers = "/apis/ssa.objwatch.io/v1/namespaces/default/routers"

// startRouters starts a server serving listMapCRD's routers.
func startRouters(t *testing.T) *servertest.API {
	t.Helper()
	a := servertest.NewAPI(t, testenv.Start(t))
	servertest.MustCode(t, "create CRD", a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", listMapCRD), http.StatusCreated)
	deadline := time.Now().Add(10 * time.Second)
	for a.JSON("GET", routers, "").Code != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("routers not served")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return a
}

func router(spec string) []byte {
	return []byte(`{"apiVersion":"ssa.objwatch.io/v1","kind":"Router","metadata":{"name":"r"},"spec":` + spec + `}`)
}

// TestApplyCustomResource: two managers applying items of a
// x-kubernetes-list-type=map list (and of a set) own their items and
// merge; an atomic map is replaced whole, its owner changed; status is
// applied through /status only; duplicate list-map keys are refused.
func TestApplyCustomResource(t *testing.T) {
	a := startRouters(t)
	r := a.Do("PATCH", routers+"/r?fieldManager=a", servertest.ApplyType, router(`{"ports":[{"name":"http","port":80}],"tags":["x"],"config":{"k":"v"}}`))
	servertest.MustCode(t, "apply a", r, http.StatusCreated)
	r = a.Do("PATCH", routers+"/r?fieldManager=b", servertest.ApplyType, router(`{"ports":[{"name":"https","port":443}],"tags":["y"]}`))
	servertest.MustCode(t, "apply b", r, http.StatusOK)
	spec := r.Object()["spec"].(map[string]any)
	if got, _ := json.Marshal(spec["ports"]); string(got) != `[{"name":"http","port":80},{"name":"https","port":443}]` {
		t.Errorf("ports = %s", got)
	}
	if got, _ := json.Marshal(spec["tags"]); string(got) != `["x","y"]` {
		t.Errorf("tags = %s", got)
	}
	servertest.WantEntries(t, "a and b", r,
		`a/Apply ssa.objwatch.io/v1 {"f:spec":{"f:config":{},"f:ports":{"k:{\"name\":\"http\"}":{".":{},"f:name":{},"f:port":{}}},"f:tags":{"v:\"x\"":{}}}}`,
		`b/Apply ssa.objwatch.io/v1 {"f:spec":{"f:ports":{"k:{\"name\":\"https\"}":{".":{},"f:name":{},"f:port":{}}},"f:tags":{"v:\"y\"":{}}}}`)

	r = a.Do("PATCH", routers+"/r?fieldManager=b", servertest.ApplyType, router(`{"ports":[{"name":"http","port":8080}]}`))
	servertest.MustCode(t, "b takes a's port", r, http.StatusConflict)
	if m := r.Status().Message; m != `Apply failed with 1 conflict: conflict with "a": .spec.ports[name="http"].port` {
		t.Errorf("conflict message %q", m)
	}
	// b's items it no longer applies are gone; a's stay.
	r = a.Do("PATCH", routers+"/r?fieldManager=b", servertest.ApplyType, router(`{"config":{"other":"w"}}`))
	servertest.MustCode(t, "b takes the atomic map", r, http.StatusConflict)
	r = a.Do("PATCH", routers+"/r?fieldManager=b&force=true", servertest.ApplyType, router(`{"config":{"other":"w"}}`))
	servertest.MustCode(t, "b forces the atomic map", r, http.StatusOK)
	spec = r.Object()["spec"].(map[string]any)
	if got, _ := json.Marshal(spec); string(got) != `{"config":{"other":"w"},"ports":[{"name":"http","port":80}],"tags":["x"]}` {
		t.Errorf("spec = %s", got)
	}

	r = a.Do("PATCH", routers+"/r/status?fieldManager=ctrl", servertest.ApplyType, []byte(`{"apiVersion":"ssa.objwatch.io/v1","kind":"Router","metadata":{"name":"r"},"status":{"ready":true}}`))
	servertest.MustCode(t, "status apply", r, http.StatusOK)
	if e := servertest.ManagedEntries(t, r); e[len(e)-1].Subresource != "status" || e[len(e)-1].Manager != "ctrl" {
		t.Errorf("status apply entries %v", servertest.Entries(t, r))
	}
	r = a.Do("PATCH", routers+"/missing/status?fieldManager=ctrl", servertest.ApplyType, []byte(`{"apiVersion":"ssa.objwatch.io/v1","kind":"Router","metadata":{"name":"missing"},"status":{"ready":true}}`))
	servertest.MustCode(t, "status apply to a missing object", r, http.StatusNotFound)

	r = a.Do("PATCH", routers+"/d?fieldManager=a", servertest.ApplyType, []byte(`{"apiVersion":"ssa.objwatch.io/v1","kind":"Router","metadata":{"name":"d"},"spec":{"ports":[{"name":"http","port":80},{"name":"http","port":81}]}}`))
	servertest.MustCode(t, "duplicate list-map keys", r, http.StatusInternalServerError)
	if m := r.Status().Message; !strings.Contains(m, `duplicate entries for key [name="http"]`) {
		t.Errorf("duplicate keys message %q", m)
	}
	servertest.MustCode(t, "nothing created", a.JSON("GET", routers+"/d", ""), http.StatusNotFound)
}

// TestApplyBadInput: Kubernetes' answers to applies it refuses; none
// writes anything. A dry run answers as the apply would and writes
// nothing.
func TestApplyBadInput(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	good := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\ndata:\n  k: v\n"
	tests := []struct {
		name, query, ctype, body string
		code                     int
		msg                      string
	}{
		{"no fieldManager", "", servertest.ApplyType, good, 422, `PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch`},
		{"force on a merge patch", "?fieldManager=m&force=true", "application/merge-patch+json", `{}`, 422, `PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch`},
		{"wrong kind", "?fieldManager=m", servertest.ApplyType, strings.Replace(good, "ConfigMap", "Secret", 1), 400, "invalid object type: /v1, Kind=Secret"},
		{"wrong apiVersion", "?fieldManager=m", servertest.ApplyType, strings.Replace(good, "v1", "apps/v1", 1), 400, "invalid object type: apps/v1, Kind=ConfigMap"},
		{"managedFields", "?fieldManager=m", servertest.ApplyType, strings.Replace(good, "name: bad", "name: bad\n  managedFields: []", 1), 400, "metadata.managedFields must be nil"},
		{"not YAML", "?fieldManager=m", servertest.ApplyType, "a: [b\n", 400, "error encoding patch: yaml: line 1: did not find expected ',' or ']'"},
		{"other namespace", "?fieldManager=m", servertest.ApplyType, strings.Replace(good, "name: bad", "name: bad\n  namespace: other", 1), 400, "the namespace of the provided object does not match the namespace sent on the request"},
		{"other name", "?fieldManager=m", servertest.ApplyType, strings.Replace(good, "name: bad", "name: other", 1), 400, "the name of the object (other) does not match the name on the URL (bad)"},
		{"undeclared field", "?fieldManager=m", servertest.ApplyType, good + "spec: {}\n", 500, "failed to create typed patch object (/bad; /v1, Kind=ConfigMap): .spec: field not declared in schema"},
		{"YAML sent as CBOR", "?fieldManager=m", "application/apply-patch+cbor", good, 400, "error decoding patch"},
		{"no name", "?fieldManager=m", servertest.ApplyType, strings.Replace(good, "  name: bad\n", "", 1), 400, "the name of the object (bad based on URL) was undeterminable: name must be provided"},
		{"not an object", "?fieldManager=m", servertest.ApplyType, "[1]", 400, "error decoding patch: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal array into Go value of type map[string]interface {}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := a.Do("PATCH", servertest.CMs+"/bad"+tc.query, tc.ctype, []byte(tc.body))
			if r.Code != tc.code || !strings.Contains(r.Status().Message, tc.msg) {
				t.Errorf("= %d %q, want %d with %q", r.Code, r.Status().Message, tc.code, tc.msg)
			}
			servertest.MustCode(t, "nothing written", a.JSON("GET", servertest.CMs+"/bad", ""), http.StatusNotFound)
		})
	}

	r := a.Do("PATCH", servertest.CMs+"/bad?fieldManager=m&dryRun=All", servertest.ApplyType, []byte(good))
	servertest.MustCode(t, "dry-run create", r, http.StatusCreated)
	servertest.WantEntries(t, "dry-run create", r, `m/Apply v1 {"f:data":{"f:k":{}}}`)
	servertest.MustCode(t, "nothing written by the dry run", a.JSON("GET", servertest.CMs+"/bad", ""), http.StatusNotFound)
	rv := servertest.RVOf(t, a.Do("PATCH", servertest.CMs+"/bad?fieldManager=m", servertest.ApplyType, []byte(good)))
	r = a.Do("PATCH", servertest.CMs+"/bad?fieldManager=m&dryRun=All", servertest.ApplyType, []byte(strings.Replace(good, "k: v", "k: w", 1)))
	servertest.MustCode(t, "dry-run change", r, http.StatusOK)
	if got := a.JSON("GET", servertest.CMs+"/bad", ""); servertest.RVOf(t, got) != rv || !strings.Contains(string(got.Body), `"k":"v"`) {
		t.Errorf("the dry run changed the object: %s", servertest.Truncate(got.Body))
	}
}

// TestUnknownFieldsOfCustomResourcesTracked: a create or update of a
// custom resource with fields its schema does not declare (pruned, with a
// warning) records its managedFields as kube-apiserver does, which tracks
// the decoded and pruned object: the declared fields it set, nothing of
// the unknown ones. (The field manager used to refuse such an object and
// the write went without an entry: none on a create, the last one kept on
// an update.) A client's own managedFields sent beside unknown fields are
// treated as they are without them.
func TestUnknownFieldsOfCustomResourcesTracked(t *testing.T) {
	a := startRouters(t)
	r := a.Do("POST", routers+"?fieldManager=maker", "application/json", router(`{"tags":["x"],"bogus":1}`))
	servertest.MustCode(t, "create with an unknown field", r, http.StatusCreated)
	if w := r.Header.Get("Warning"); !strings.Contains(w, `unknown field \"spec.bogus\"`) {
		t.Errorf("create warning %q, want one for spec.bogus", w)
	}
	maker := `maker/Update ssa.objwatch.io/v1 {"f:spec":{".":{},"f:tags":{".":{},"v:\"x\"":{}}}}`
	servertest.WantEntries(t, "create", r, maker)

	obj := r.Object()
	spec := obj["spec"].(map[string]any)
	spec["config"] = map[string]any{"k": "v"}
	spec["other"] = "x"
	body, _ := json.Marshal(obj)
	r = a.Do("PUT", routers+"/r?fieldManager=editor", "application/json", body)
	servertest.MustCode(t, "update with an unknown field", r, http.StatusOK)
	servertest.WantEntries(t, "update", r, `editor/Update ssa.objwatch.io/v1 {"f:spec":{"f:config":{}}}`, maker)

	// managedFields sent by the client: the same entries with an unknown
	// field as without.
	sent := func(name, extra string) []byte {
		return []byte(`{"apiVersion":"ssa.objwatch.io/v1","kind":"Router","metadata":{"name":"` + name + `","managedFields":[` +
			`{"manager":"someone","operation":"Apply","apiVersion":"ssa.objwatch.io/v1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:tags":{}}}}]},` +
			`"spec":{"tags":["y"]` + extra + `}}`)
	}
	plain := a.Do("POST", routers+"?fieldManager=maker", "application/json", sent("plain", ""))
	servertest.MustCode(t, "create with managedFields", plain, http.StatusCreated)
	r = a.Do("POST", routers+"?fieldManager=maker", "application/json", sent("unknown", `,"bogus":2`))
	servertest.MustCode(t, "create with managedFields and an unknown field", r, http.StatusCreated)
	want := servertest.Entries(t, plain)
	if len(want) == 0 {
		t.Fatal("no managedFields on the create without an unknown field")
	}
	servertest.WantEntries(t, "sent", r, want...)
}
