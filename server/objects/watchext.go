package objects

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/change/fieldmask"
	"github.com/objwatch/objwatch/server/jsonenc"
	"github.com/objwatch/objwatch/server/jsonpatch"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// The watch extensions (docs/WATCH-EXTENSIONS.md): a field mask, which
// holds back the MODIFIED events that change no masked value; a
// projection, which trims every event's object to the masked values and
// the object's identity; and delta events, whose MODIFIED carries an RFC
// 6902 patch from the client's last copy of the object instead of the
// object. A watch that asks for none of them takes none of this code.
//
// Every decision is made from the event alone, so that a watch resumed
// from any resourceVersion its stream gave, with the same options, gets
// exactly the events after it: a MODIFIED is sent when a masked value
// differs between the object's previous and new state (never depending on
// what this stream sent). The patch's base is the object's previous state
// (every change of an object a watch selects is sent to it), or, with a
// projection, the previous state's projection with its identity fields
// forced by the patch, which equals every earlier projection with the same
// masked values (fieldmask.Mask.Project); only a mask with deltas and no
// projection needs the stream's own copy of each object (shaper.copies).
//
// On the watch cache's path, each projection, decision and frame is made
// once per event for every watch with the same options (shapeMemo), as
// the full frame is.

// shapeOptions are a watch's extensions.
type shapeOptions struct {
	mask    *fieldmask.Mask
	project bool
	deltas  bool
	drop    bool // managedFields left out (the watch's Accept header)
}

func (o shapeOptions) on() bool { return o.mask != nil || o.deltas }

// key names the options in the memo: watches with equal keys share frames.
func (o shapeOptions) key() string {
	k := ""
	if o.mask != nil {
		k = o.mask.String()
	}
	return fmt.Sprintf("%t%t%t|%s", o.project, o.deltas, o.drop, k)
}

// shaper renders one watch's events under its options. frame and
// decodedItem belong to the goroutine serving the watch; sends, which
// reads only what newShaper set and the memo (safe for concurrent use),
// is also asked by the watch cache's goroutine (watchcache.WatchOptions.Hold).
type shaper struct {
	shapeOptions
	optKey  string
	maskKey string
	memo    *shapeMemo
	// copies, with a mask, deltas and no projection: each object's version
	// the client holds (the last one sent), the base of its next patch. A
	// MODIFIED of an object the stream has not sent goes out whole.
	copies    map[string]*watchcache.Object
	decCopies map[string]map[string]any // the same for a watch from etcd
}

func newShaper(o shapeOptions, memo *shapeMemo) *shaper {
	if !o.on() {
		return nil
	}
	s := &shaper{shapeOptions: o, optKey: o.key(), memo: memo}
	if o.mask != nil {
		s.maskKey = o.mask.String()
		if o.deltas && !o.project {
			s.copies = map[string]*watchcache.Object{}
			s.decCopies = map[string]map[string]any{}
		}
	}
	return s
}

// sends reports whether the watch sends it: false for a MODIFIED that
// changes no masked value.
func (s *shaper) sends(it watchcache.Item) bool {
	prev := it.Prev()
	if s.mask == nil || it.Type != Modified || prev == nil {
		return true
	}
	a, err := s.memo.projection(prev, s.mask, s.maskKey, s.drop)
	if err != nil {
		return true
	}
	b, err := s.memo.projection(it.Object, s.mask, s.maskKey, s.drop)
	if err != nil {
		return true
	}
	return s.mask.Changed(a.value, b.value)
}

// frame is the frame a watch of the cache sends for it, which the cache
// let through (sends, as watchcache.WatchOptions.Hold). full is the frame
// the watch sends without extensions (with or without managedFields).
func (s *shaper) frame(it watchcache.Item, full func() []byte) []byte {
	key := it.Object.Key
	var base *watchcache.Object
	switch {
	case it.Type != Modified || !s.deltas:
	case s.copies != nil:
		base = s.copies[key]
	default:
		base = it.Prev()
	}
	if s.copies != nil {
		if it.Type == Deleted {
			delete(s.copies, key)
		} else {
			s.copies[key] = it.Object
		}
	}
	if base != nil {
		if b, ok := s.memo.delta(it, base, s); ok {
			return b
		}
	}
	if !s.project {
		return full()
	}
	b, err := s.memo.projectedFrame(it, s)
	if err != nil {
		return full() // not an object this server decodes: whole
	}
	return b
}

