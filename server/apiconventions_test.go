package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

func TestBadInputGetsStatusAndWritesNothing(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	big := strings.Repeat("x", 3<<20)
	tests := []struct {
		name, method, path, ctype, body string
		code                            int
		reason                          metav1.StatusReason
		msg                             string
	}{
		{"malformed json", "POST", servertest.CMs, "application/json", `{"apiVersion":`, 400, metav1.StatusReasonBadRequest, "malformed"},
		{"not an object", "POST", servertest.CMs, "application/json", `[1,2]`, 400, metav1.StatusReasonBadRequest, "not a JSON object"},
		{"malformed yaml", "POST", servertest.CMs, "application/yaml", "a: [b\n", 400, metav1.StatusReasonBadRequest, "YAML"},
		// kube-apiserver v1.37.2's words for a built-in kind (asked of it).
		// (kube-apiserver words core v2, a version its scheme does not know,
		// as an unregistered kind; README, known gaps.)
		{"wrong apiVersion", "POST", servertest.CMs, "application/json", `{"apiVersion":"v2","kind":"ConfigMap","metadata":{"name":"a"}}`, 400, metav1.StatusReasonBadRequest,
			"the API version in the data (v2) does not match the expected API version (v1)"},
		{"unknown kind", "POST", servertest.CMs, "application/json", `{"apiVersion":"v1","kind":"Foo","metadata":{"name":"a"}}`, 400, metav1.StatusReasonBadRequest,
			`Foo in version "v1" cannot be handled as a ConfigMap: no kind "Foo" is registered for version "v1" in scheme "pkg/runtime/scheme.go:111"`},
		{"wrong kind", "POST", servertest.CMs, "application/json", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"a"}}`, 400, metav1.StatusReasonBadRequest,
			`Secret in version "v1" cannot be handled as a ConfigMap: converting (v1.Secret) to (core.ConfigMap): unknown conversion`},
		{"kind of another group", "PUT", servertest.CMs + "/a", "application/json", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a"}}`, 400, metav1.StatusReasonBadRequest,
			`Deployment in version "v1" cannot be handled as a ConfigMap: converting (v1.Deployment) to (core.ConfigMap): unknown conversion`},
		{"another version of the kind", "POST", "/apis/apps/v1/namespaces/default/deployments", "application/json", `{"apiVersion":"apps/v1beta1","kind":"Deployment","metadata":{"name":"a"}}`, 400, metav1.StatusReasonBadRequest,
			"the API version in the data (apps/v1beta1) does not match the expected API version (apps/v1)"},
		{"a Role as a ClusterRole", "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", "application/json", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"a"}}`, 400, metav1.StatusReasonBadRequest,
			`Role in version "v1" cannot be handled as a ClusterRole: converting (v1.Role) to (rbac.ClusterRole): unknown conversion`},
		{"namespace mismatch", "POST", servertest.CMs, "application/json", servertest.CM("a", `,"namespace":"other"`), 400, metav1.StatusReasonBadRequest, "does not match the namespace"},
		{"name mismatch", "PUT", servertest.CMs + "/a", "application/json", servertest.CM("b", ""), 400, metav1.StatusReasonBadRequest, "does not match the name on the URL"},
		{"invalid name", "POST", servertest.CMs, "application/json", servertest.CM("Not_Valid", ""), 422, metav1.StatusReasonInvalid, "metadata.name"},
		{"missing name", "POST", servertest.CMs, "application/json", `{"apiVersion":"v1","kind":"ConfigMap"}`, 422, metav1.StatusReasonInvalid, "name or generateName is required"},
		{"invalid data key", "POST", servertest.CMs, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"bad key":"v"}}`, 422, metav1.StatusReasonInvalid, "data[bad key]"},
		{"wrong field type", "POST", servertest.CMs, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":5}`, 400, metav1.StatusReasonBadRequest, ""},
		{"unknown resource", "GET", "/api/v1/namespaces/default/nothings", "", "", 404, metav1.StatusReasonNotFound, ""},
		{"unknown version", "GET", "/apis/coordination.k8s.io/v9/leases", "", "", 404, metav1.StatusReasonNotFound, ""},
		{"body too large", "POST", servertest.CMs, "application/json", servertest.CM("a", "") + big, 413, metav1.StatusReasonRequestEntityTooLarge, ""},
		{"unknown content type", "POST", servertest.CMs, "text/plain", servertest.CM("a", ""), 415, metav1.StatusReasonUnsupportedMediaType, ""},
		{"bad label selector", "GET", servertest.CMs + "?labelSelector=a%20in%20(", "", "", 400, metav1.StatusReasonBadRequest, ""},
		// kube-apiserver v1.37.2's words (asked of it): its default field
		// label conversion for a kind without labels of its own, the
		// kind's own conversion otherwise.
		{"bad field selector", "GET", servertest.CMs + "?fieldSelector=spec.x%3D1", "", "", 400, metav1.StatusReasonBadRequest, `"spec.x" is not a known field selector: only "metadata.name", "metadata.namespace"`},
		{"resourceVersion on create", "POST", servertest.CMs, "application/json", servertest.CM("a", `,"resourceVersion":"5"`), 500, "", "resourceVersion should not be set on objects to be created"},
		{"bad field selector of secrets", "GET", "/api/v1/namespaces/default/secrets?fieldSelector=spec.x%3D1", "", "", 400, metav1.StatusReasonBadRequest, "field label not supported: spec.x"},
		{"namespace selector of namespaces", "GET", "/api/v1/namespaces?fieldSelector=metadata.namespace%3D", "", "", 400, metav1.StatusReasonBadRequest, "field label not supported: metadata.namespace"},
		{"non-numeric resourceVersion", "GET", servertest.CMs + "?resourceVersion=abc", "", "", 400, metav1.StatusReasonBadRequest, "resource version"},
		{"namespace does not exist", "POST", "/api/v1/namespaces/missing/configmaps", "application/json", servertest.CM("a", ""), 404, metav1.StatusReasonNotFound, "namespaces \"missing\" not found"},
		{"strict unknown field", "POST", servertest.CMs + "?fieldValidation=Strict", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"bogus":1}`, 400, metav1.StatusReasonBadRequest, `unknown field "bogus"`},
		{"bad fieldValidation", "POST", servertest.CMs + "?fieldValidation=Maybe", "application/json", servertest.CM("a", ""), 422, metav1.StatusReasonInvalid, "fieldValidation: Unsupported value"},
		{"bad dryRun", "POST", servertest.CMs + "?dryRun=Some", "application/json", servertest.CM("a", ""), 422, metav1.StatusReasonInvalid, "dryRun: Unsupported value"},
		{"non-numeric limit", "GET", servertest.CMs + "?limit=ten", "", "", 400, metav1.StatusReasonBadRequest, ""},
		{"non-numeric timeoutSeconds", "GET", servertest.CMs + "?watch=1&timeoutSeconds=x", "", "", 400, metav1.StatusReasonBadRequest, ""},
		{"bad propagationPolicy", "DELETE", servertest.CMs + "/a?propagationPolicy=Sometimes", "", "", 422, metav1.StatusReasonInvalid, "propagationPolicy: Unsupported value"},
		{"non-numeric gracePeriodSeconds", "DELETE", servertest.CMs + "/a?gracePeriodSeconds=soon", "", "", 400, metav1.StatusReasonBadRequest, ""},
		{"write on a watch path", "POST", "/api/v1/watch/namespaces/default/configmaps", "application/json", servertest.CM("a", ""), 405, metav1.StatusReasonMethodNotAllowed, ""},
		{"bad patch type", "PATCH", servertest.CMs + "/a", "application/xml", `{}`, 415, metav1.StatusReasonUnsupportedMediaType, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := a.Do(tc.method, tc.path, tc.ctype, []byte(tc.body))
			s := r.Status()
			if r.Code != tc.code || s.Reason != tc.reason || s.Kind != "Status" || int(s.Code) != tc.code {
				t.Fatalf("%s %s = %d %s (%s), want %d %s", tc.method, tc.path, r.Code, s.Reason, servertest.Truncate(r.Body), tc.code, tc.reason)
			}
			if !strings.Contains(s.Message, tc.msg) {
				t.Fatalf("message %q does not contain %q", s.Message, tc.msg)
			}
		})
	}
	// What kube-apiserver accepts: a namespace selector on a cluster-scoped
	// kind without labels of its own (its objects' namespace is ""), a
	// negative limit (everything), a negative timeoutSeconds (a list
	// ignores it; a watch ends at once, with no event).
	for _, c := range []struct{ path, kind string }{
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles?fieldSelector=metadata.namespace%3D", "ClusterRoleList"},
		{servertest.CMs + "?limit=-1", "ConfigMapList"},
		{servertest.CMs + "?timeoutSeconds=-1", "ConfigMapList"},
	} {
		r := a.JSON("GET", c.path, "")
		if r.Code != http.StatusOK || r.Object()["kind"] != c.kind {
			t.Errorf("GET %s = %d %s, want a %s", c.path, r.Code, servertest.Truncate(r.Body), c.kind)
		}
	}
	if r := a.JSON("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles?fieldSelector=metadata.namespace%3Dx", ""); len(r.Object()["items"].([]any)) != 0 {
		t.Errorf("cluster roles of namespace x: %s", servertest.Truncate(r.Body))
	}
	// A DELETE whose body is not DeleteOptions deletes nothing; one in
	// YAML is read (kube-apiserver v1.37.2's answers, asked of it).
	servertest.MustCode(t, "create kept", a.JSON("POST", servertest.CMs, servertest.CM("kept", "")), http.StatusCreated)
	for _, c := range []struct{ body, msg string }{
		{`{"kind":"Foo"}`, `no kind "Foo" is registered for version "meta.k8s.io/v1" in scheme "pkg/runtime/scheme.go:111"`},
		{`{"kind":"ConfigMap","apiVersion":"v1"}`, `no kind "ConfigMap" is registered for version "v1"`},
		{`{"kind":"Status","apiVersion":"v1"}`, `converting (v1.Status) to (v1.DeleteOptions): unknown conversion`},
		{`not json`, `couldn't get version/kind; json parse error`},
	} {
		r := a.JSON("DELETE", servertest.CMs+"/kept", c.body)
		if r.Code != http.StatusBadRequest || !strings.Contains(r.Status().Message, c.msg) {
			t.Errorf("DELETE with body %s: %d %s, want 400 %q", c.body, r.Code, r.Body, c.msg)
		}
	}
	servertest.MustCode(t, "kept after the refused deletes", a.JSON("GET", servertest.CMs+"/kept", ""), http.StatusOK)
	servertest.MustCode(t, "DELETE with DeleteOptions in YAML, a dry run", a.Do("DELETE", servertest.CMs+"/kept", "application/yaml", []byte("apiVersion: v1\nkind: DeleteOptions\ndryRun: [All]\n")), http.StatusOK)
	servertest.MustCode(t, "kept after the dry run", a.JSON("GET", servertest.CMs+"/kept", ""), http.StatusOK)
	for _, c := range []struct{ pre, msg string }{
		{`{"uid":"nope"}`, `Operation cannot be fulfilled on ConfigMap "kept": the UID in the precondition (nope) does not match the UID in record (`},
		{`{"resourceVersion":"1"}`, `Operation cannot be fulfilled on ConfigMap "kept": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record (`},
	} {
		r := a.JSON("DELETE", servertest.CMs+"/kept", `{"preconditions":`+c.pre+`}`)
		if s := r.Status(); r.Code != http.StatusConflict || !strings.HasPrefix(s.Message, c.msg) || s.Details == nil || s.Details.Kind != "ConfigMap" {
			t.Errorf("DELETE with preconditions %s: %d %s, want 409 %q", c.pre, r.Code, r.Body, c.msg)
		}
	}
	// An update whose object names another uid: kube-apiserver's storage
	// takes it as a precondition (409, its words but for the key).
	r := a.JSON("PUT", servertest.CMs+"/kept", servertest.CM("kept", `,"uid":"wrong"`))
	if s := r.Status(); r.Code != http.StatusConflict || !strings.Contains(s.Message, "Precondition failed: UID in precondition: wrong, UID in object meta: ") {
		t.Errorf("PUT with another uid: %d %s", r.Code, r.Body)
	}
	// What an update may not set on a live object, nor a patch change.
	for _, c := range []struct{ method, ctype, body, msg string }{
		{"PUT", "application/json", servertest.CM("kept", `,"deletionTimestamp":"2020-01-01T00:00:00Z"`),
			`ConfigMap "kept" is invalid: metadata.deletionTimestamp: Invalid value: "2020-01-01T00:00:00Z": field is immutable`},
		{"PUT", "application/json", servertest.CM("kept", `,"deletionGracePeriodSeconds":30`),
			`ConfigMap "kept" is invalid: metadata.deletionGracePeriodSeconds: Invalid value: 30: field is immutable`},
		{"PATCH", "application/merge-patch+json", `{"metadata":{"uid":"x","deletionTimestamp":"2020-01-01T00:00:00Z"}}`,
			`ConfigMap "kept" is invalid: [metadata.uid: Invalid value: "x": field is immutable, metadata.deletionTimestamp: Invalid value: "2020-01-01T00:00:00Z": field is immutable]`},
		// The same check serves every update: a server-side apply too.
		{"PATCH", "application/apply-patch+yaml", servertest.CM("kept", `,"deletionGracePeriodSeconds":30`),
			`ConfigMap "kept" is invalid: metadata.deletionGracePeriodSeconds: Invalid value: 30: field is immutable`},
	} {
		path := servertest.CMs + "/kept"
		if c.ctype == "application/apply-patch+yaml" {
			path += "?fieldManager=t&force=true"
		}
		r := a.Do(c.method, path, c.ctype, []byte(c.body))
		if r.Code != http.StatusUnprocessableEntity || r.Status().Message != c.msg {
			t.Errorf("%s %s: %d %s, want 422 %q", c.method, c.body, r.Code, r.Body, c.msg)
		}
	}
	if md, _ := a.JSON("GET", servertest.CMs+"/kept", "").Object()["metadata"].(map[string]any); md["deletionTimestamp"] != nil || md["uid"] == "x" {
		t.Errorf("kept after the refused updates: %v", md)
	}
	servertest.MustCode(t, "DELETE kept", a.JSON("DELETE", servertest.CMs+"/kept", `{"kind":"DeleteOptions","apiVersion":"apps/v1"}`), http.StatusOK)

	// A resourceVersion on a dry-run create, or on an apply that creates,
	// is not refused (kube-apiserver's storage never sees it).
	servertest.MustCode(t, "dry-run create with a resourceVersion", a.JSON("POST", servertest.CMs+"?dryRun=All", servertest.CM("dry", `,"resourceVersion":"5"`)), http.StatusCreated)
	applied := a.Do("PATCH", servertest.CMs+"/applied?fieldManager=t", "application/apply-patch+yaml", []byte(servertest.CM("applied", `,"resourceVersion":"5"`)))
	servertest.MustCode(t, "apply that creates, with a resourceVersion", applied, http.StatusCreated)
	servertest.MustCode(t, "delete the applied", a.JSON("DELETE", servertest.CMs+"/applied", ""), http.StatusOK)
	start := time.Now()
	if r := a.JSON("GET", servertest.CMs+"?watch=1&timeoutSeconds=-1", ""); r.Code != http.StatusOK || len(r.Body) != 0 || time.Since(start) > 5*time.Second {
		t.Errorf("a watch of timeoutSeconds=-1: %d %q after %v, want 200 at once and no event", r.Code, r.Body, time.Since(start))
	}

	// Nothing was written by any of them.
	r = a.JSON("GET", servertest.CMs, "")
	if items := r.Object()["items"].([]any); len(items) != 0 {
		t.Fatalf("configmaps after bad requests = %d, want 0", len(items))
	}
}

