package fieldmanager

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// An ordinary update by a manager that already owns every field it changes
// leaves managedFields as they were, but for that manager's time: the
// field manager's merge gives the changed fields to the manager (which has
// them), takes them from no one (no one else has them), adds and removes
// nothing, and stamps the entry with the time of the change. fastUpdate
// recognises that case by walking the two objects and the entries' FieldsV1
// trees directly, and answers it without the full merge (decoding every
// entry, converting both objects to typed values and comparing them), which
// is most of the cost of tracking an update. Whatever it is not sure of —
// a key added or removed, a changed list, a changed type, a field the
// manager does not own alone, entries the client changed, another API
// version — it leaves to the field manager. Config.Verify checks every
// answer against the field manager's.

// maxFastPaths bounds the changed fields fastUpdate checks one by one.
const maxFastPaths = 32

// stripped are the metadata fields the field manager never tracks
// (apimachinery's stripMeta manager): a difference there is no field change.
var stripped = map[string]bool{
	"name": true, "namespace": true, "creationTimestamp": true, "selfLink": true, "uid": true,
	"clusterName": true, "generation": true, "managedFields": true, "resourceVersion": true,
}

// fastUpdate returns the managedFields obj gets when manager updates live to
// obj through subresource, and true; or false when only the field manager
// can tell. now is the time the change is stamped with.
// reset is the top-level field the subresource's writes leave alone ("":
// none): a change there is the field manager's to judge.
func fastUpdate(reset, subresource string, live, obj *unstructured.Unstructured, manager string, now time.Time) ([]any, bool) {
	liveMF, ok := managedFieldsOf(live)
	if !ok || len(liveMF) == 0 {
		return nil, false
	}
	newMF, ok := managedFieldsOf(obj)
	if !ok || !jsonEqual(liveMF, newMF) {
		return nil, false
	}
	version := obj.GetAPIVersion()
	if live.GetAPIVersion() != version {
		return nil, false
	}
	mine := -1
	for i, e := range newMF {
		e, ok := e.(map[string]any)
		if !ok {
			return nil, false
		}
		sub, _ := e["subresource"].(string)
		if e["manager"] == manager && e["operation"] == "Update" && sub == subresource {
			if e["apiVersion"] != version || e["fieldsType"] != "FieldsV1" {
				return nil, false
			}
			mine = i
		}
	}
	if mine < 0 {
		return nil, false
	}
	var paths [][]string
	if !changedLeaves(live.Object, obj.Object, nil, &paths) {
		return nil, false
	}
	if len(paths) == 0 {
		return newMF, true
	}
	for _, p := range paths {
		if p[0] == reset {
			return nil, false
		}
		for i, e := range newMF {
			fields, _ := e.(map[string]any)["fieldsV1"].(map[string]any)
			if owns(fields, p) != (i == mine) {
				return nil, false
			}
		}
	}
	return stamp(newMF, mine, now), true
}

// stamp returns a copy of the entries mf with entry mine's time set to
// now, sorted as the field manager encodes them.
func stamp(mf []any, mine int, now time.Time) []any {
	out := make([]any, len(mf))
	copy(out, mf)
	stamped := make(map[string]any, len(mf[mine].(map[string]any)))
	for k, v := range mf[mine].(map[string]any) {
		stamped[k] = v
	}
	stamped["time"] = now.UTC().Format(time.RFC3339)
	out[mine] = stamped
	sortEntries(out)
	return out
}

func managedFieldsOf(u *unstructured.Unstructured) ([]any, bool) {
	md, _ := u.Object["metadata"].(map[string]any)
	mf, ok := md["managedFields"].([]any)
	return mf, ok
}

// changedLeaves appends the paths (map keys from the object's root) of the
// scalar values that differ between a and b. It returns false for a
// difference only the field manager can judge: a key in one and not the
// other, a changed list, a value of another type.
func changedLeaves(a, b map[string]any, path []string, out *[][]string) bool {
	n := 0
	for k := range b {
		if !ignored(path, k) {
			n++
		}
	}
	for k, va := range a {
		if ignored(path, k) {
			continue
		}
		n--
		vb, ok := b[k]
		if !ok {
			return false
		}
		switch va := va.(type) {
		case map[string]any:
			mb, ok := vb.(map[string]any)
			if !ok || !changedLeaves(va, mb, append(path[:len(path):len(path)], k), out) {
				return false
			}
		case []any:
			if lb, ok := vb.([]any); !ok || !jsonEqual(va, lb) {
				return false
			}
		default:
			if !sameScalar(va, vb) {
				if !sameType(va, vb) || len(*out) == maxFastPaths {
					return false
				}
				*out = append(*out, append(path[:len(path):len(path)], k))
			}
		}
	}
	return n == 0
}

// ignored reports whether the field manager ignores key k under path: the
// root's apiVersion and kind, and the stripped metadata fields.
func ignored(path []string, k string) bool {
	switch len(path) {
	case 0:
		return k == "apiVersion" || k == "kind"
	case 1:
		return path[0] == "metadata" && stripped[k]
	}
	return false
}

// sameType reports whether two JSON scalars have the same type.
func sameType(a, b any) bool {
	switch a.(type) {
	case string:
		_, ok := b.(string)
		return ok
	case bool:
		_, ok := b.(bool)
		return ok
	case int64:
		_, ok := b.(int64)
		return ok
	case float64:
		_, ok := b.(float64)
		return ok
	case nil:
		return b == nil
	}
	return false
}

// sameScalar compares two JSON scalars; values of different types (a
// string and a number) differ.
func sameScalar(a, b any) bool {
	switch a := a.(type) {
	case string:
		b, ok := b.(string)
		return ok && a == b
	case bool:
		b, ok := b.(bool)
		return ok && a == b
	case int64:
		b, ok := b.(int64)
		return ok && a == b
	case float64:
		b, ok := b.(float64)
		return ok && a == b
	case nil:
		return b == nil
	}
	return false
}

// jsonEqual compares two decoded JSON values.
func jsonEqual(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !jsonEqual(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !jsonEqual(a[i], b[i]) {
				return false
			}
		}
		return true
	}
	return sameScalar(a, b)
}

// owns reports whether a FieldsV1 tree names the field at path (map keys
// and struct fields only, "f:" elements).
func owns(fields map[string]any, path []string) bool {
	for _, k := range path {
		next, ok := fields["f:"+k].(map[string]any)
		if !ok {
			return false
		}
		fields = next
	}
	return true
}

// sortEntries orders managedFields entries as apimachinery encodes them:
// by operation, time (seconds), manager, apiVersion, subresource.
func sortEntries(es []any) {
	str := func(e any, k string) string { s, _ := e.(map[string]any)[k].(string); return s }
	unix := func(e any) int64 {
		t, err := time.Parse(time.RFC3339, str(e, "time"))
		if err != nil {
			return 0
		}
		return t.Unix()
	}
	sort.SliceStable(es, func(i, j int) bool {
		p, q := es[i], es[j]
		if a, b := str(p, "operation"), str(q, "operation"); a != b {
			return a < b
		}
		if a, b := unix(p), unix(q); a != b {
			return a < b
		}
		for _, k := range []string{"manager", "apiVersion", "subresource"} {
			if a, b := str(p, k), str(q, k); a != b {
				return a < b
			}
		}
		return false
	})
}