// decodedItem shapes an event of a watch served from etcd (decoded
// objects, nothing shared): it returns the item to send and whether to
// send it. prev is the object's previous state (nil if none).
func (s *shaper) decodedItem(typ string, obj, prev *unstructured.Unstructured, at time.Time) (Item, bool) {
	newView := s.view(obj.Object)
	if typ == Modified && s.mask != nil && prev != nil && !s.mask.Changed(s.view(prev.Object), newView) {
		return Item{}, false
	}
	key := obj.GetNamespace() + "/" + obj.GetName()
	var base map[string]any
	switch {
	case typ != Modified || !s.deltas:
	case s.decCopies != nil:
		base = s.decCopies[key]
	case prev != nil:
		base = s.view(prev.Object)
	}
	if s.decCopies != nil {
		if typ == Deleted {
			delete(s.decCopies, key)
		} else {
			s.decCopies[key] = newView
		}
	}
	if s.project || base != nil {
		whole, ok := jsonenc.Append(nil, newView)
		if ok {
			if base != nil {
				if b, ok := deltaFrame(typ, at, base, newView, len(whole), s.project); ok {
					return Item{Type: typ, Frame: b}, true
				}
			}
			if s.project {
				return Item{Type: typ, Frame: appendEvent(nil, typ, whole, nil, at)}, true
			}
		}
	}
	it := Item{Type: typ, Object: obj}
	if !at.IsZero() {
		it.At = &at
	}
	return it, true
}

// view is obj as this watch sees it: its projection, or obj without
// managedFields when the watch drops them, or obj.
func (s *shaper) view(obj map[string]any) map[string]any {
	if s.project {
		return s.mask.Project(obj)
	}
	if s.drop {
		return registry.WithoutManagedFields(obj)
	}
	return obj
}

// identityPaths are the fields a projection's patch always sets: they may
// differ between the stream's copy and the previous state (events the
// mask held back changed them), and setting them makes the patch apply to
// either. name, namespace, uid, apiVersion and kind never change.
var identityPaths = []struct {
	path string
	get  func(md map[string]any) (any, bool)
}{
	{"/metadata/deletionTimestamp", func(md map[string]any) (any, bool) { v, ok := md["deletionTimestamp"]; return v, ok }},
	{"/metadata/generation", func(md map[string]any) (any, bool) { v, ok := md["generation"]; return v, ok }},
	{"/metadata/resourceVersion", func(md map[string]any) (any, bool) { v, ok := md["resourceVersion"]; return v, ok }},
}

// deltaFrame is a MODIFIED frame carrying the patch from base to view,
// both as the watch sees them; ok is false when the patch is not smaller
// than the whole object (wholeLen bytes) or does not encode.
func deltaFrame(typ string, at time.Time, base, view map[string]any, wholeLen int, project bool) ([]byte, bool) {
	ops := jsonpatch.Diff(base, view)
	if project {
		ops = forceIdentity(ops, view)
	}
	patch, ok := jsonpatch.Append(make([]byte, 0, 256), ops)
	if !ok || len(patch) >= wholeLen {
		return nil, false
	}
	id, ok := jsonenc.Append(make([]byte, 0, 192), identityOf(view))
	if !ok {
		return nil, false
	}
	return appendEvent(make([]byte, 0, len(id)+len(patch)+96), typ, id, patch, at), true
}

// forceIdentity sets the identity fields view has with "add" operations
// (which replace a member that exists), replacing any operation on them.
func forceIdentity(ops []jsonpatch.Op, view map[string]any) []jsonpatch.Op {
	md, _ := view["metadata"].(map[string]any)
	out := ops[:0]
	for _, op := range ops {
		forced := false
		for _, p := range identityPaths {
			if op.Path == p.path {
				forced = true
			}
		}
		if !forced {
			out = append(out, op)
		}
	}
	for _, p := range identityPaths {
		if v, ok := p.get(md); ok {
			out = append(out, jsonpatch.Op{Op: "add", Path: p.path, Value: v})
		}
	}
	return out
}

// identityOf is what a delta event's object holds: apiVersion, kind and
// metadata's name, namespace, uid and resourceVersion.
func identityOf(view map[string]any) map[string]any {
	id := map[string]any{}
	for _, k := range []string{"apiVersion", "kind"} {
		if v, ok := view[k]; ok {
			id[k] = v
		}
	}
	md, _ := view["metadata"].(map[string]any)
	m := map[string]any{}
	for _, k := range []string{"name", "namespace", "uid", "resourceVersion"} {
		if v, ok := md[k]; ok {
			m[k] = v
		}
	}
	id["metadata"] = m
	return id
}