func TestUnauthenticatedGets401(t *testing.T) {
	env := testenv.Start(t)
	c := env.HTTPClient()
	tr := c.Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.Certificates = nil
	anon := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	for _, token := range []string{"", "wrong"} {
		req, _ := http.NewRequest("GET", env.Config.Host+"/api/v1/namespaces", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := anon.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("token %q: code = %d, want 401", token, resp.StatusCode)
		}
	}
	// Health checks and the version are public; a bad token is still 401.
	for _, tc := range []struct {
		path, token string
		code        int
	}{{"/healthz", "", 200}, {"/readyz", "", 200}, {"/version", "", 200}, {"/version", "wrong", 401}, {"/api", "", 401}} {
		req, _ := http.NewRequest("GET", env.Config.Host+tc.path, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := anon.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("GET %s (token %q) without a certificate = %d, want %d", tc.path, tc.token, resp.StatusCode, tc.code)
		}
	}
	req, _ := http.NewRequest("GET", env.Config.Host+"/api/v1/namespaces", nil)
	req.Header.Set("Authorization", "Bearer "+env.Config.BearerToken)
	resp, err := anon.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("admin token: code = %d, want 200", resp.StatusCode)
	}
}

func TestResourceVersionRules(t *testing.T) {
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.FutureRVWait = 200 * time.Millisecond }))
	a := servertest.NewAPI(t, env)
	first := servertest.RVOf(t, a.JSON("POST", servertest.CMs, servertest.CM("a", "")))
	a.JSON("PUT", servertest.CMs+"/a", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v2"}}`)
	last := servertest.RVOf(t, a.JSON("POST", servertest.CMs, servertest.CM("b", "")))
	// NotOlderThan and resourceVersion=0 may answer from a cache that has
	// not seen b yet (as in Kubernetes): wait until it has.
	waitCache(t, env, servertest.CMGVR, last)

	tests := []struct {
		name   string
		query  string
		code   int
		reason metav1.StatusReason
		items  int
	}{
		// Invalid ListOptions are 422, as kube-apiserver's option
		// validation answers.
		{"match without rv", "?resourceVersionMatch=NotOlderThan", 422, metav1.StatusReasonInvalid, 0},
		{"exact with rv 0", "?resourceVersion=0&resourceVersionMatch=Exact", 422, metav1.StatusReasonInvalid, 0},
		{"unknown match", "?resourceVersion=1&resourceVersionMatch=Sometime", 422, metav1.StatusReasonInvalid, 0},
		{"continue with rv", "?resourceVersion=5&continue=abc", 400, metav1.StatusReasonBadRequest, 0},
		{"bad continue", "?continue=!!!", 400, metav1.StatusReasonBadRequest, 0},
		{"exact old rv", "?resourceVersion=" + first + "&resourceVersionMatch=Exact", 200, "", 1},
		{"limit implies exact", "?resourceVersion=" + first + "&limit=10", 200, "", 1},
		{"not older than", "?resourceVersion=" + first + "&resourceVersionMatch=NotOlderThan", 200, "", 2},
		{"too large", "?resourceVersion=999999&resourceVersionMatch=NotOlderThan", 504, metav1.StatusReasonTimeout, 0},
		{"any", "?resourceVersion=0", 200, "", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := a.JSON("GET", servertest.CMs+tc.query, "")
			if r.Code != tc.code {
				t.Fatalf("GET %s = %d (%s), want %d", tc.query, r.Code, servertest.Truncate(r.Body), tc.code)
			}
			if tc.code != 200 {
				if s := r.Status(); s.Reason != tc.reason {
					t.Fatalf("reason = %s, want %s", s.Reason, tc.reason)
				}
				return
			}
			if n := len(r.Object()["items"].([]any)); n != tc.items {
				t.Fatalf("items = %d, want %d", n, tc.items)
			}
		})
	}
	t.Run("too large message and retry-after", func(t *testing.T) {
		r := a.JSON("GET", servertest.CMs+"?resourceVersion=999999&resourceVersionMatch=NotOlderThan", "")
		if s := r.Status(); s.Message != "Too large resource version" || r.Header.Get("Retry-After") == "" {
			t.Fatalf("status = %q retry-after %q", s.Message, r.Header.Get("Retry-After"))
		}
	})
	t.Run("get", func(t *testing.T) {
		for _, q := range []struct {
			query string
			code  int
		}{{"", 200}, {"?resourceVersion=0", 200}, {"?resourceVersion=" + first, 200}, {"?resourceVersion=999999", 504}, {"?resourceVersion=x", 400}} {
			r := a.JSON("GET", servertest.CMs+"/a"+q.query, "")
			if r.Code != q.code {
				t.Fatalf("GET a%s = %d %s, want %d", q.query, r.Code, servertest.Truncate(r.Body), q.code)
			}
			if q.code == 200 && r.Object()["data"].(map[string]any)["k"] != "v2" {
				t.Fatalf("GET a%s data = %v, want k=v2", q.query, r.Object()["data"])
			}
		}
		if r := a.JSON("GET", servertest.CMs+"/missing?resourceVersion=0", ""); r.Code != 404 {
			t.Fatalf("GET missing?resourceVersion=0 = %d, want 404", r.Code)
		}
	})
	t.Run("stale update conflicts", func(t *testing.T) {
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":%q},"data":{"k":"v3"}}`, first)
		r := a.JSON("PUT", servertest.CMs+"/a", body)
		if s := r.Status(); r.Code != 409 || s.Reason != metav1.StatusReasonConflict {
			t.Fatalf("stale update = %d %s, want 409 Conflict", r.Code, s.Reason)
		}
		if got := a.JSON("GET", servertest.CMs+"/a", "").Object()["data"].(map[string]any)["k"]; got != "v2" {
			t.Fatalf("after conflict data.k = %v, want v2", got)
		}
	})
	t.Run("create existing", func(t *testing.T) {
		r := a.JSON("POST", servertest.CMs, servertest.CM("a", ""))
		if s := r.Status(); r.Code != 409 || s.Reason != metav1.StatusReasonAlreadyExists {
			t.Fatalf("create existing = %d %s, want 409 AlreadyExists", r.Code, s.Reason)
		}
	})
	t.Run("no-op update keeps resourceVersion", func(t *testing.T) {
		cur := a.JSON("GET", servertest.CMs+"/b", "")
		again := a.Do("PUT", servertest.CMs+"/b", "application/json", cur.Body)
		if servertest.RVOf(t, again) != servertest.RVOf(t, cur) {
			t.Fatalf("no-op update changed resourceVersion %s -> %s", servertest.RVOf(t, cur), servertest.RVOf(t, again))
		}
	})
}

