package change

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"reflect"
	"slices"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// Fingerprint identifies an object's content: objects with equal content
// (as JSON, apart from excluded fields) have equal fingerprints, and
// objects that differ have different ones except with probability 2^-64.
// Fingerprints are stable across processes and versions of this package.
type Fingerprint uint64

// String returns the fingerprint as 16 hex digits.
func (f Fingerprint) String() string { return fmt.Sprintf("%016x", uint64(f)) }

// Volatile returns the fields that change without the object's content
// changing: the Noise fields (its resourceVersion, the record of who wrote
// which field) and its creation time (which only a re-creation changes,
// and the uid tells that). metadata.deletionTimestamp is content: an
// object being deleted is news. Fingerprinters and Dedup leave them out by
// default; add metadata.generation, status or anything else you do not
// care about. It returns a new slice each time, which the caller may
// change.
func Volatile() []string { return append(Noise(), "metadata.creationTimestamp") }

// DefaultExclude is Volatile() as a variable. Its capacity is its length,
// so append(DefaultExclude, ...) makes a new slice and leaves the
// package's alone.
//
// Deprecated: use Volatile, whose result is the caller's own.
var DefaultExclude = []string{
	"metadata.resourceVersion",
	"metadata.managedFields",
	"metadata.creationTimestamp",
}[:3:3]

// Fingerprinter computes fingerprints of objects, leaving out excluded
// fields. Its zero value excludes nothing. A Fingerprinter is immutable
// and safe for concurrent use.
//
// The fingerprint hashes a canonical encoding of the object's JSON value
// (xxhash64, object members combined independently of their order,
// numbers by value), computed by walking the object in place: typed
// objects are not converted, maps are not sorted, and hashing allocates
// nothing for maps decoded from JSON.
type Fingerprinter struct {
	exclude []Pattern
	noScan  bool // exclude has patterns the JSON scanner cannot apply
}

// NewFingerprinter returns a fingerprinter that leaves out the fields the
// patterns name (see Pattern; at most 64), e.g. Volatile().
func NewFingerprinter(exclude ...string) (*Fingerprinter, error) {
	if len(exclude) > 64 {
		return nil, errors.New("fingerprint: more than 64 excluded paths")
	}
	f := &Fingerprinter{}
	for _, s := range exclude {
		p, err := ParsePattern(s)
		if err != nil {
			return nil, fmt.Errorf("fingerprint: %w", err)
		}
		f.exclude = append(f.exclude, p)
	}
	f.noScan = keyedPatterns(f.exclude)
	return f, nil
}

// Sum returns obj's fingerprint. Objects are as for Between. It fails only
// for values that cannot be represented as JSON.
//
// JSON text (json.RawMessage) is hashed as it is scanned, without being
// decoded, to the same fingerprint as its decoded value (unless it has
// duplicate member names), so an informer can fingerprint an event before
// deciding to decode it.
func (f *Fingerprinter) Sum(obj any) (Fingerprint, error) {
	if raw, ok := obj.(json.RawMessage); ok && !f.noScan {
		h := hasherPool.Get().(*hasher)
		h.exclude = f.exclude
		sum, err := h.hashJSON(raw)
		h.exclude, h.buf = nil, h.buf[:0]
		hasherPool.Put(h)
		if err == nil {
			return Fingerprint(sum), nil
		}
		if !errors.Is(err, errSlowPath) {
			return 0, fmt.Errorf("fingerprint: %w", err)
		}
	}
	n, err := nodeOf(obj)
	if err != nil {
		return 0, fmt.Errorf("fingerprint: %w", err)
	}
	h := hasherPool.Get().(*hasher)
	h.exclude = f.exclude
	sum, err := h.hash(n, 1<<len(f.exclude)-1, 0)
	h.exclude, h.err = nil, nil
	h.buf = h.buf[:0]
	hasherPool.Put(h)
	if err != nil {
		return 0, fmt.Errorf("fingerprint: %w", err)
	}
	return Fingerprint(sum), nil
}

