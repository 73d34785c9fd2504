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

// Diff returns the JSON Patch and the changed paths, both as JSON text,
// from old to new: a create is one add of the whole object at the root, a
// completed deletion one remove of it. Neither holds the noise fields
// (change.WithoutNoise).
func Diff(old, new *unstructured.Unstructured) (patch, paths []byte, err error) {
	b, end, err := appendDiff(nil, old, new)
	if err != nil {
		return nil, nil, err
	}
	return b[:end:end], b[end:], nil
}

// appendDiff appends Diff's patch, then its paths, to b; the patch ends
// at patchEnd. A create's or deletion's object is encoded as it is
// stored, skipping the noise fields, not copied first.
func appendDiff(b []byte, old, new *unstructured.Unstructured) (_ []byte, patchEnd int, err error) {
	var o, n map[string]any
	if old != nil {
		o = old.Object
	}
	if new != nil {
		n = new.Object
	}
	switch {
	case o == nil && n == nil:
		b = append(b, "[]"...)
		return append(b, "[]"...), 2, nil
	case o == nil:
		b = append(b, `[{"op":"add","path":"","value":`...)
		b = appendWithoutNoise(b, n)
		b = append(b, "}]"...)
		end := len(b)
		return appendKeys(b, n), end, nil
	case n == nil:
		b = append(b, `[{"op":"remove","path":""}]`...)
		end := len(b)
		return appendKeys(b, o), end, nil
	}
	d := change.Between(change.WithoutNoise(o), change.WithoutNoise(n))
	if err := d.Err(); err != nil {
		return b, 0, err
	}
	b = appendPatch(b, d.Patch())
	end := len(b)
	ps := d.Paths()
	if ps == nil {
		ps = []string{}
	}
	return appendStrings(b, ps), end, nil
}

// appendWithoutNoise appends obj as encoding/json encodes it, without the
// noise members of its metadata.
func appendWithoutNoise(b []byte, obj map[string]any) []byte {
	var buf [16]string
	keys := sortedKeys(buf[:0], obj)
	b = append(b, '{')
	for i, k := range keys {
		b = appendKey(b, i == 0, k)
		md, ok := obj[k].(map[string]any)
		if k != "metadata" || !ok {
			b = appendValue(b, obj[k])
			continue
		}
		mkeys := sortedKeys(keys[len(keys):], md)
		b = append(b, '{')
		first := true
		for _, mk := range mkeys {
			if change.IsNoise(mk) {
				continue
			}
			b = appendKey(b, first, mk)
			first = false
			b = appendValue(b, md[mk])
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendKeys appends m's keys, sorted, as a JSON array: the changed paths
// of a create or a deletion (the whole object's top-level fields).
func appendKeys(b []byte, m map[string]any) []byte {
	var buf [16]string
	return appendStrings(b, sortedKeys(buf[:0], m))
}

// sortedKeys appends m's keys to dst and returns them sorted.
func sortedKeys(dst []string, m map[string]any) []string {
	for k := range m {
		dst = append(dst, k)
	}
	slices.Sort(dst)
	return dst
}