func TestPaginationAndExpiredContinue(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	for i := range 7 {
		a.JSON("POST", servertest.CMs, servertest.CM(fmt.Sprintf("p%d", i), ""))
	}
	var names []string
	cont := ""
	var firstRV string
	for page := 0; ; page++ {
		q := "?limit=3"
		if cont != "" {
			q += "&continue=" + cont
		}
		r := a.JSON("GET", servertest.CMs+q, "")
		if r.Code != 200 {
			t.Fatalf("page %d: %d %s", page, r.Code, r.Body)
		}
		obj := r.Object()
		md := obj["metadata"].(map[string]any)
		if page == 0 {
			firstRV = md["resourceVersion"].(string)
			if md["remainingItemCount"] != float64(4) {
				t.Fatalf("remainingItemCount = %v, want 4", md["remainingItemCount"])
			}
			// A write between pages does not appear in later pages.
			a.JSON("POST", servertest.CMs, servertest.CM("p3a", ""))
		} else if md["resourceVersion"] != firstRV {
			t.Fatalf("page %d resourceVersion = %v, want %s", page, md["resourceVersion"], firstRV)
		}
		for _, it := range obj["items"].([]any) {
			names = append(names, it.(map[string]any)["metadata"].(map[string]any)["name"].(string))
		}
		c, _ := md["continue"].(string)
		if c == "" {
			break
		}
		cont = c
	}
	if got := strings.Join(names, ","); got != "p0,p1,p2,p3,p4,p5,p6" {
		t.Fatalf("paginated names = %s", got)
	}
}

