package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/testenv"
)

func TestBuiltinResources(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	tests := []struct {
		name, path, body string
	}{
		{"namespace", "/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a"}}`},
		{"configmap", "/api/v1/namespaces/default/configmaps", `{"metadata":{"name":"c"},"data":{"a":"b"}}`},
		{"secret", "/api/v1/namespaces/default/secrets", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"type":"Opaque","data":{"a":"Yg=="}}`},
		{"event", "/api/v1/namespaces/default/events", `{"apiVersion":"v1","kind":"Event","metadata":{"name":"e"},"involvedObject":{"kind":"ConfigMap","name":"c","namespace":"default"},"reason":"Tested","type":"Normal"}`},
		{"lease", "/apis/coordination.k8s.io/v1/namespaces/default/leases", `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l"},"spec":{"holderIdentity":"me","leaseDurationSeconds":10}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := a.json("POST", tc.path, tc.body)
			if r.code != 201 {
				t.Fatalf("create = %d %s", r.code, r.body)
			}
			md := r.object()["metadata"].(map[string]any)
			if md["uid"] == "" || md["creationTimestamp"] == nil || md["resourceVersion"] == "" {
				t.Fatalf("created metadata = %v, want uid, creationTimestamp, resourceVersion", md)
			}
			name := md["name"].(string)
			if g := a.json("GET", tc.path+"/"+name, ""); g.code != 200 {
				t.Fatalf("get = %d %s", g.code, g.body)
			}
		})
	}
	for _, q := range []struct{ path, selector, want string }{
		{"/api/v1/namespaces/default/secrets", "type%3DOpaque", `"name":"s"`},
		{"/api/v1/namespaces/default/events", "involvedObject.name%3Dc,reason%3DTested", `"name":"e"`},
		{"/api/v1/namespaces", "status.phase%3DActive,metadata.name%3Dteam-a", `"name":"team-a"`},
	} {
		r := a.json("GET", q.path+"?fieldSelector="+q.selector, "")
		if r.code != 200 || !strings.Contains(string(r.body), q.want) {
			t.Fatalf("GET %s?fieldSelector=%s = %d %s, want %s", q.path, q.selector, r.code, truncate(r.body), q.want)
		}
	}
	// Default namespaces exist.
	for _, ns := range []string{"default", "kube-system"} {
		if r := a.json("GET", "/api/v1/namespaces/"+ns, ""); r.code != 200 {
			t.Fatalf("namespace %s = %d", ns, r.code)
		}
	}
	// Generated names.
	r := a.json("POST", "/api/v1/namespaces/default/configmaps", `{"metadata":{"generateName":"gen-"}}`)
	if name := r.object()["metadata"].(map[string]any)["name"].(string); r.code != 201 || !strings.HasPrefix(name, "gen-") || len(name) != 9 {
		t.Fatalf("generateName created %d %q", r.code, name)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	env := testenv.Start(t)
	anon := &http.Client{Transport: env.HTTPClient().Transport}
	for _, p := range []string{"/healthz", "/livez", "/readyz"} {
		resp, err := anon.Get(env.Config.Host + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("GET %s = %d %q", p, resp.StatusCode, b)
		}
	}
	a := newAPI(t, env)
	a.json("GET", "/api/v1/namespaces/default/configmaps", "")
	w, err := a.c.Get(env.Config.Host + "/api/v1/namespaces/default/configmaps?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Body.Close()
	m := string(a.json("GET", "/metrics", "").body)
	for _, want := range []string{
		`objwatch_apiserver_requests_total{code="200",group="",resource="configmaps",subresource="",verb="list",version="v1"}`,
		`objwatch_apiserver_request_duration_seconds_bucket{group="",resource="configmaps"`,
		`objwatch_etcd_request_duration_seconds_count{operation="list"}`,
		`objwatch_apiserver_open_watches{group="",resource="configmaps"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
