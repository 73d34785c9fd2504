package endpoints_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

const (
	asPartial     = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
	asPartialList = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
)

// TestPartialObjectMetadata: objects and lists as PartialObjectMetadata
// and PartialObjectMetadataList on get, list, watch and writes, and
// kube-apiserver's answers (asked of v1.37.2) when the conversion does not
// fit or is unknown.
func TestPartialObjectMetadata(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	servertest.MustCode(t, "create", a.JSON("POST", servertest.CMs, servertest.CM("p1", `,"labels":{"a":"b"}`)), http.StatusCreated)

	r := a.Accept("GET", servertest.CMs+"/p1", asPartial, "", nil)
	servertest.MustCode(t, "get", r, http.StatusOK)
	o := r.Object()
	md, _ := o["metadata"].(map[string]any)
	if o["kind"] != "PartialObjectMetadata" || o["apiVersion"] != "meta.k8s.io/v1" || o["data"] != nil || md["name"] != "p1" || md["managedFields"] == nil {
		t.Errorf("get as PartialObjectMetadata: %s", r.Body)
	}
	r = a.Accept("GET", servertest.CMs+"/p1", strings.Replace(asPartial, "v=v1", "v=v1beta1", 1), "", nil)
	if r.Object()["apiVersion"] != "meta.k8s.io/v1beta1" {
		t.Errorf("get as v1beta1: %s", r.Body)
	}
	// The protobuf clause first, as client-go's metadata client sends it:
	// answered in protobuf, as kube-apiserver answers it.
	r = a.Accept("GET", servertest.CMs, "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"+asPartialList+",application/json", "", nil)
	servertest.MustCode(t, "list", r, http.StatusOK)
	pl := &metav1.PartialObjectMetadataList{}
	decodeWire(t, r, protobufType, pl)
	if pl.Kind != "PartialObjectMetadataList" || pl.APIVersion != "meta.k8s.io/v1" || pl.ResourceVersion == "" || len(pl.Items) != 1 || pl.Items[0].Name != "p1" {
		t.Errorf("list as PartialObjectMetadataList in protobuf: %+v", pl)
	}
	r = a.Accept("GET", servertest.CMs, asPartialList, "", nil)
	var l struct {
		Kind, APIVersion string
		Metadata         struct{ ResourceVersion string }
		Items            []map[string]any
	}
	json.Unmarshal(r.Body, &l)
	if l.Kind != "PartialObjectMetadataList" || l.APIVersion != "meta.k8s.io/v1" || l.Metadata.ResourceVersion == "" || len(l.Items) != 1 ||
		l.Items[0]["kind"] != "PartialObjectMetadata" || l.Items[0]["data"] != nil {
		t.Errorf("list as PartialObjectMetadataList: %s", r.Body)
	}
	r = a.Accept("POST", servertest.CMs, asPartial, "application/json", []byte(servertest.CM("p2", "")))
	servertest.MustCode(t, "create as PartialObjectMetadata", r, http.StatusCreated)
	if r.Object()["kind"] != "PartialObjectMetadata" {
		t.Errorf("create as PartialObjectMetadata: %s", r.Body)
	}

	for _, c := range []struct {
		what, method, path, accept string
		code                       int
		msg                        string
	}{
		{"object as a list", "GET", servertest.CMs + "/p1", asPartialList, 406, "you requested PartialObjectMetadataList, but the requested object is not a list (*core.ConfigMap)"},
		{"list as an object", "GET", servertest.CMs, asPartial, 406, "you requested PartialObjectMetadata, but the requested object is a list (*core.ConfigMapList)"},
		{"cluster roles as an object", "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles", asPartial, 406, "you requested PartialObjectMetadata, but the requested object is a list (*rbac.ClusterRoleList)"},
		{"unknown version", "GET", servertest.CMs + "/p1", strings.Replace(asPartial, "v=v1", "v=v2", 1), 406, "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/cbor"},
		{"unknown kind, before a create", "POST", servertest.CMs, "application/json;as=Foo;g=meta.k8s.io;v=v1", 406, "only the following media types are accepted"},
	} {
		r := a.Accept(c.method, c.path, c.accept, "application/json", []byte(servertest.CM("p3", "")))
		if r.Code != c.code || !strings.Contains(r.Status().Message, c.msg) || r.Status().Reason != "NotAcceptable" {
			t.Errorf("%s: %d %s, want %d %q", c.what, r.Code, r.Body, c.code, c.msg)
		}
	}
	servertest.MustCode(t, "nothing created by the refused create", a.JSON("GET", servertest.CMs+"/p3", ""), http.StatusNotFound)

	// Watches: PartialObjectMetadata events and bookmarks, as Kubernetes
	// sends them; a PartialObjectMetadataList watch ends with nothing.
	r = a.Accept("GET", servertest.CMs+"?watch=1&timeoutSeconds=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", asPartial, "", nil)
	servertest.MustCode(t, "watch", r, http.StatusOK)
	lines := bytes.Split(bytes.TrimSpace(r.Body), []byte("\n"))
	if len(lines) != 3 {
		t.Fatalf("watch: %s", r.Body)
	}
	for i, want := range []string{"ADDED", "ADDED", "BOOKMARK"} {
		var ev struct {
			Type   string
			Object map[string]any
		}
		json.Unmarshal(lines[i], &ev)
		if ev.Type != want || ev.Object["kind"] != "PartialObjectMetadata" || ev.Object["apiVersion"] != "meta.k8s.io/v1" || ev.Object["data"] != nil {
			t.Errorf("watch event %d: %s", i, lines[i])
		}
	}
	start := time.Now()
	r = a.Accept("GET", servertest.CMs+"?watch=1&timeoutSeconds=5", asPartialList, "", nil)
	if r.Code != 200 || len(r.Body) != 0 || time.Since(start) > 4*time.Second {
		t.Errorf("PartialObjectMetadataList watch: %d %q after %v", r.Code, r.Body, time.Since(start))
	}
}

