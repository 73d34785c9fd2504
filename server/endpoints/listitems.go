package endpoints

import (
	"encoding/json"
	"fmt"

	"github.com/objwatch/objwatch/server/jsonenc"
	"github.com/objwatch/objwatch/server/registry"
)

// Items of built-in kinds' lists go out without apiVersion and kind, as
// kube-apiserver writes them: its typed encoder sets the list's TypeMeta
// and leaves the items' empty (clients fill them in from the list's kind;
// see apimachinery's UnstructuredList decoding). Custom resources' items
// keep theirs (their objects are served as stored), and so do objects
// outside lists: get, watch events, Tables and PartialObjectMetadata.
//
// The watch cache's items are the objects' JSON, shared by every reader;
// a list writes each item as the runs of its top-level members around the
// two it drops (itemParts), found by scanning the item without copying it.
// An item the scan cannot read (an escaped top-level key, not an object)
// is decoded and encoded again without them.

// bareItems reports whether res's list items go out without apiVersion
// and kind.
func bareItems(res *registry.Resource) bool { return !res.Custom }

// withoutTypeMeta returns obj's members other than apiVersion and kind,
// sharing the values with obj.
func withoutTypeMeta(obj map[string]any) map[string]any {
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		if k != "apiVersion" && k != "kind" {
			out[k] = v
		}
	}
	return out
}

// itemParts is a JSON object without its top-level apiVersion and kind:
// either the runs of raw (each one or more members, with the separators
// between them) that the object is, joined by commas, or, when raw could
// not be scanned, other bytes (whole).
type itemParts struct {
	raw   []byte
	runs  [3][2]int32
	n     int8   // runs used
	whole []byte // set when raw was re-encoded
}

// len is the length of the object written.
func (p *itemParts) len() int {
	if p.whole != nil {
		return len(p.whole)
	}
	n := 2 + max(int(p.n)-1, 0) // braces and commas
	for _, r := range p.runs[:p.n] {
		n += int(r[1] - r[0])
	}
	return n
}

// writeTo writes the object to w.
func (p *itemParts) writeTo(w interface {
	Write([]byte) (int, error)
	WriteByte(byte) error
}) {
	if p.whole != nil {
		w.Write(p.whole)
		return
	}
	w.WriteByte('{')
	for i, r := range p.runs[:p.n] {
		if i > 0 {
			w.WriteByte(',')
		}
		w.Write(p.raw[r[0]:r[1]])
	}
	w.WriteByte('}')
}

// bareItem is the JSON object raw without its top-level apiVersion and
// kind members.
func bareItem(raw []byte) (itemParts, error) {
	if p, ok := scanTypeMeta(raw); ok {
		return p, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return itemParts{}, fmt.Errorf("list item: %w", err)
	}
	delete(obj, "apiVersion")
	delete(obj, "kind")
	b, err := json.Marshal(obj)
	if err != nil {
		return itemParts{}, fmt.Errorf("list item: %w", err)
	}
	return itemParts{whole: b}, nil
}

// scanTypeMeta finds the runs of raw's top-level members around
// apiVersion and kind. It reads keys and skips values without decoding
// them, and stops once it found both. ok is false when raw is not an
// object it can read so (a key with an escape, invalid JSON, 2 GiB).
func scanTypeMeta(raw []byte) (p itemParts, ok bool) {
	if len(raw) >= 1<<31 {
		return p, false
	}
	p.raw = raw
	i := jsonSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return p, false
	}
	end := len(raw) - 1 // the closing brace
	for end > i && isJSONSpace(raw[end]) {
		end--
	}
	if raw[end] != '}' || end == i {
		return p, false
	}
	runStart, runEnd := -1, -1 // the run of kept members being read
	dropped := 0
	i = jsonSpace(raw, i+1)
	for i < end {
		keyStart := i
		key, after, ok := jsonenc.ReadKey(raw, i)
		if !ok {
			return p, false
		}
		i = jsonSpace(raw, after)
		if i >= end || raw[i] != ':' {
			return p, false
		}
		if i, ok = jsonenc.SkipValue(raw, jsonSpace(raw, i+1)); !ok || i > end {
			return p, false
		}
		if drop := string(key) == "apiVersion" || string(key) == "kind"; drop {
			if runStart >= 0 {
				p.runs[p.n] = [2]int32{int32(runStart), int32(runEnd)}
				p.n++
				runStart = -1
			}
			dropped++
		} else {
			if runStart < 0 {
				runStart = keyStart
			}
			runEnd = i
		}
		i = jsonSpace(raw, i)
		switch {
		case i < end && raw[i] == ',':
			i = jsonSpace(raw, i+1)
			if dropped == 2 && runStart < 0 {
				// Both found: the rest is one run, up to the brace.
				if i >= end {
					return p, false // a trailing comma
				}
				runStart, runEnd = i, end
				for runEnd > runStart && isJSONSpace(raw[runEnd-1]) {
					runEnd--
				}
				i = end
			}
		case i != end:
			return p, false
		}
	}
	if runStart >= 0 {
		p.runs[p.n] = [2]int32{int32(runStart), int32(runEnd)}
		p.n++
	}
	return p, true
}

func jsonSpace(raw []byte, i int) int {
	for i < len(raw) && isJSONSpace(raw[i]) {
		i++
	}
	return i
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
