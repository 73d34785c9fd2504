package ui_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestGuard: the token in the URL sets an HttpOnly SameSite=Strict
// cookie; every request without it is 401; another Host, another
// Origin and a cross-site fetch are 403; anything but GET and HEAD is
// 405; nothing is forwarded to the API server.
func TestGuard(t *testing.T) {
	e := startUI(t)
	noJar := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	// The token sets the cookie and redirects to the URL without it.
	resp, err := noJar.Get(e.s.URL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("token URL: %s, Location %q", resp.Status, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		cookie = c
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Value == "" {
		t.Fatalf("cookie = %+v, want HttpOnly SameSite=Strict", cookie)
	}

	do := func(method, path string, hdr map[string]string, withCookie bool) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, e.url(path, nil), nil)
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		if withCookie {
			req.AddCookie(cookie)
		}
		resp, err := noJar.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		name, method, path string
		hdr                map[string]string
		cookie             bool
		want               int
	}{
		{"page with cookie", "GET", "/", nil, true, 200},
		{"api with cookie", "GET", "/api/resources", nil, true, 200},
		{"page without token", "GET", "/", nil, false, 401},
		{"api without token", "GET", "/api/object?resource=configmaps&name=x", nil, false, 401},
		{"live without token", "GET", "/api/live?resource=configmaps", nil, false, 401},
		{"asset without token", "GET", "/assets/app.js", nil, false, 401},
		{"wrong token", "GET", "/?token=0123456789abcdef0123456789abcdef", nil, false, 401},
		{"another Host (DNS rebinding)", "GET", "/api/resources", map[string]string{"Host": "evil.example:80"}, true, 403},
		{"another port", "GET", "/api/resources", map[string]string{"Host": "127.0.0.1:1"}, true, 403},
		{"cross-origin", "GET", "/api/resources", map[string]string{"Origin": "http://evil.example"}, true, 403},
		{"cross-site fetch", "GET", "/api/resources", map[string]string{"Sec-Fetch-Site": "cross-site"}, true, 403},
		{"same-site fetch", "GET", "/api/resources", map[string]string{"Sec-Fetch-Site": "same-site"}, true, 403},
		{"same origin", "GET", "/api/resources", map[string]string{"Origin": "http://" + e.addr, "Sec-Fetch-Site": "same-origin"}, true, 200},
		{"POST", "POST", "/api/resources", nil, true, 405},
		{"PUT", "PUT", "/api/object", nil, true, 405},
		{"DELETE", "DELETE", "/api/object?resource=configmaps&name=x", nil, true, 405},
		{"PATCH", "PATCH", "/", nil, true, 405},
		{"no proxy of API paths", "GET", "/api/v1/namespaces", nil, true, 404},
		{"no proxy of API paths (apis)", "GET", "/apis/apps/v1/deployments", nil, true, 404},
	} {
		if got, body := do(c.method, c.path, c.hdr, c.cookie); got != c.want {
			t.Errorf("%s: %s %s = %d (%s), want %d", c.name, c.method, c.path, got, strings.TrimSpace(body), c.want)
		}
	}
	// localhost with the port is the same page when listening on loopback.
	if got, _ := do("GET", "/api/resources", map[string]string{"Host": strings.Replace(e.addr, "127.0.0.1", "localhost", 1)}, true); got != 200 {
		t.Errorf("localhost:port = %d, want 200", got)
	}
	// The page never sees credentials: the app's answers carry none.
	_, body := do("GET", "/api/resources", nil, true)
	var rs []map[string]any
	if err := json.Unmarshal([]byte(body), &rs); err != nil || len(rs) == 0 {
		t.Fatalf("resources = %v, %s", err, body)
	}
	for _, secret := range []string{"BEGIN", "token", "password"} {
		if strings.Contains(body, secret) {
			t.Errorf("resources mention %q", secret)
		}
	}
	_ = url.Values{}
}
