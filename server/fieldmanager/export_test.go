package fieldmanager

import (
	"k8s.io/apimachinery/pkg/util/managedfields"

	"github.com/objwatch/objwatch/server/registry"
)

// Internals for the external tests (package fieldmanager_test imports openapi,
// which imports this package through endpoints).
var (
	FastUpdate      = fastUpdate
	FastApply       = fastApply
	ManagedFieldsOf = managedFieldsOf
	JSONEqual       = jsonEqual
)

func (m *Manager) FieldManagerFor(res *registry.Resource, subresource string) (*managedfields.FieldManager, error) {
	return m.managerFor(res, subresource)
}

// Shapes is how many create shapes m remembers.
func (m *Manager) Shapes() int {
	m.creates.mu.RLock()
	defer m.creates.mu.RUnlock()
	return len(m.creates.m)
}