// TestYAMLResponses: a client that asks for application/yaml gets objects,
// lists, Tables, PartialObjectMetadata and errors in YAML, the same
// content as in JSON; a watch asked for in YAML first is refused (406, in
// YAML) even with JSON after it; an Accept header of no media type the
// server writes (text/yaml included) gets go-restful's 406 in JSON, one
// with such a type after it the answer in that type. Each as
// kube-apiserver v1.37.2 answers (asked of it).
func TestYAMLResponses(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	servertest.MustCode(t, "create", a.JSON("POST", servertest.CMs, servertest.CM("y1", `,"labels":{"a":"b"}`)), http.StatusCreated)

	fromYAML := func(what string, r servertest.Response, code int) map[string]any {
		t.Helper()
		if r.Code != code || r.Header.Get("Content-Type") != "application/yaml" {
			t.Fatalf("%s: %d %s %s, want %d in YAML", what, r.Code, r.Header.Get("Content-Type"), r.Body, code)
		}
		var m map[string]any
		if err := yaml.Unmarshal(r.Body, &m); err != nil {
			t.Fatalf("%s: %v in %s", what, err, r.Body)
		}
		return m
	}
	asJSON := a.JSON("GET", servertest.CMs+"/y1", "").Object()
	got := fromYAML("get", a.Accept("GET", servertest.CMs+"/y1", "application/yaml", "", nil), http.StatusOK)
	if !reflect.DeepEqual(got, asJSON) {
		t.Errorf("get in YAML: %v, in JSON %v", got, asJSON)
	}
	r := a.Accept("GET", servertest.CMs+"/y1", "application/yaml", "", nil)
	if !bytes.HasPrefix(r.Body, []byte("apiVersion: v1\ndata:\n  k: v\nkind: ConfigMap\nmetadata:\n")) {
		t.Errorf("get in YAML, keys not in kube-apiserver's order: %s", r.Body)
	}
	l := fromYAML("list", a.Accept("GET", servertest.CMs, "application/yaml", "", nil), http.StatusOK)
	if items, _ := l["items"].([]any); l["kind"] != "ConfigMapList" || len(items) != 1 {
		t.Errorf("list in YAML: %v", l)
	}
	tb := fromYAML("table", a.Accept("GET", servertest.CMs+"/y1", "application/yaml;as=Table;g=meta.k8s.io;v=v1", "", nil), http.StatusOK)
	if rows, _ := tb["rows"].([]any); tb["kind"] != "Table" || len(rows) != 1 {
		t.Errorf("table in YAML: %v", tb)
	}
	pm := fromYAML("partial", a.Accept("GET", servertest.CMs+"/y1", "application/yaml;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", "", nil), http.StatusOK)
	if pm["kind"] != "PartialObjectMetadata" || pm["data"] != nil {
		t.Errorf("PartialObjectMetadata in YAML: %v", pm)
	}
	created := fromYAML("create", a.Accept("POST", servertest.CMs, "application/yaml", "application/json", []byte(servertest.CM("y2", ""))), http.StatusCreated)
	if md, _ := created["metadata"].(map[string]any); md["name"] != "y2" || md["uid"] == nil {
		t.Errorf("create in YAML: %v", created)
	}
	missing := fromYAML("missing", a.Accept("GET", servertest.CMs+"/nope", "application/yaml", "", nil), http.StatusNotFound)
	if missing["kind"] != "Status" || missing["reason"] != "NotFound" || missing["message"] != `configmaps "nope" not found` {
		t.Errorf("404 in YAML: %v", missing)
	}

	for _, accept := range []string{"application/yaml", "application/yaml, application/json;q=0.5", "application/json;q=0.5, application/yaml"} {
		s := fromYAML("watch "+accept, a.Accept("GET", servertest.CMs+"?watch=true&timeoutSeconds=1", accept, "", nil), http.StatusNotAcceptable)
		if s["reason"] != "NotAcceptable" || s["message"] != "only the following media types are accepted: application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch, application/cbor-seq" {
			t.Errorf("watch asked for as %q: %v", accept, s)
		}
	}
	r = a.Accept("GET", servertest.CMs+"?watch=true&timeoutSeconds=1", "application/json, application/yaml", "", nil)
	if r.Code != http.StatusOK || !bytes.Contains(r.Body, []byte(`"type":"ADDED"`)) {
		t.Errorf("watch asked for in JSON, then YAML: %d %s", r.Code, servertest.Truncate(r.Body))
	}

	for _, accept := range []string{"text/yaml", "application/x-yaml", "foo/bar"} {
		r := a.Accept("GET", servertest.CMs+"/y1", accept, "", nil)
		if r.Code != http.StatusNotAcceptable || r.Header.Get("Content-Type") != "application/json" ||
			r.Status().Message != "406: Not Acceptable\n\nAvailable representations: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/cbor" {
			t.Errorf("GET with Accept %q: %d %s %s, want kube-apiserver's 406 in JSON", accept, r.Code, r.Header.Get("Content-Type"), r.Body)
		}
	}
	servertest.MustCode(t, "a create refused for its Accept header", a.Accept("POST", servertest.CMs, "text/yaml", "application/json", []byte(servertest.CM("y3", ""))), http.StatusNotAcceptable)
	servertest.MustCode(t, "nothing created", a.JSON("GET", servertest.CMs+"/y3", ""), http.StatusNotFound)
	if r := a.Accept("GET", servertest.CMs+"/y1", "foo/bar, application/json", "", nil); r.Code != http.StatusOK || r.Object()["kind"] != "ConfigMap" {
		t.Errorf("GET with Accept foo/bar, then JSON: %d %s", r.Code, r.Body)
	}

	// Discovery documents: YAML too; kube-apiserver's own 406 for /api,
	// /apis and a group, go-restful's for a group version.
	const (
		own       = "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
		goRestful = "406: Not Acceptable\n\nAvailable representations: application/json, application/yaml, application/vnd.kubernetes.protobuf"
	)
	for _, c := range []struct{ path, kind, refusal string }{
		{"/api", "APIVersions", own}, {"/apis", "APIGroupList", own}, {"/apis/rbac.authorization.k8s.io", "APIGroup", own},
		{"/api/v1", "APIResourceList", goRestful}, {"/apis/rbac.authorization.k8s.io/v1", "APIResourceList", goRestful},
	} {
		if d := fromYAML(c.path, a.Accept("GET", c.path, "application/yaml, application/json", "", nil), http.StatusOK); d["kind"] != c.kind {
			t.Errorf("%s in YAML: %v", c.path, d)
		}
		if r := a.Accept("GET", c.path, "application/json, application/yaml", "", nil); r.Code != http.StatusOK || r.Object()["kind"] != c.kind {
			t.Errorf("%s in JSON: %d %s", c.path, r.Code, servertest.Truncate(r.Body))
		}
		if r := a.Accept("GET", c.path, "text/yaml", "", nil); r.Code != http.StatusNotAcceptable || r.Status().Message != c.refusal {
			t.Errorf("%s with Accept text/yaml: %d %s, want 406 %q", c.path, r.Code, r.Body, c.refusal)
		}
	}
}

