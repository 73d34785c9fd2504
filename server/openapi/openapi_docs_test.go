package openapi

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"

	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/objwatch/objwatch/server/registry"
)

func TestOpenAPIDocsUpdate(t *testing.T) {
	var built []string
	build := func(rs []*registry.Resource) (*spec3.OpenAPI, error) {
		gv := rs[0].APIVersion()
		built = append(built, gv)
		if rs[0].Group == "broken.example.com" {
			return nil, errors.New("cannot build")
		}
		return &spec3.OpenAPI{Version: "3.0.0", Info: &spec.Info{InfoProps: spec.InfoProps{Title: gv}}}, nil
	}
	core := &registry.Resource{Version: "v1", Plural: "configmaps", Kind: "ConfigMap"}
	a1 := &registry.Resource{Group: "a.example.com", Version: "v1", Plural: "as", Kind: "A"}
	a1again := &registry.Resource{Group: "a.example.com", Version: "v1", Plural: "as", Kind: "A"}
	b1 := &registry.Resource{Group: "a.example.com", Version: "v1", Plural: "bs", Kind: "B"}
	broken := &registry.Resource{Group: "broken.example.com", Version: "v1", Plural: "xs", Kind: "X"}

	paths := func(ds *openAPIDocSet) []string {
		var d handler3.OpenAPIV3Discovery
		if err := json.Unmarshal(ds.discovery, &d); err != nil {
			t.Fatal(err)
		}
		return slices.Sorted(maps.Keys(d.Paths))
	}

	var docs openAPIDocs
	tests := []struct {
		name      string
		resources []*registry.Resource
		wantBuilt []string
		wantPaths []string
	}{
		{"first", []*registry.Resource{core, a1}, []string{"a.example.com/v1", "v1"}, []string{"api/v1", "apis/a.example.com/v1"}},
		{"unchanged", []*registry.Resource{core, a1}, nil, []string{"api/v1", "apis/a.example.com/v1"}},
		{"resource replaced", []*registry.Resource{core, a1again}, []string{"a.example.com/v1"}, []string{"api/v1", "apis/a.example.com/v1"}},
		{"resource added", []*registry.Resource{core, a1again, b1}, []string{"a.example.com/v1"}, []string{"api/v1", "apis/a.example.com/v1"}},
		{"broken left out", []*registry.Resource{core, a1again, b1, broken}, []string{"broken.example.com/v1"}, []string{"api/v1", "apis/a.example.com/v1"}},
		{"broken not retried", []*registry.Resource{core, a1again, b1, broken}, nil, []string{"api/v1", "apis/a.example.com/v1"}},
		{"group removed", []*registry.Resource{core}, nil, []string{"api/v1"}},
	}
	for _, tc := range tests {
		built = nil
		ds := docs.update(tc.resources, build)
		slices.Sort(built)
		if !slices.Equal(built, tc.wantBuilt) {
			t.Errorf("%s: built %v, want %v", tc.name, built, tc.wantBuilt)
		}
		if got := paths(ds); !slices.Equal(got, tc.wantPaths) {
			t.Errorf("%s: discovery paths %v, want %v", tc.name, got, tc.wantPaths)
		}
	}
	ds := docs.update([]*registry.Resource{core, broken}, build)
	if d := ds.byGV["apis/broken.example.com/v1"]; d == nil || d.err == nil {
		t.Errorf("document of a group version that fails to build = %+v, want its error", d)
	}
}
