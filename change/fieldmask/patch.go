package fieldmask

import (
	stdjson "encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strconv"

	"sigs.k8s.io/json"
)

// Patch is a parsed RFC 6902 JSON Patch restricted to the operations a
// delta event carries: add, remove and replace (issue 26's watchDeltas).
// A Patch is immutable after ParsePatch and safe for concurrent use; Apply
// hands its values to the documents it builds, so those values are shared
// by every result of the same Patch and must not be modified.
type Patch struct {
	ops []patchOp
}

type patchOp struct {
	op       string // "add", "remove" or "replace"
	path     string
	segments []string // nil for the whole document ("")
	value    any
}

// MaxPatchOps bounds the operations of a patch ParsePatch accepts.
const MaxPatchOps = 100_000

// ParsePatch parses an RFC 6902 JSON Patch of add, remove and replace
// operations. Numbers in values are decoded as int64 where they fit, else
// float64, as the client decodes objects. The error names the offending
// operation.
func ParsePatch(data []byte) (Patch, error) {
	var raw []struct {
		Op    string              `json:"op"`
		Path  *string             `json:"path"`
		Value *stdjson.RawMessage `json:"value"` // *: absent and null differ
	}
	if err := json.UnmarshalCaseSensitivePreserveInts(data, &raw); err != nil {
		return Patch{}, fmt.Errorf("json patch: %w", err)
	}
	if len(raw) > MaxPatchOps {
		return Patch{}, fmt.Errorf("json patch: more than %d operations", MaxPatchOps)
	}
	p := Patch{ops: make([]patchOp, 0, len(raw))}
	for i, r := range raw {
		op := patchOp{op: r.Op}
		switch r.Op {
		case "add", "replace":
			if r.Value == nil {
				return Patch{}, fmt.Errorf("json patch: operation %d (%s): no value", i, r.Op)
			}
			if err := json.UnmarshalCaseSensitivePreserveInts(*r.Value, &op.value); err != nil {
				return Patch{}, fmt.Errorf("json patch: operation %d (%s): value: %w", i, r.Op, err)
			}
		case "remove":
		default:
			return Patch{}, fmt.Errorf("json patch: operation %d: unsupported op %q (add, remove and replace only)", i, r.Op)
		}
		if r.Path == nil {
			return Patch{}, fmt.Errorf("json patch: operation %d (%s): no path", i, r.Op)
		}
		op.path = *r.Path
		if op.path != "" {
			ptr, err := parsePointer(op.path)
			if err != nil {
				return Patch{}, fmt.Errorf("json patch: operation %d (%s): %w", i, r.Op, err)
			}
			op.segments = ptr.segments
		} else if r.Op == "remove" {
			return Patch{}, fmt.Errorf("json patch: operation %d: remove of the whole document", i)
		}
		p.ops = append(p.ops, op)
	}
	return p, nil
}

// Len is the number of operations.
func (p Patch) Len() int { return len(p.ops) }

// Paths returns the operations' paths, in order.
func (p Patch) Paths() []string {
	out := make([]string, len(p.ops))
	for i, op := range p.ops {
		out[i] = op.path
	}
	return out
}

// Without returns p without the operations whose path is under (or is)
// pointer prefix, given as its segments.
func (p Patch) Without(prefix ...string) Patch {
	out := Patch{ops: make([]patchOp, 0, len(p.ops))}
	for _, op := range p.ops {
		if len(op.segments) >= len(prefix) && reflect.DeepEqual(op.segments[:len(prefix)], prefix) {
			continue
		}
		out.ops = append(out.ops, op)
	}
	return out
}

// Apply applies the patch to doc, a JSON value as encoding/json decodes
// it, and returns the result. doc is never modified: Apply copies the maps
// and lists on the paths it changes (copy-on-write) and shares everything
// else with doc, so the cost is that of the paths, not of the document.
// The result must not be modified where it shares doc's values. An
// operation that cannot apply (a missing parent, a remove or replace of
// nothing, an index out of range) is an error naming it, and then nothing
// is returned.
func (p Patch) Apply(doc any) (any, error) {
	a := applier{owned: map[uintptr]bool{}}
	for i, op := range p.ops {
		var err error
		doc, err = a.apply(doc, op)
		if err != nil {
			return nil, fmt.Errorf("json patch: operation %d (%s %s): %w", i, op.op, op.path, err)
		}
	}
	return doc, nil
}

// applier applies one patch. owned holds the maps it made itself, which
// later operations of the same patch may change in place.
type applier struct {
	owned map[uintptr]bool
}

var errNoPath = errors.New("path not found")

func (a *applier) apply(doc any, op patchOp) (any, error) {
	if op.segments == nil {
		return op.value, nil // add or replace of the whole document
	}
	return a.at(doc, op.segments, op)
}

// at returns a copy of node (or node itself if this patch made it) with op
// applied at segments below it.
func (a *applier) at(node any, segments []string, op patchOp) (any, error) {
	s, last := segments[0], len(segments) == 1
	switch c := node.(type) {
	case map[string]any:
		child, ok := c[s]
		if !last && !ok {
			return nil, errNoPath
		}
		var v any
		switch {
		case !last:
			var err error
			if v, err = a.at(child, segments[1:], op); err != nil {
				return nil, err
			}
		case op.op == "remove" || op.op == "replace":
			if !ok {
				return nil, errNoPath
			}
			v = op.value
		default:
			v = op.value
		}
		m := a.own(c)
		if last && op.op == "remove" {
			delete(m, s)
		} else {
			m[s] = v
		}
		return m, nil
	case []any:
		return a.atList(c, s, segments, op)
	case nil:
		return nil, errNoPath
	default:
		return nil, fmt.Errorf("%w: %T at %q is not a container", errNoPath, node, s)
	}
}

func (a *applier) atList(c []any, s string, segments []string, op patchOp) (any, error) {
	last := len(segments) == 1
	if last && op.op == "add" {
		i := len(c)
		if s != "-" {
			var ok bool
			if i, ok = listIndex(s, len(c)+1); !ok {
				return nil, fmt.Errorf("%w: index %q of a list of %d", errNoPath, s, len(c))
			}
		}
		out := make([]any, 0, len(c)+1)
		out = append(append(append(out, c[:i]...), op.value), c[i:]...)
		return out, nil
	}
	i, ok := listIndex(s, len(c))
	if !ok {
		return nil, fmt.Errorf("%w: index %q of a list of %d", errNoPath, s, len(c))
	}
	if last && op.op == "remove" {
		return append(append(make([]any, 0, len(c)-1), c[:i]...), c[i+1:]...), nil
	}
	v := op.value
	if !last {
		var err error
		if v, err = a.at(c[i], segments[1:], op); err != nil {
			return nil, err
		}
	}
	out := append([]any(nil), c...)
	out[i] = v
	return out, nil
}

// listIndex is s as an index below n: decimal, no leading zeros.
func listIndex(s string, n int) (int, bool) {
	if s == "" || (len(s) > 1 && s[0] == '0') || s[0] == '-' || s[0] == '+' {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i >= n {
		return 0, false
	}
	return i, true
}

// own returns m itself if this patch made it, else a copy that it now owns.
func (a *applier) own(m map[string]any) map[string]any {
	if a.owned[reflect.ValueOf(m).Pointer()] {
		return m
	}
	c := maps.Clone(m)
	if c == nil {
		c = map[string]any{}
	}
	a.owned[reflect.ValueOf(c).Pointer()] = true
	return c
}