// TestPrettyPrint: JSON answers are indented as kube-apiserver indents
// them for pretty=true and, without the parameter, for curl, Wget and
// browsers; pretty=false and other clients get them compact. The content
// is the same.
func TestPrettyPrint(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	servertest.MustCode(t, "create", a.JSON("POST", servertest.CMs, servertest.CM("p1", "")), http.StatusCreated)
	compact := a.JSON("GET", servertest.CMs+"/p1", "")
	get := func(query, agent string) servertest.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", a.Host+servertest.CMs+"/p1"+query, nil)
		if agent != "" {
			req.Header.Set("User-Agent", agent)
		}
		resp, err := a.C.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return servertest.Response{Code: resp.StatusCode, Body: b, Header: resp.Header}
	}
	for _, c := range []struct {
		query, agent string
		pretty       bool
	}{
		{"?pretty=true", "", true}, {"?pretty=1", "kubectl/v1.37.2", true}, {"", "curl/8.5.0", true}, {"", "Wget/1.21", true},
		{"", "Mozilla/5.0 (X11; Linux x86_64)", true}, {"?pretty=false", "curl/8.5.0", false}, {"", "Go-http-client/2.0", false},
	} {
		r := get(c.query, c.agent)
		if r.Code != http.StatusOK || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Content-Length") != strconv.Itoa(len(r.Body)) {
			t.Fatalf("GET%s as %q: %d %v %s", c.query, c.agent, r.Code, r.Header, r.Body)
		}
		if indented := bytes.HasPrefix(r.Body, []byte("{\n  \"")); indented != c.pretty || !jsonEqualBodies(r.Body, compact.Body) {
			t.Errorf("GET%s as %q: indented %v, want %v; %s", c.query, c.agent, indented, c.pretty, servertest.Truncate(r.Body))
		}
	}
}

func jsonEqualBodies(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}
