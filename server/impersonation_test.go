package server_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/objwatch/objwatch/testenv"
)

// TestImpersonationRefused: a request asking to act as another user is
// refused with Kubernetes' 403 rather than run as the caller.
func TestImpersonationRefused(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env)
	req, _ := http.NewRequest("GET", env.Config.Host+cms, nil)
	req.Header.Set("Impersonate-User", "alice")
	req.Header.Add("Impersonate-Group", "devs")
	resp, err := a.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r := response{code: resp.StatusCode, body: b}
	s := r.status()
	// kube-apiserver v1.37.2's answer to a user allowed no impersonation.
	const want = `configmaps is forbidden: User "admin" cannot impersonate-on:user-info:list resource "configmaps" in API group "" in the namespace "default"`
	if r.code != http.StatusForbidden || s.Reason != "Forbidden" || s.Message != want || s.Details == nil || s.Details.Kind != "configmaps" {
		t.Fatalf("GET with Impersonate-User = %d %s, want 403 Forbidden %q", r.code, b, want)
	}
	if r := a.json("GET", cms, ""); r.code != http.StatusOK {
		t.Fatalf("GET without impersonation = %d %s", r.code, r.body)
	}
}