var hasherPool = sync.Pool{New: func() any { return &hasher{buf: make([]byte, 0, 256)} }}

// hasher computes the canonical hash of a node:
//
//	null, true, false  H("n"), H("t"), H("f")
//	number             H("i" int64) if integral, else H("d" float64 bits)
//	string             H("s" bytes)
//	array              H("a" len H(item)...)
//	object             H("o" len Σ H(name H(value)))  (sum mod 2^64)
//
// Excluded members and items are left out as if absent.
type hasher struct {
	buf     []byte // scratch; each call appends at the end and truncates back
	exclude []Pattern
	err     error
}

var (
	hashNull  = xxhash.Sum64String("n")
	hashTrue  = xxhash.Sum64String("t")
	hashFalse = xxhash.Sum64String("f")
)

// hash hashes n at depth; live has a bit for every excluded pattern whose
// first depth segments match the path to n.
func (h *hasher) hash(n node, live uint64, depth int) (uint64, error) {
	start := len(h.buf)
	sum, err := h.sumNode(n, live, depth)
	h.buf = h.buf[:start]
	return sum, err
}

// sumNode is hash, leaving its scratch in h.buf.
func (h *hasher) sumNode(n node, live uint64, depth int) (uint64, error) {
	start := len(h.buf)
	switch n.k {
	case kindNull:
		return hashNull, nil
	case kindBool:
		if n.boolean() {
			return hashTrue, nil
		}
		return hashFalse, nil
	case kindNumber:
		if num := n.num(); num.isInt {
			h.buf = binary.LittleEndian.AppendUint64(append(h.buf, 'i'), uint64(num.i))
		} else {
			h.buf = binary.LittleEndian.AppendUint64(append(h.buf, 'd'), math.Float64bits(num.f))
		}
	case kindString:
		h.buf = append(append(h.buf, 's'), n.str()...)
	case kindArray:
		size := n.size()
		h.buf = binary.LittleEndian.AppendUint64(append(h.buf, 'a'), 0)
		count := 0
		for i := range size {
			c, err := n.at(i)
			if err != nil {
				return 0, err
			}
			cl, skip := h.itemLive(live, depth, i, c)
			if skip {
				continue
			}
			ch, err := h.hash(c, cl, depth+1)
			if err != nil {
				return 0, err
			}
			h.buf = binary.LittleEndian.AppendUint64(h.buf, ch)
			count++
		}
		binary.LittleEndian.PutUint64(h.buf[start+1:], uint64(count))
	default:
		if n.typed() && n.rv.Kind() == reflect.Struct {
			return h.hashStruct(n, live, depth)
		}
		var sum, count uint64
		var skip func(string) bool
		if live != 0 {
			skip = func(name string) bool { _, skip := h.fieldLive(live, depth, name); return skip }
		}
		err := n.eachSkip(skip, func(name string, c node) bool {
			cl, _ := h.fieldLive(live, depth, name)
			ch, err := h.hash(c, cl, depth+1)
			if err != nil {
				h.err = err
				return false
			}
			at := len(h.buf)
			h.buf = binary.LittleEndian.AppendUint64(append(h.buf, name...), ch)
			sum += xxhash.Sum64(h.buf[at:])
			h.buf = h.buf[:at]
			count++
			return true
		})
		if err == nil {
			err = h.err
		}
		if err != nil {
			return 0, err
		}
		h.buf = binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(append(h.buf, 'o'), count), sum)
	}
	return xxhash.Sum64(h.buf[start:]), nil
}

// fieldLive returns the live patterns below member name, and whether one
// of them names the member itself (which is then left out).
func (h *hasher) fieldLive(live uint64, depth int, name string) (uint64, bool) {
	var out uint64
	for l := live; l != 0; l &= l - 1 {
		i := bits.TrailingZeros64(l)
		p := h.exclude[i].segs
		if depth < len(p) && p[depth].matches(Segment{Field: name}) {
			if depth+1 == len(p) {
				return 0, true
			}
			out |= 1 << i
		}
	}
	return out, false
}