// A watch from a revision that neither the watch cache's history nor etcd
// still has gets 200 and then an ERROR event 410 Expired.
func TestWatchFromCompactedVersionGetsExpiredEvent(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*server.Config)
	}{
		{"etcd", func(c *server.Config) { c.DisableWatchCache = true }},
		{"watch cache", func(c *server.Config) { c.WatchCacheWindow = time.Millisecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testenv.Start(t, testenv.WithCompaction(100*time.Millisecond), testenv.WithServerConfig(tc.cfg))
			watchCompacted(t, servertest.NewAPI(t, env))
		})
	}
}

func watchCompacted(t *testing.T, a *servertest.API) {
	first := servertest.RVOf(t, a.JSON("POST", servertest.CMs, servertest.CM("w", "")))
	deadline := time.Now().Add(20 * time.Second)
	for {
		a.JSON("PATCH", servertest.CMs+"/w", `{}`)
		a.Do("PATCH", servertest.CMs+"/w", "application/merge-patch+json", []byte(fmt.Sprintf(`{"data":{"t":%q}}`, time.Now())))
		r := a.JSON("GET", servertest.CMs+"?resourceVersion="+first+"&resourceVersionMatch=Exact", "")
		if r.Code == 410 {
			if s := r.Status(); s.Reason != metav1.StatusReasonExpired {
				t.Fatalf("list of compacted rv reason = %s, want Expired", s.Reason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("revision %s never compacted", first)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(1100 * time.Millisecond) // the cache trims its history every second
	resp, err := a.C.Get(a.Host + servertest.CMs + "?watch=true&resourceVersion=" + first)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("watch from compacted rv = %d, want 200 then an ERROR event", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() {
		t.Fatalf("no event: %v", sc.Err())
	}
	var ev struct {
		Type   string
		Object metav1.Status
	}
	if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Type != "ERROR" || ev.Object.Code != 410 || ev.Object.Reason != metav1.StatusReasonExpired {
		t.Fatalf("event = %s %d %s, want ERROR 410 Expired", ev.Type, ev.Object.Code, ev.Object.Reason)
	}
	if sc.Scan() {
		t.Fatalf("more after the ERROR event: %s", sc.Text())
	}
}

// A watch from a resourceVersion the server has not reached waits briefly,
// then gets 200 and an ERROR event with the 504 "Too large resource version"
// Status, as Kubernetes' watch cache answers.
func TestWatchFromFutureVersion(t *testing.T) {
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.FutureRVWait = 200 * time.Millisecond }))
	a := servertest.NewAPI(t, env)
	resp, err := a.C.Get(a.Host + servertest.CMs + "?watch=true&resourceVersion=999999")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ev struct {
		Type   string
		Object metav1.Status
	}
	if err := json.NewDecoder(resp.Body).Decode(&ev); err != nil || resp.StatusCode != 200 {
		t.Fatalf("watch = %d, %v", resp.StatusCode, err)
	}
	if ev.Type != "ERROR" || ev.Object.Code != 504 || ev.Object.Message != "Too large resource version" {
		t.Fatalf("event = %s %d %q, want ERROR 504 Too large resource version", ev.Type, ev.Object.Code, ev.Object.Message)
	}
}

// A continue token older than ContinueTTL gets 410 Expired carrying a fresh
// "inconsistent continue" token, which lists the rest at the latest state.
func TestExpiredContinueToken(t *testing.T) {
	env := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.ContinueTTL = 200 * time.Millisecond }))
	a := servertest.NewAPI(t, env)
	for i := range 4 {
		a.JSON("POST", servertest.CMs, servertest.CM(fmt.Sprintf("e%d", i), ""))
	}
	first := a.JSON("GET", servertest.CMs+"?limit=2", "")
	cont := first.Object()["metadata"].(map[string]any)["continue"].(string)
	time.Sleep(300 * time.Millisecond)
	r := a.JSON("GET", servertest.CMs+"?limit=2&continue="+cont, "")
	var st metav1.Status
	json.Unmarshal(r.Body, &st)
	if r.Code != 410 || st.Reason != metav1.StatusReasonExpired || st.Continue == "" {
		t.Fatalf("expired continue = %d %s continue=%q, want 410 Expired with an inconsistent continue token", r.Code, st.Reason, st.Continue)
	}
	rest := a.JSON("GET", servertest.CMs+"?limit=10&continue="+st.Continue, "")
	if rest.Code != 200 {
		t.Fatalf("inconsistent continue = %d %s", rest.Code, rest.Body)
	}
	var names []string
	for _, it := range rest.Object()["items"].([]any) {
		names = append(names, it.(map[string]any)["metadata"].(map[string]any)["name"].(string))
	}
	if got := strings.Join(names, ","); got != "e2,e3" {
		t.Fatalf("rest of the list = %s, want e2,e3", got)
	}
}

