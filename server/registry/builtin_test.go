package registry_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

func TestBuiltinResources(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
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
			r := a.JSON("POST", tc.path, tc.body)
			if r.Code != 201 {
				t.Fatalf("create = %d %s", r.Code, r.Body)
			}
			md := r.Object()["metadata"].(map[string]any)
			if md["uid"] == "" || md["creationTimestamp"] == nil || md["resourceVersion"] == "" {
				t.Fatalf("created metadata = %v, want uid, creationTimestamp, resourceVersion", md)
			}
			name := md["name"].(string)
			if g := a.JSON("GET", tc.path+"/"+name, ""); g.Code != 200 {
				t.Fatalf("get = %d %s", g.Code, g.Body)
			}
		})
	}
	for _, q := range []struct{ path, selector, want string }{
		{"/api/v1/namespaces/default/secrets", "type%3DOpaque", `"name":"s"`},
		{"/api/v1/namespaces/default/events", "involvedObject.name%3Dc,reason%3DTested", `"name":"e"`},
		{"/api/v1/namespaces", "status.phase%3DActive,metadata.name%3Dteam-a", `"name":"team-a"`},
	} {
		r := a.JSON("GET", q.path+"?fieldSelector="+q.selector, "")
		if r.Code != 200 || !strings.Contains(string(r.Body), q.want) {
			t.Fatalf("GET %s?fieldSelector=%s = %d %s, want %s", q.path, q.selector, r.Code, servertest.Truncate(r.Body), q.want)
		}
	}
	// Default namespaces exist.
	for _, ns := range []string{"default", "kube-system"} {
		if r := a.JSON("GET", "/api/v1/namespaces/"+ns, ""); r.Code != 200 {
			t.Fatalf("namespace %s = %d", ns, r.Code)
		}
	}
	// Generated names.
	r := a.JSON("POST", "/api/v1/namespaces/default/configmaps", `{"metadata":{"generateName":"gen-"}}`)
	if name := r.Object()["metadata"].(map[string]any)["name"].(string); r.Code != 201 || !strings.HasPrefix(name, "gen-") || len(name) != 9 {
		t.Fatalf("generateName created %d %q", r.Code, name)
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
	a := servertest.NewAPI(t, env)
	a.JSON("GET", "/api/v1/namespaces/default/configmaps", "")
	w, err := a.C.Get(env.Config.Host + "/api/v1/namespaces/default/configmaps?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Body.Close()
	m := string(a.JSON("GET", "/metrics", "").Body)
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
