package servertest

import (
	"encoding/json"

	"net/http"
	"testing"

	"k8s.io/kube-openapi/pkg/validation/spec"
)

// OpenAPIV2 fetches /openapi/v2 as JSON.
func OpenAPIV2(t *testing.T, a *API) (*spec.Swagger, Response) {
	t.Helper()
	r := a.Do("GET", "/openapi/v2", "", nil)
	if r.Code != http.StatusOK || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Etag") == "" {
		t.Fatalf("GET /openapi/v2 = %d %s Etag %q %.300s, want 200 application/json with an Etag", r.Code, r.Header.Get("Content-Type"), r.Header.Get("Etag"), r.Body)
	}
	sw := new(spec.Swagger)
	if err := json.Unmarshal(r.Body, sw); err != nil {
		t.Fatalf("GET /openapi/v2: %v", err)
	}
	return sw, r
}

// V2Kind returns the definition tagged with group, version and kind.
func V2Kind(sw *spec.Swagger, group, version, kind string) (string, *spec.Schema) {
	for name, s := range sw.Definitions {
		var gvks []map[string]any
		raw, _ := json.Marshal(s.Extensions["x-kubernetes-group-version-kind"])
		json.Unmarshal(raw, &gvks)
		for _, g := range gvks {
			if g["group"] == group && g["version"] == version && g["kind"] == kind {
				return name, &s
			}
		}
	}
	return "", nil
}
