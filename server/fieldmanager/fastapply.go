package fieldmanager

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A manager that applies again the configuration it applied last, with
// only values changed, changes nothing in managedFields but the time of
// its Apply entry: the applied configuration's field set is the one it
// owns, so nothing is pruned or added; no one else owns any of those
// fields, so nothing conflicts or is taken; and the merged object is the
// live object with the applied values (and when those are the live ones,
// even the time stays). fastApply recognises that case by
// walking the applied configuration, the live object and the entries'
// FieldsV1 trees directly, without the field manager's typed conversions,
// merge and managedFields decoding (about a thousand allocations for a
// small ConfigMap). Whatever it is not sure of — a list, a null, a field
// added or dropped, a changed type, metadata beyond labels and
// annotations, a last-applied annotation, other managers' fields, another
// API version — it leaves to the field manager. Config.Verify checks every
// answer against the field manager's.
//
// The applied values are not checked against the schema again: each leaf
// has the type of the live value it replaces, which the schema admitted
// when it was applied. (After a CRD update that drops a field, the field
// manager would refuse an apply still setting it; fastApply writes it, and
// the object service's pruning drops it.)

// lastApplied is kubectl's client-side apply annotation, which the field
// manager migrates (lastAppliedManager, lastAppliedUpdater).
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// maxUpdateManagers is the field manager's cap on Update entries beyond
// which it merges the oldest.
const maxUpdateManagers = 10

// fastApply returns the object manager's apply of patch to live through
// subresource results in, and true; or false when only the field manager
// can tell. reset is as for fastUpdate; now stamps the entry.
func fastApply(reset, subresource string, live, patch *unstructured.Unstructured, manager string, now time.Time) (*unstructured.Unstructured, bool) {
	liveMF, ok := managedFieldsOf(live)
	if !ok || len(liveMF) == 0 {
		return nil, false
	}
	version := live.GetAPIVersion()
	if patch.GetAPIVersion() != version || patch.GetKind() != live.GetKind() || version == "" {
		return nil, false
	}
	pmd, ok := patch.Object["metadata"].(map[string]any)
	if !ok {
		return nil, false
	}
	lmd, _ := live.Object["metadata"].(map[string]any)
	for k, v := range pmd {
		switch k {
		case "name", "namespace":
			if v != lmd[k] {
				return nil, false
			}
		case "labels", "annotations":
		default:
			return nil, false
		}
	}
	if hasAnnotation(lmd, lastApplied) || hasAnnotation(pmd, lastApplied) {
		return nil, false
	}
	mine, updates := -1, 0
	for i, e := range liveMF {
		e, ok := e.(map[string]any)
		if !ok {
			return nil, false
		}
		if e["operation"] == "Update" {
			updates++
		}
		sub, _ := e["subresource"].(string)
		if e["manager"] == manager && e["operation"] == "Apply" && sub == subresource {
			if mine >= 0 || e["apiVersion"] != version || e["fieldsType"] != "FieldsV1" {
				return nil, false
			}
			mine = i
		}
	}
	if mine < 0 || updates > maxUpdateManagers {
		return nil, false
	}
	var paths [][]string
	if !appliedLeaves(patch.Object, nil, &paths) || len(paths) == 0 {
		return nil, false
	}
	own, _ := liveMF[mine].(map[string]any)["fieldsV1"].(map[string]any)
	if n, ok := fieldLeaves(own); !ok || n != len(paths) {
		return nil, false
	}
	out := live.DeepCopy()
	changed := false
	for _, p := range paths {
		if p[0] == reset {
			return nil, false
		}
		for i, e := range liveMF {
			fields, _ := e.(map[string]any)["fieldsV1"].(map[string]any)
			if i == mine {
				if leaf, ok := node(fields, p); !ok || len(leaf) != 0 {
					return nil, false
				}
			} else if owns(fields, p) {
				return nil, false
			}
		}
		// The live value it replaces: a scalar of the same type.
		parent := out.Object
		for _, k := range p[:len(p)-1] {
			if parent, ok = parent[k].(map[string]any); !ok {
				return nil, false
			}
		}
		k := p[len(p)-1]
		old, ok := parent[k]
		v := leafAt(patch.Object, p)
		if !ok || !sameType(old, v) {
			return nil, false
		}
		changed = changed || !sameScalar(old, v)
		parent[k] = v
	}
	if hasNull(out.Object) {
		return nil, false
	}
	if !changed {
		// The merge changes nothing: the field manager keeps the entry's
		// time too (managedFieldsUpdater stamps only a change).
		return out, true
	}
	out.Object["metadata"].(map[string]any)["managedFields"] = stamp(liveMF, mine, now)
	return out, true
}

func hasAnnotation(md map[string]any, key string) bool {
	a, _ := md["annotations"].(map[string]any)
	_, ok := a[key]
	return ok
}

// appliedLeaves appends the paths of an applied configuration's scalar
// values: the fields it sets, apiVersion, kind, name and namespace aside
// (the field manager does not track them). It returns false for what
// fastApply leaves to the field manager: a list, a null, an empty map,
// more than maxFastPaths fields.
func appliedLeaves(m map[string]any, path []string, out *[][]string) bool {
	if len(m) == 0 {
		return false
	}
	for k, v := range m {
		if len(path) == 0 && (k == "apiVersion" || k == "kind") || len(path) == 1 && path[0] == "metadata" && stripped[k] {
			continue
		}
		p := append(path[:len(path):len(path)], k)
		switch v := v.(type) {
		case map[string]any:
			if !appliedLeaves(v, p, out) {
				return false
			}
		case string, bool, int64, float64:
			if len(*out) == maxFastPaths {
				return false
			}
			*out = append(*out, p)
		default:
			return false
		}
	}
	return true
}

// fieldLeaves counts a FieldsV1 tree's leaves; false when it has anything
// but fields ("f:" elements): list items, values, or a map's own entry.
func fieldLeaves(fields map[string]any) (int, bool) {
	n := 0
	for k, v := range fields {
		sub, ok := v.(map[string]any)
		if !ok || !strings.HasPrefix(k, "f:") {
			return 0, false
		}
		if len(sub) == 0 {
			n++
			continue
		}
		c, ok := fieldLeaves(sub)
		if !ok {
			return 0, false
		}
		n += c
	}
	return n, true
}

// node returns the FieldsV1 tree's node at path.
func node(fields map[string]any, path []string) (map[string]any, bool) {
	for _, k := range path {
		next, ok := fields["f:"+k].(map[string]any)
		if !ok {
			return nil, false
		}
		fields = next
	}
	return fields, true
}

func leafAt(m map[string]any, path []string) any {
	for _, k := range path[:len(path)-1] {
		m = m[k].(map[string]any)
	}
	return m[path[len(path)-1]]
}

// hasNull reports whether a decoded JSON value holds a null anywhere (the
// field manager's typed round trip may drop them).
func hasNull(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		for _, e := range v {
			if hasNull(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if hasNull(e) {
				return true
			}
		}
	}
	return false
}
