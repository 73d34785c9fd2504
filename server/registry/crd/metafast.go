package crd

import (
	"time"
)

// plainMetadata reports whether obj's metadata is already what Kubernetes'
// objectmeta coercion (decode into metav1.ObjectMeta and back) would
// produce, so the costly round trip through JSON can be skipped: only
// known fields, each present with its canonical type and a non-empty value.
// Anything unusual (ownerReferences, managedFields, nulls, empty maps,
// non-canonical timestamps) takes the exact path.
func plainMetadata(obj map[string]interface{}) bool {
	raw, ok := obj["metadata"]
	if !ok {
		return true
	}
	md, ok := raw.(map[string]interface{})
	if !ok || len(md) == 0 {
		return false // the round trip would add creationTimestamp: null
	}
	for k, v := range md {
		switch k {
		case "name", "generateName", "namespace", "uid", "resourceVersion":
			if s, ok := v.(string); !ok || s == "" {
				return false
			}
		case "creationTimestamp", "deletionTimestamp":
			s, ok := v.(string)
			if !ok {
				return false
			}
			t, err := time.Parse(time.RFC3339, s)
			if err != nil || t.UTC().Format(time.RFC3339) != s {
				return false
			}
		case "generation", "deletionGracePeriodSeconds":
			if n, ok := v.(int64); !ok || n == 0 {
				return false
			}
		case "labels", "annotations":
			m, ok := v.(map[string]interface{})
			if !ok || len(m) == 0 {
				return false
			}
			for _, x := range m {
				if _, ok := x.(string); !ok {
					return false
				}
			}
		case "finalizers":
			l, ok := v.([]interface{})
			if !ok || len(l) == 0 {
				return false
			}
			for _, x := range l {
				if _, ok := x.(string); !ok {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}
