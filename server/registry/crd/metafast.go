package crd

import (
	"time"
)

// canonicalMetadata reports whether obj's metadata is already what
// Kubernetes' objectmeta coercion (decode into metav1.ObjectMeta and back)
// would produce, so the costly round trip through JSON can be skipped: only
// known fields, each present with its canonical type and a non-empty value,
// and managedFields entries in the form the round trip gives them (what
// the field manager writes into every stored object; see
// canonicalManagedFields). Anything unusual (ownerReferences, nulls, empty
// maps, non-canonical timestamps) takes the exact path.
func canonicalMetadata(obj map[string]interface{}) bool {
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
			if !canonicalTime(v) {
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
		case "managedFields":
			if !canonicalManagedFields(v) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// canonicalManagedFields reports whether v is a non-empty list of
// managedFields entries that metav1.ManagedFieldsEntry's decoding and
// encoding leave as they are: only its fields, strings non-empty, the
// time canonical, fieldsV1 a tree of objects (its leaves are {}).
func canonicalManagedFields(v interface{}) bool {
	l, ok := v.([]interface{})
	if !ok || len(l) == 0 {
		return false
	}
	for _, e := range l {
		m, ok := e.(map[string]interface{})
		if !ok || len(m) == 0 {
			return false
		}
		for k, x := range m {
			switch k {
			case "manager", "operation", "apiVersion", "fieldsType", "subresource":
				if s, ok := x.(string); !ok || s == "" {
					return false
				}
			case "time":
				if !canonicalTime(x) {
					return false
				}
			case "fieldsV1":
				if !fieldsTree(x) {
					return false
				}
			default:
				return false
			}
		}
	}
	return true
}

// fieldsTree reports whether v is a JSON object whose values are all such
// objects, as a FieldsV1 set is.
func fieldsTree(v interface{}) bool {
	m, ok := v.(map[string]interface{})
	if !ok {
		return false
	}
	for _, x := range m {
		if !fieldsTree(x) {
			return false
		}
	}
	return true
}

// canonicalTime reports whether v is a timestamp as metav1.Time encodes
// it: RFC 3339 in UTC, whole seconds.
func canonicalTime(v interface{}) bool {
	s, ok := v.(string)
	if !ok {
		return false
	}
	t, err := time.Parse(time.RFC3339, s)
	return err == nil && t.UTC().Format(time.RFC3339) == s
}
