package fieldmanager_test

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/objwatch/objwatch/server/fieldmanager"
	"github.com/objwatch/objwatch/server/openapi"
	"github.com/objwatch/objwatch/server/registry"
)

func newManager(t testing.TB) (*fieldmanager.Manager, *registry.Registry) {
	t.Helper()
	reg := registry.New()
	m, err := fieldmanager.New(fieldmanager.Config{Registry: reg, BuiltinModels: func() (map[string]*spec.Schema, error) { return openapi.BuiltinModels(reg) }})
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// verifyingConfigMaps returns a Manager in Verify mode (its shortcuts
// checked against the field manager) and the ConfigMap resource.
func verifyingConfigMaps(t testing.TB) (*fieldmanager.Manager, *registry.Resource) {
	t.Helper()
	reg := registry.New()
	m, err := fieldmanager.New(fieldmanager.Config{Registry: reg, Verify: true, BuiltinModels: func() (map[string]*spec.Schema, error) { return openapi.BuiltinModels(reg) }})
	if err != nil {
		t.Fatal(err)
	}
	res, _ := reg.Get(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	return m, res
}

func TestBuiltinModels(t *testing.T) {
	start := time.Now()
	_, reg := newManager(t)
	models, err := openapi.BuiltinModels(reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d models in %v", len(models), time.Since(start))
}
