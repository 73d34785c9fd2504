package fieldmanager

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/server/registry"
)

// DropParameter is the Accept media-type parameter that asks the server to
// leave metadata.managedFields out of the objects it returns, as in
// KEP-5958 ("Client Opt-out for managedFields in API Response"):
//
//	Accept: application/json;drop=metadata.managedFields
//
// Its value is a set of field paths separated by '+' (a ',' would end the
// Accept clause); DropManagedFieldsValue is the only one a server
// recognizes, others are ignored, as Kubernetes does.
const (
	DropParameter          = "drop"
	DropManagedFieldsValue = "metadata.managedFields"
)

// DropsManagedFields reports whether the value of a drop parameter names
// metadata.managedFields.
func DropsManagedFields(value string) bool {
	for v := range strings.SplitSeq(value, "+") {
		if strings.TrimSpace(v) == DropManagedFieldsValue {
			return true
		}
	}
	return false
}

// WithoutManagedFields returns obj's content without
// metadata.managedFields, sharing the rest (registry.WithoutManagedFields).
func WithoutManagedFields(obj map[string]any) map[string]any {
	return registry.WithoutManagedFields(obj)
}

// WithoutManagedFieldsObject is WithoutManagedFields for an Unstructured.
func WithoutManagedFieldsObject(obj *unstructured.Unstructured) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: WithoutManagedFields(obj.Object)}
}

// DropManagedFieldsJSON returns the JSON object b without
// metadata.managedFields. Only the top level and metadata are decoded
// (as raw values: numbers and every other field are copied verbatim); b
// itself is returned when it has no managedFields. The output's keys are
// sorted, as encoding/json writes a map (which is how the server encodes
// objects).
func DropManagedFieldsJSON(b []byte) ([]byte, error) {
	if !bytes.Contains(b, []byte(`"managedFields"`)) {
		return b, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("fields: drop managedFields: %w", err)
	}
	raw, ok := top["metadata"]
	if !ok {
		return b, nil
	}
	var md map[string]json.RawMessage
	if err := json.Unmarshal(raw, &md); err != nil {
		return nil, fmt.Errorf("fields: drop managedFields: metadata: %w", err)
	}
	if _, ok := md["managedFields"]; !ok {
		return b, nil
	}
	delete(md, "managedFields")
	m, err := json.Marshal(md)
	if err != nil {
		return nil, fmt.Errorf("fields: drop managedFields: %w", err)
	}
	top["metadata"] = m
	out, err := json.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("fields: drop managedFields: %w", err)
	}
	return out, nil
}