// TestImmutableConfigMapsAndSecrets: a ConfigMap or Secret marked
// immutable keeps its contents and its mark; its metadata may change.
// Each answer as kube-apiserver v1.37.2 gives it (asked of it).
func TestImmutableConfigMapsAndSecrets(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	secrets := "/api/v1/namespaces/default/secrets"
	servertest.MustCode(t, "create cm", a.JSON("POST", servertest.CMs, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"imm"},"immutable":true,"data":{"a":"b"}}`), http.StatusCreated)
	servertest.MustCode(t, "create secret", a.JSON("POST", secrets, `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"imm"},"immutable":true,"data":{"a":"Yg=="}}`), http.StatusCreated)
	const forbidden = "Forbidden: field is immutable when `immutable` is set"
	for _, c := range []struct {
		method, path, ctype, body, msg string
	}{
		{"PUT", servertest.CMs + "/imm", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"imm"},"immutable":true,"data":{"a":"c"}}`,
			`ConfigMap "imm" is invalid: data: ` + forbidden},
		{"PUT", servertest.CMs + "/imm", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"imm"},"data":{"a":"c"},"binaryData":{"x":"AA=="}}`,
			`ConfigMap "imm" is invalid: [immutable: ` + forbidden + `, data: ` + forbidden + `, binaryData: ` + forbidden + `]`},
		{"PATCH", servertest.CMs + "/imm", "application/merge-patch+json", `{"immutable":false}`, `ConfigMap "imm" is invalid: immutable: ` + forbidden},
		{"PUT", secrets + "/imm", "application/json", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"imm"},"immutable":true,"data":{"a":"Yw=="}}`,
			`Secret "imm" is invalid: data: ` + forbidden},
		{"PUT", secrets + "/imm", "application/json", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"imm"},"immutable":true,"data":{"a":"Yg=="},"stringData":{"b":"x"}}`,
			`Secret "imm" is invalid: data: ` + forbidden},
	} {
		r := a.Do(c.method, c.path, c.ctype, []byte(c.body))
		if r.Code != http.StatusUnprocessableEntity || r.Status().Message != c.msg {
			t.Errorf("%s %s %s: %d %s, want 422 %q", c.method, c.path, c.body, r.Code, r.Body, c.msg)
		}
	}
	cm := a.JSON("GET", servertest.CMs+"/imm", "").Object()
	if cm["data"].(map[string]any)["a"] != "b" || cm["immutable"] != true {
		t.Errorf("the immutable ConfigMap after the refused writes: %v", cm)
	}
	servertest.MustCode(t, "a label on the immutable ConfigMap",
		a.JSON("PUT", servertest.CMs+"/imm", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"imm","labels":{"l":"1"}},"immutable":true,"data":{"a":"b"}}`), http.StatusOK)
	servertest.MustCode(t, "a mutable ConfigMap marked immutable",
		a.JSON("POST", servertest.CMs, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"mut"},"data":{"a":"b"}}`), http.StatusCreated)
	servertest.MustCode(t, "mark it", a.Do("PATCH", servertest.CMs+"/mut", "application/merge-patch+json", []byte(`{"immutable":true,"data":{"a":"c"}}`)), http.StatusOK)
}

// TestSecretTypes: a Secret of a well-known type has what Kubernetes
// requires of it, in its words (kube-apiserver v1.37.2's answers, asked
// of it); stringData counts as data.
func TestSecretTypes(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	for i, c := range []struct{ body, msg string }{
		{`"type":"kubernetes.io/tls","data":{"tls.crt":"eQ=="}`, `data[tls.key]: Required value`},
		{`"type":"kubernetes.io/tls"`, `[data[tls.crt]: Required value, data[tls.key]: Required value]`},
		{`"type":"kubernetes.io/dockerconfigjson","data":{".dockerconfigjson":"eQ=="}`,
			`data[.dockerconfigjson]: Invalid value: "<secret contents redacted>": invalid character 'y' looking for beginning of value`},
		{`"type":"kubernetes.io/dockercfg"`, `data[.dockercfg]: Required value`},
		{`"type":"kubernetes.io/basic-auth"`, `[data[username]: Required value, data[password]: Required value]`},
		{`"type":"kubernetes.io/basic-auth","data":{"password":""}`, ""},
		{`"type":"kubernetes.io/ssh-auth","data":{"ssh-privatekey":""}`, `data[ssh-privatekey]: Required value`},
		{`"type":"kubernetes.io/service-account-token"`, `metadata.annotations[kubernetes.io/service-account.name]: Required value`},
		{`"type":"kubernetes.io/tls","stringData":{"tls.crt":"a","tls.key":"b"}`, ""},
	} {
		name := fmt.Sprintf("s%d", i)
		r := a.JSON("POST", "/api/v1/namespaces/default/secrets", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"`+name+`"},`+c.body+`}`)
		switch {
		case c.msg == "" && r.Code != http.StatusCreated:
			t.Errorf("%s: %d %s, want 201", c.body, r.Code, r.Body)
		case c.msg != "" && (r.Code != http.StatusUnprocessableEntity || r.Status().Message != `Secret "`+name+`" is invalid: `+c.msg):
			t.Errorf("%s: %d %s, want 422 %q", c.body, r.Code, r.Body, c.msg)
		}
	}
}
