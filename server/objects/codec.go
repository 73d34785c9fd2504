package objects

import (
	"bytes"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/json"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// Decode parses a JSON object, with numbers as int64 or float64, as the
// service decodes every object: a request body, or a cached object.
func Decode(b []byte) (*unstructured.Unstructured, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return nil, apistatus.BadRequest("the body of the request is not a JSON object")
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, apistatus.BadRequest("the body of the request was malformed: %v", err)
	}
	if md, ok := m["metadata"]; ok && md != nil {
		if _, ok := md.(map[string]any); !ok {
			return nil, apistatus.BadRequest("metadata must be an object")
		}
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// FromStorage decodes a stored value and stamps it with its revision and
// the apiVersion of the version it is served as.
func FromStorage(res *registry.Resource, kv storage.KeyValue) (*unstructured.Unstructured, error) {
	var m map[string]any
	if err := json.Unmarshal(kv.Value, &m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
	}
	if err := res.Strategy.Stored(m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(res.APIVersion())
	u.SetKind(res.Kind)
	u.SetResourceVersion(strconv.FormatInt(kv.ModRevision, 10))
	return u, nil
}

// ToStorage encodes obj for storage: without resourceVersion, which is the
// etcd revision and not stored.
func ToStorage(obj *unstructured.Unstructured) ([]byte, error) {
	rv := obj.GetResourceVersion()
	unstructured.RemoveNestedField(obj.Object, "metadata", "resourceVersion")
	var b []byte
	m, err := registry.StorageForm(obj.Object)
	if err == nil {
		b, err = json.Marshal(m)
	}
	if rv != "" {
		obj.SetResourceVersion(rv)
	}
	return b, err
}

// ParseRV parses a resourceVersion; "" is 0.
func ParseRV(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, apistatus.BadRequest("invalid resource version %q: must be a non-negative integer", s)
	}
	return n, nil
}
