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
	"github.com/objwatch/objwatch/testenv"
)

// api is a tiny raw HTTP client for asserting wire behaviour.
type api struct {
	t    *testing.T
	host string
	c    *http.Client
}

func newAPI(t *testing.T, env *testenv.Env) *api {
	return &api{t: t, host: env.Config.Host, c: env.HTTPClient()}
}

type response struct {
	code   int
	body   []byte
	header http.Header
}

func (r response) status() metav1.Status {
	var s metav1.Status
	json.Unmarshal(r.body, &s)
	return s
}

func (r response) object() map[string]any {
	var m map[string]any
	json.Unmarshal(r.body, &m)
	return m
}

func (a *api) do(method, path, contentType string, body []byte) response {
	a.t.Helper()
	return a.accept(method, path, "", contentType, body)
}

func (a *api) json(method, path string, body string) response {
	a.t.Helper()
	return a.do(method, path, "application/json", []byte(body))
}

func cm(name string, extra string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q%s},"data":{"k":"v"}}`, name, extra)
}

func rvOf(t *testing.T, r response) string {
	t.Helper()
	md, _ := r.object()["metadata"].(map[string]any)
	rv, _ := md["resourceVersion"].(string)
	if rv == "" {
		t.Fatalf("no resourceVersion in %s", r.body)
	}
	return rv
}

const cms = "/api/v1/namespaces/default/configmaps"

func TestBadInputGetsStatusAndWritesNothing(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	big := strings.Repeat("x", 3<<20)
	tests := []struct {
		name, method, path, ctype, body string
		code                            int
		reason                          metav1.StatusReason
		msg                             string
	}{
		{"malformed json", "POST", cms, "application/json", `{"apiVersion":`, 400, metav1.StatusReasonBadRequest, "malformed"},
		{"not an object", "POST", cms, "application/json", `[1,2]`, 400, metav1.StatusReasonBadRequest, "not a JSON object"},
		{"malformed yaml", "POST", cms, "application/yaml", "a: [b\n", 400, metav1.StatusReasonBadRequest, "YAML"},
		{"wrong apiVersion", "POST", cms, "application/json", `{"apiVersion":"v2","kind":"ConfigMap","metadata":{"name":"a"}}`, 400, metav1.StatusReasonBadRequest, "does not match the expected API version"},
		{"wrong kind", "POST", cms, "application/json", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"a"}}`, 400, metav1.StatusReasonBadRequest, "does not match the expected kind"},
		{"namespace mismatch", "POST", cms, "application/json", cm("a", `,"namespace":"other"`), 400, metav1.StatusReasonBadRequest, "does not match the namespace"},
		{"name mismatch", "PUT", cms + "/a", "application/json", cm("b", ""), 400, metav1.StatusReasonBadRequest, "does not match the name on the URL"},
		{"invalid name", "POST", cms, "application/json", cm("Not_Valid", ""), 422, metav1.StatusReasonInvalid, "metadata.name"},
		{"missing name", "POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap"}`, 422, metav1.StatusReasonInvalid, "name or generateName is required"},
		{"invalid data key", "POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"bad key":"v"}}`, 422, metav1.StatusReasonInvalid, "data[bad key]"},
		{"wrong field type", "POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":5}`, 400, metav1.StatusReasonBadRequest, ""},
		{"unknown resource", "GET", "/api/v1/namespaces/default/nothings", "", "", 404, metav1.StatusReasonNotFound, ""},
		{"unknown version", "GET", "/apis/coordination.k8s.io/v9/leases", "", "", 404, metav1.StatusReasonNotFound, ""},
		{"body too large", "POST", cms, "application/json", cm("a", "") + big, 413, metav1.StatusReasonRequestEntityTooLarge, ""},
		{"unknown content type", "POST", cms, "text/plain", cm("a", ""), 415, metav1.StatusReasonUnsupportedMediaType, ""},
		{"bad label selector", "GET", cms + "?labelSelector=a%20in%20(", "", "", 400, metav1.StatusReasonBadRequest, ""},
		{"bad field selector", "GET", cms + "?fieldSelector=spec.x%3D1", "", "", 400, metav1.StatusReasonBadRequest, "field label not supported"},
		{"non-numeric resourceVersion", "GET", cms + "?resourceVersion=abc", "", "", 400, metav1.StatusReasonBadRequest, "resource version"},
		{"namespace does not exist", "POST", "/api/v1/namespaces/missing/configmaps", "application/json", cm("a", ""), 404, metav1.StatusReasonNotFound, "namespaces \"missing\" not found"},
		{"strict unknown field", "POST", cms + "?fieldValidation=Strict", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"bogus":1}`, 400, metav1.StatusReasonBadRequest, `unknown field "bogus"`},
		{"bad fieldValidation", "POST", cms + "?fieldValidation=Maybe", "application/json", cm("a", ""), 422, metav1.StatusReasonInvalid, "fieldValidation: Unsupported value"},
		{"bad dryRun", "POST", cms + "?dryRun=Some", "application/json", cm("a", ""), 422, metav1.StatusReasonInvalid, "dryRun: Unsupported value"},
		{"non-numeric limit", "GET", cms + "?limit=ten", "", "", 400, metav1.StatusReasonBadRequest, ""},
		{"non-numeric timeoutSeconds", "GET", cms + "?watch=1&timeoutSeconds=x", "", "", 400, metav1.StatusReasonBadRequest, ""},
		{"bad propagationPolicy", "DELETE", cms + "/a?propagationPolicy=Sometimes", "", "", 422, metav1.StatusReasonInvalid, "propagationPolicy: Unsupported value"},
		{"non-numeric gracePeriodSeconds", "DELETE", cms + "/a?gracePeriodSeconds=soon", "", "", 400, metav1.StatusReasonBadRequest, ""},
		{"write on a watch path", "POST", "/api/v1/watch/namespaces/default/configmaps", "application/json", cm("a", ""), 405, metav1.StatusReasonMethodNotAllowed, ""},
		{"bad patch type", "PATCH", cms + "/a", "application/xml", `{}`, 415, metav1.StatusReasonUnsupportedMediaType, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := a.do(tc.method, tc.path, tc.ctype, []byte(tc.body))
			s := r.status()
			if r.code != tc.code || s.Reason != tc.reason || s.Kind != "Status" || int(s.Code) != tc.code {
				t.Fatalf("%s %s = %d %s (%s), want %d %s", tc.method, tc.path, r.code, s.Reason, truncate(r.body), tc.code, tc.reason)
			}
			if !strings.Contains(s.Message, tc.msg) {
				t.Fatalf("message %q does not contain %q", s.Message, tc.msg)
			}
		})
	}
	// Nothing was written by any of them.
	r := a.json("GET", cms, "")
	if items := r.object()["items"].([]any); len(items) != 0 {
		t.Fatalf("configmaps after bad requests = %d, want 0", len(items))
	}
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
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
	a := newAPI(t, env)
	first := rvOf(t, a.json("POST", cms, cm("a", "")))
	a.json("PUT", cms+"/a", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v2"}}`)
	last := rvOf(t, a.json("POST", cms, cm("b", "")))
	// NotOlderThan and resourceVersion=0 may answer from a cache that has
	// not seen b yet (as in Kubernetes): wait until it has.
	waitCache(t, env, cmGVR, last)

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
			r := a.json("GET", cms+tc.query, "")
			if r.code != tc.code {
				t.Fatalf("GET %s = %d (%s), want %d", tc.query, r.code, truncate(r.body), tc.code)
			}
			if tc.code != 200 {
				if s := r.status(); s.Reason != tc.reason {
					t.Fatalf("reason = %s, want %s", s.Reason, tc.reason)
				}
				return
			}
			if n := len(r.object()["items"].([]any)); n != tc.items {
				t.Fatalf("items = %d, want %d", n, tc.items)
			}
		})
	}
	t.Run("too large message and retry-after", func(t *testing.T) {
		r := a.json("GET", cms+"?resourceVersion=999999&resourceVersionMatch=NotOlderThan", "")
		if s := r.status(); s.Message != "Too large resource version" || r.header.Get("Retry-After") == "" {
			t.Fatalf("status = %q retry-after %q", s.Message, r.header.Get("Retry-After"))
		}
	})
	t.Run("get", func(t *testing.T) {
		for _, q := range []struct {
			query string
			code  int
		}{{"", 200}, {"?resourceVersion=0", 200}, {"?resourceVersion=" + first, 200}, {"?resourceVersion=999999", 504}, {"?resourceVersion=x", 400}} {
			r := a.json("GET", cms+"/a"+q.query, "")
			if r.code != q.code {
				t.Fatalf("GET a%s = %d %s, want %d", q.query, r.code, truncate(r.body), q.code)
			}
			if q.code == 200 && r.object()["data"].(map[string]any)["k"] != "v2" {
				t.Fatalf("GET a%s data = %v, want k=v2", q.query, r.object()["data"])
			}
		}
		if r := a.json("GET", cms+"/missing?resourceVersion=0", ""); r.code != 404 {
			t.Fatalf("GET missing?resourceVersion=0 = %d, want 404", r.code)
		}
	})
	t.Run("stale update conflicts", func(t *testing.T) {
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","resourceVersion":%q},"data":{"k":"v3"}}`, first)
		r := a.json("PUT", cms+"/a", body)
		if s := r.status(); r.code != 409 || s.Reason != metav1.StatusReasonConflict {
			t.Fatalf("stale update = %d %s, want 409 Conflict", r.code, s.Reason)
		}
		if got := a.json("GET", cms+"/a", "").object()["data"].(map[string]any)["k"]; got != "v2" {
			t.Fatalf("after conflict data.k = %v, want v2", got)
		}
	})
	t.Run("create existing", func(t *testing.T) {
		r := a.json("POST", cms, cm("a", ""))
		if s := r.status(); r.code != 409 || s.Reason != metav1.StatusReasonAlreadyExists {
			t.Fatalf("create existing = %d %s, want 409 AlreadyExists", r.code, s.Reason)
		}
	})
	t.Run("no-op update keeps resourceVersion", func(t *testing.T) {
		cur := a.json("GET", cms+"/b", "")
		again := a.do("PUT", cms+"/b", "application/json", cur.body)
		if rvOf(t, again) != rvOf(t, cur) {
			t.Fatalf("no-op update changed resourceVersion %s -> %s", rvOf(t, cur), rvOf(t, again))
		}
	})
}

