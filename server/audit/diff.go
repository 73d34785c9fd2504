package audit

import (
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/change"
)

// Annotations objwatch adds to a record (values are strings, as every
// audit.k8s.io/v1 annotation).
const (
	// PatchAnnotation is the RFC 6902 JSON Patch from the stored old
	// object to the stored new one, as JSON text; "[]" for an update that
	// changed nothing.
	PatchAnnotation = "objwatch.io/patch"
	// ChangedPathsAnnotation is a JSON array of the changed fields' paths
	// (change package syntax: spec.replicas, data.key).
	ChangedPathsAnnotation = "objwatch.io/changed-paths"
	// ResourceVersionAnnotation is the resourceVersion the write stored
	// (the unchanged one for an update that changed nothing).
	ResourceVersionAnnotation = "objwatch.io/resource-version"
	// SeqAnnotation numbers records from 1, across rotated files.
	SeqAnnotation = "objwatch.io/seq"
	// PrevHashAnnotation is the hex SHA-256 of the previous record's line
	// (without its newline); 64 zeros for the first record.
	PrevHashAnnotation = "objwatch.io/prev-hash"
)

// emptyDiff is what a write that changed nothing records.
var emptyDiff = []byte("[]")

// clean returns o's content without the noise fields (change.WithoutNoise).
func clean(o *unstructured.Unstructured) map[string]any {
	if o == nil {
		return nil
	}
	return change.WithoutNoise(o.Object)
}

// Diff returns the JSON Patch and the changed paths, both as JSON text,
// from old to new: a create is one add of the whole object at the root, a
// completed deletion one remove of it.
func Diff(old, new *unstructured.Unstructured) (patch, paths []byte, err error) {
	o, n := clean(old), clean(new)
	var ops []change.Operation
	var ps []string
	switch {
	case o == nil && n == nil:
		return emptyDiff, emptyDiff, nil
	case o == nil:
		ops = []change.Operation{{Op: change.OpAdd, Path: "", Value: n}}
		ps = topLevel(n)
	case n == nil:
		ops = []change.Operation{{Op: change.OpRemove, Path: ""}}
		ps = topLevel(o)
	default:
		d := change.Between(o, n)
		if err := d.Err(); err != nil {
			return nil, nil, err
		}
		p := d.Patch()
		if p == nil {
			p = []change.Operation{}
		}
		ops, ps = p, d.Paths()
	}
	if ps == nil {
		ps = []string{}
	}
	patch = appendPatch(nil, ops)
	paths = appendStrings(nil, ps)
	return patch, paths, nil
}

func topLevel(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