// appendEvent appends a watch event's frame:
// {"type":T,"object":OBJ[,"patch":P][,"commitTime":...]}\n, as
// watchcache.Item.Frame encodes its own.
func appendEvent(b []byte, typ string, obj, patch []byte, at time.Time) []byte {
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","object":`...)
	b = append(b, obj...)
	if patch != nil {
		b = append(b, `,"patch":`...)
		b = append(b, patch...)
	}
	if !at.IsZero() {
		b = append(b, `,"commitTime":"`...)
		b = at.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	return append(b, "}\n"...)
}

// shapeMemoSize bounds each of a shapeMemo's generations.
const shapeMemoSize = 4096

// shapeMemo keeps what the watches with extensions make of recent
// watch-cache objects and events, so that each is made once for all the
// watches with the same options: projections (by object and mask) and
// frames (by event, base and options). Like frameMemo it holds two
// generations and forgets the older when the newer is full; what it
// forgets is made again. Safe for concurrent use; mu is a leaf lock, held
// while looking up, never while decoding or encoding.
type shapeMemo struct {
	mu              sync.Mutex
	projCur, projPr map[projKey]*projEntry
	frCur, frPrev   map[shapeFrameKey]*frameEntry
	made            atomic.Int64 // frames made, for tests
}

type projKey struct {
	obj  *watchcache.Object
	mask string
	drop bool
}

type projEntry struct {
	once  sync.Once
	value map[string]any // the projection
	json  []byte
	err   error
}

type shapeFrameKey struct {
	obj, base *watchcache.Object
	typ       string
	at        time.Time
	opts      string
}

type frameEntry struct {
	once sync.Once
	b    []byte
	ok   bool
}

// lookup returns the entry for k in the two generations, adding a new
// one (made by mk) to the current one.
func lookup[K comparable, V any](mu *sync.Mutex, cur, prev *map[K]*V, k K) *V {
	mu.Lock()
	defer mu.Unlock()
	if e := (*cur)[k]; e != nil {
		return e
	}
	e := (*prev)[k]
	if e == nil {
		e = new(V)
	}
	if len(*cur) >= shapeMemoSize {
		*prev, *cur = *cur, nil
	}
	if *cur == nil {
		*cur = make(map[K]*V, 64)
	}
	(*cur)[k] = e
	return e
}

// projection is obj's projection under mask, without managedFields
// when drop is set.
func (m *shapeMemo) projection(obj *watchcache.Object, mask *fieldmask.Mask, maskKey string, drop bool) (*projEntry, error) {
	e := lookup(&m.mu, &m.projCur, &m.projPr, projKey{obj, maskKey, drop})
	e.once.Do(func() {
		full, ok := jsonenc.Decode(obj.JSON)
		if !ok {
			e.err = fmt.Errorf("watch cache object %s does not decode", obj.Key)
			return
		}
		if drop {
			full = registry.WithoutManagedFields(full)
		}
		e.value = mask.Project(full)
		if e.json, ok = jsonenc.Append(nil, e.value); !ok {
			e.err = fmt.Errorf("watch cache object %s does not encode", obj.Key)
		}
	})
	return e, e.err
}

// projectedFrame is it's frame with its object projected.
func (m *shapeMemo) projectedFrame(it watchcache.Item, s *shaper) ([]byte, error) {
	p, err := m.projection(it.Object, s.mask, s.maskKey, s.drop)
	if err != nil {
		return nil, err
	}
	e := lookup(&m.mu, &m.frCur, &m.frPrev, shapeFrameKey{it.Object, nil, it.Type, it.At(), s.optKey})
	e.once.Do(func() {
		e.b, e.ok = appendEvent(make([]byte, 0, len(p.json)+96), it.Type, p.json, nil, it.At()), true
		m.made.Add(1)
	})
	return e.b, nil
}

// delta is it's MODIFIED frame with the patch from base; ok is false when
// the object goes whole (a patch not smaller, an object that does not
// decode).
func (m *shapeMemo) delta(it watchcache.Item, base *watchcache.Object, s *shaper) ([]byte, bool) {
	k := shapeFrameKey{it.Object, base, it.Type, it.At(), s.optKey}
	if s.project {
		k.base = nil // the projection's patch fits every earlier copy
	}
	e := lookup(&m.mu, &m.frCur, &m.frPrev, k)
	e.once.Do(func() {
		m.made.Add(1)
		if s.project {
			from, err := m.projection(base, s.mask, s.maskKey, s.drop)
			if err != nil {
				return
			}
			to, err := m.projection(it.Object, s.mask, s.maskKey, s.drop)
			if err != nil {
				return
			}
			e.b, e.ok = deltaFrame(it.Type, it.At(), from.value, to.value, len(to.json), true)
			return
		}
		// Whole objects are decoded here, for every watch at once, and
		// not kept: the memo holds only small values.
		from, ok1 := jsonenc.Decode(base.JSON)
		to, ok2 := jsonenc.Decode(it.Object.JSON)
		if !ok1 || !ok2 {
			return
		}
		if s.drop {
			from, to = registry.WithoutManagedFields(from), registry.WithoutManagedFields(to)
		}
		e.b, e.ok = deltaFrame(it.Type, it.At(), from, to, len(it.Object.JSON), false)
	})
	return e.b, e.ok
}