func (h *hasher) itemLive(live uint64, depth, index int, item node) (uint64, bool) {
	var out uint64
	for l := live; l != 0; l &= l - 1 {
		i := bits.TrailingZeros64(l)
		p := h.exclude[i].segs
		if depth >= len(p) {
			continue
		}
		s := p[depth]
		switch s.kind {
		case pAnyItem:
		case pIndex:
			if s.index != index {
				continue
			}
		case pKeyed:
			if v, ok := child(item, true, s.key); !ok || v.k != kindString || v.str() != s.value {
				continue
			}
		default:
			continue
		}
		if depth+1 == len(p) {
			return 0, true
		}
		out |= 1 << i
	}
	return out, false
}

// hashStruct hashes a typed struct, reading scalar fields directly.
func (h *hasher) hashStruct(n node, live uint64, depth int) (uint64, error) {
	start := len(h.buf)
	var sum, count uint64
	for _, f := range n.te.OrderedFields() {
		cl := uint64(0)
		if live != 0 {
			var skip bool
			if cl, skip = h.fieldLive(live, depth, f.JsonName); skip {
				continue
			}
		}
		fv := f.GetFrom(n.rv)
		if f.CanOmit(fv) {
			continue
		}
		var ch uint64
		switch k := fv.Kind(); {
		case k == reflect.String && !f.TypeEntry.CanConvertToUnstructured():
			at := len(h.buf)
			h.buf = append(append(h.buf, 's'), fv.String()...)
			ch = xxhash.Sum64(h.buf[at:])
			h.buf = h.buf[:at]
		case k >= reflect.Int && k <= reflect.Int64 && !f.TypeEntry.CanConvertToUnstructured():
			at := len(h.buf)
			h.buf = binary.LittleEndian.AppendUint64(append(h.buf, 'i'), uint64(fv.Int()))
			ch = xxhash.Sum64(h.buf[at:])
			h.buf = h.buf[:at]
		case k == reflect.Bool && !f.TypeEntry.CanConvertToUnstructured():
			ch = hashFalse
			if fv.Bool() {
				ch = hashTrue
			}
		default:
			c, err := typedNode(fv, f.TypeEntry)
			if err != nil {
				return 0, err
			}
			if ch, err = h.hash(c, cl, depth+1); err != nil {
				return 0, err
			}
		}
		at := len(h.buf)
		h.buf = binary.LittleEndian.AppendUint64(append(h.buf, f.JsonName...), ch)
		sum += xxhash.Sum64(h.buf[at:])
		h.buf = h.buf[:at]
		count++
	}
	h.buf = binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(append(h.buf, 'o'), count), sum)
	return xxhash.Sum64(h.buf[start:]), nil
}

// WithoutNoise returns obj without the metadata fields every write changes
// without changing the object (resourceVersion, managedFields), sharing
// everything else with obj: what a diff of two stored states compares.
func WithoutNoise(obj map[string]any) map[string]any {
	return WithoutMetadata(obj, noiseFields[:]...)
}

// noiseFields are the metadata members WithoutNoise leaves out.
var noiseFields = [...]string{"resourceVersion", "managedFields"}

// IsNoise reports whether name is a metadata member WithoutNoise leaves
// out, for encoders that skip them instead of copying the object.
func IsNoise(name string) bool { return slices.Contains(noiseFields[:], name) }

// WithoutMetadata returns obj without the named members of its metadata,
// sharing everything else with obj (which it does not modify).
func WithoutMetadata(obj map[string]any, fields ...string) map[string]any {
	md, ok := obj["metadata"].(map[string]any)
	if !ok {
		return obj
	}
	out := maps.Clone(obj)
	md = maps.Clone(md)
	for _, f := range fields {
		delete(md, f)
	}
	out["metadata"] = md
	return out
}