func TestPaginationAndExpiredContinue(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	for i := range 7 {
		a.json("POST", cms, cm(fmt.Sprintf("p%d", i), ""))
	}
	var names []string
	cont := ""
	var firstRV string
	for page := 0; ; page++ {
		q := "?limit=3"
		if cont != "" {
			q += "&continue=" + cont
		}
		r := a.json("GET", cms+q, "")
		if r.code != 200 {
			t.Fatalf("page %d: %d %s", page, r.code, r.body)
		}
		obj := r.object()
		md := obj["metadata"].(map[string]any)
		if page == 0 {
			firstRV = md["resourceVersion"].(string)
			if md["remainingItemCount"] != float64(4) {
				t.Fatalf("remainingItemCount = %v, want 4", md["remainingItemCount"])
			}
			// A write between pages does not appear in later pages.
			a.json("POST", cms, cm("p3a", ""))
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
			watchCompacted(t, newAPI(t, env))
		})
	}
}

func watchCompacted(t *testing.T, a *api) {
	first := rvOf(t, a.json("POST", cms, cm("w", "")))
	deadline := time.Now().Add(20 * time.Second)
	for {
		a.json("PATCH", cms+"/w", `{}`)
		a.do("PATCH", cms+"/w", "application/merge-patch+json", []byte(fmt.Sprintf(`{"data":{"t":%q}}`, time.Now())))
		r := a.json("GET", cms+"?resourceVersion="+first+"&resourceVersionMatch=Exact", "")
		if r.code == 410 {
			if s := r.status(); s.Reason != metav1.StatusReasonExpired {
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
	resp, err := a.c.Get(a.host + cms + "?watch=true&resourceVersion=" + first)
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
	a := newAPI(t, env)
	resp, err := a.c.Get(a.host + cms + "?watch=true&resourceVersion=999999")
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
	a := newAPI(t, env)
	for i := range 4 {
		a.json("POST", cms, cm(fmt.Sprintf("e%d", i), ""))
	}
	first := a.json("GET", cms+"?limit=2", "")
	cont := first.object()["metadata"].(map[string]any)["continue"].(string)
	time.Sleep(300 * time.Millisecond)
	r := a.json("GET", cms+"?limit=2&continue="+cont, "")
	var st metav1.Status
	json.Unmarshal(r.body, &st)
	if r.code != 410 || st.Reason != metav1.StatusReasonExpired || st.Continue == "" {
		t.Fatalf("expired continue = %d %s continue=%q, want 410 Expired with an inconsistent continue token", r.code, st.Reason, st.Continue)
	}
	rest := a.json("GET", cms+"?limit=10&continue="+st.Continue, "")
	if rest.code != 200 {
		t.Fatalf("inconsistent continue = %d %s", rest.code, rest.body)
	}
	var names []string
	for _, it := range rest.object()["items"].([]any) {
		names = append(names, it.(map[string]any)["metadata"].(map[string]any)["name"].(string))
	}
	if got := strings.Join(names, ","); got != "e2,e3" {
		t.Fatalf("rest of the list = %s, want e2,e3", got)
	}
}
