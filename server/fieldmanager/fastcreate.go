package fieldmanager

import (
	"slices"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
)

// A create by one manager, of an object that brings no managedFields, gets
// one Update entry whose FieldsV1 is the set of the object's fields. For an
// object without lists (whose items the set names by value), that set
// depends only on the object's shape: its keys and the kinds of its values,
// under the resource's schema. creates remembers the field manager's
// FieldsV1 for each shape it has seen, so that the next create of that
// shape skips the typed conversion and comparison of the whole object,
// most of the cost of tracking a create. Objects with lists, with a
// last-applied-configuration annotation (which the field manager turns
// into an Apply entry from its value), or with managedFields of their own
// take the field manager. Config.Verify checks every answer against it.

// maxShapes bounds the remembered shapes; beyond it they are forgotten all
// at once (a server sees few shapes: each client writes its own few).
const maxShapes = 4096

type shapeKey struct {
	fm                         *managedfields.FieldManager // the resource version's, rebuilt when it changes
	manager, apiVersion, shape string
}

// shapes is the memo of create entries; safe for concurrent use.
type shapes struct {
	mu sync.RWMutex
	m  map[shapeKey]map[string]any // FieldsV1 trees, never written once stored
}

// fastCreate returns the managedFields manager's create of obj (tracked:
// obj, or its defaulted copy) gets, and true; or false when only the field
// manager can tell. key is what record needs to remember the answer.
func (s *shapes) fastCreate(fm *managedfields.FieldManager, tracked *unstructured.Unstructured, manager string, now time.Time) (mf []any, key shapeKey, ok bool) {
	shape, ok := shapeOf(tracked.Object)
	if !ok {
		return nil, shapeKey{}, false
	}
	key = shapeKey{fm: fm, manager: manager, apiVersion: tracked.GetAPIVersion(), shape: shape}
	s.mu.RLock()
	fields, ok := s.m[key]
	s.mu.RUnlock()
	if !ok {
		return nil, key, false
	}
	return []any{map[string]any{
		"manager": manager, "operation": "Update", "apiVersion": key.apiVersion,
		"time": now.UTC().Format(time.RFC3339), "fieldsType": "FieldsV1",
		"fieldsV1": runtime.DeepCopyJSONValue(fields),
	}}, key, true
}

// record remembers the field manager's answer out for a create of key's
// shape, when it is the single Update entry of that manager.
func (s *shapes) record(key shapeKey, out *unstructured.Unstructured) {
	mf, _ := managedFieldsOf(out)
	if key.shape == "" || len(mf) != 1 {
		return
	}
	e, _ := mf[0].(map[string]any)
	fields, ok := e["fieldsV1"].(map[string]any)
	if !ok || len(e) != 6 || e["manager"] != key.manager || e["operation"] != "Update" ||
		e["apiVersion"] != key.apiVersion || e["fieldsType"] != "FieldsV1" {
		return
	}
	fields = runtime.DeepCopyJSONValue(fields).(map[string]any)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= maxShapes {
		s.m = map[shapeKey]map[string]any{}
	}
	s.m[key] = fields
}

// shapeOf encodes obj's keys and the kinds of its values, the fields the
// field manager ignores left out, or reports false for an object whose
// field set may depend on its values (see the comment at the top).
func shapeOf(obj map[string]any) (string, bool) {
	md, _ := obj["metadata"].(map[string]any)
	if md == nil {
		return "", false
	}
	if _, ok := md["managedFields"]; ok {
		return "", false
	}
	if a, _ := md["annotations"].(map[string]any); a != nil {
		if _, ok := a[lastApplied]; ok {
			return "", false
		}
	}
	b, ok := appendShape(nil, obj, nil)
	return string(b), ok
}

func appendShape(b []byte, m map[string]any, path []string) ([]byte, bool) {
	keys := make([]string, 0, len(m))
	for k := range m {
		if !ignored(path, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	b = append(b, '{')
	for _, k := range keys {
		b = strconv.AppendQuote(b, k)
		switch v := m[k].(type) {
		case map[string]any:
			var ok bool
			if b, ok = appendShape(b, v, append(path[:len(path):len(path)], k)); !ok {
				return nil, false
			}
		case string:
			b = append(b, 's')
		case int64:
			b = append(b, 'i')
		case float64:
			b = append(b, 'f')
		case bool:
			b = append(b, 'b')
		case nil:
			b = append(b, 'n')
		default: // lists, and anything not JSON
			return nil, false
		}
	}
	return append(b, '}'), true
}
