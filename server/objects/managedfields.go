package objects

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/server/jsonenc"
)

// Encoding metadata.managedFields for storage.
//
// A tracked object's managedFields are a deep tree of small maps (every
// field an entry names is an object of its own in fieldsV1), and
// encoding/json encodes each through reflection, sorting every map's keys
// into a fresh slice: for a small ConfigMap that is as much work as the
// rest of the object. Package jsonenc encodes such decoded JSON values
// directly, byte for byte as encoding/json.Marshal does, and the stored
// form embeds its output as a json.RawMessage.

// managedFieldsForStorage replaces m's metadata.managedFields, when they
// are there and all plain JSON values, with their encoding, and returns
// what puts the decoded value back (m may be the object being written).
func managedFieldsForStorage(m map[string]any) (restore func()) {
	md, _ := m["metadata"].(map[string]any)
	mf, ok := md["managedFields"].([]any)
	if !ok {
		return func() {}
	}
	b, ok := jsonenc.Append(make([]byte, 0, 512), mf)
	if !ok {
		return func() {}
	}
	md["managedFields"] = json.RawMessage(b)
	return func() { md["managedFields"] = mf }
}

// setManagedFields sets obj's metadata.managedFields to mf itself (where
// unstructured.SetNestedField would set a deep copy).
func setManagedFields(obj *unstructured.Unstructured, mf any) {
	md, ok := obj.Object["metadata"].(map[string]any)
	if !ok {
		md = map[string]any{}
		obj.Object["metadata"] = md
	}
	md["managedFields"] = mf
}
