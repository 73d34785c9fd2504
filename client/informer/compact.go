package informer

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	k8sjson "sigs.k8s.io/json"

	"github.com/objwatch/objwatch/client"
)

// A compact cache (Options.Compact) keeps each object as a blob: a format
// byte, then the object's protobuf or JSON, zstd-compressed.
// Formats with a capital letter are compressed with the codec's dictionary.
const (
	formatProto     byte = 'p'
	formatJSON      byte = 'j'
	formatProtoDict byte = 'P'
	formatJSONDict  byte = 'J'
)

// dictSamples is how many objects a codec encodes before it trains its
// zstd dictionary on them; dictHistory bounds the dictionary's content.
const (
	dictSamples = 64
	dictHistory = 8 << 10
)

// protoMessage is implemented by the k8s.io/api types (gogo-protobuf).
type protoMessage interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

// zstdCoders returns the coders every compact cache shares. EncodeAll and
// DecodeAll are safe for concurrent use, and coders made without a stream
// start no goroutines, so they need no Close. The decoder has a block
// decoder per CPU so that concurrent reads do not queue; the encoder has
// one, as writes come from informers' processor goroutines.
var zstdCoders = sync.OnceValues(func() (*zstd.Encoder, *zstd.Decoder) {
	enc, dec, err := newZstdCoders(nil)
	if err != nil {
		panic(err) // cannot happen: the options are valid
	}
	return enc, dec
})

// newZstdCoders returns an encoder and a decoder, using dict if not nil.
func newZstdCoders(dict []byte) (*zstd.Encoder, *zstd.Decoder, error) {
	eopts := []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		// Without it, a block in which the fastest level finds no match
		// (common for small objects) is stored uncompressed.
		zstd.WithAllLitEntropyCompression(true),
		zstd.WithLowerEncoderMem(true), // halves its 600 KB, same speed for small objects
		zstd.WithEncoderCRC(false),     // a checksum of memory guards nothing and costs 4 bytes per object
		zstd.WithWindowSize(1 << 17)}   // the default (8 MB) allocates buffers, with a dictionary, for objects that do not exist
	dopts := []zstd.DOption{zstd.WithDecoderConcurrency(0)}
	if dict != nil {
		eopts = append(eopts, zstd.WithEncoderDict(dict))
		dopts = append(dopts, zstd.WithDecoderDicts(dict))
	}
	enc, err := zstd.NewWriter(nil, eopts...)
	if err != nil {
		return nil, nil, err
	}
	dec, err := zstd.NewReader(nil, dopts...)
	if err != nil {
		return nil, nil, err
	}
	return enc, dec, nil
}

// dictCoders compress with a dictionary trained on a codec's first objects.
type dictCoders struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
}

// buffers holds scratch buffers for uncompressed encodings: both directions
// copy what they keep out of them.
var buffers = sync.Pool{New: func() any { return new([]byte) }}

func putBuffer(b *[]byte) {
	if cap(*b) <= 64<<10 { // do not pin the odd huge object's buffer
		buffers.Put(b)
	}
}

// compactCodec encodes T objects to blobs and back. It is safe for
// concurrent use.
//
// k8s.io/api types are encoded as protobuf, which is smaller and decodes
// faster than JSON but does not carry TypeMeta (apiVersion and kind): the
// codec remembers the first TypeMeta it encodes and sets it on every
// object it decodes from protobuf; objects with another TypeMeta are
// encoded as JSON. Like protobuf clients, a round trip does not tell nil
// from empty slices and maps. Other types, and unstructured objects, are
// encoded as JSON and decoded the way the client decodes them.
//
// Objects of one resource share much (field names, label keys, the
// namespace, the shape of the data), which small objects compressed one by
// one cannot exploit: once the codec has encoded dictSamples objects it
// trains a zstd dictionary on them (its content and entropy tables) and
// compresses later objects with it, about 18% smaller for 1 KiB
// ConfigMaps. Blobs say whether they need the dictionary.
type compactCodec[T client.Object] struct {
	elem         reflect.Type // T's element type
	proto        bool         // T has gogo-protobuf methods
	unstructured bool
	typeMeta     atomic.Pointer[metav1.TypeMeta] // of protobuf blobs; nil until the first

	dict    atomic.Pointer[dictCoders] // nil until trained
	mu      sync.Mutex                 // guards samples
	samples [][]byte                   // uncompressed encodings to train on; nil once done
}

func newCompactCodec[T client.Object]() *compactCodec[T] {
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("informer: %v is not a pointer to a struct", t))
	}
	unstr := t == reflect.TypeFor[*unstructured.Unstructured]()
	return &compactCodec[T]{elem: t.Elem(), unstructured: unstr, proto: !unstr && t.Implements(reflect.TypeFor[protoMessage]()),
		samples: make([][]byte, 0, dictSamples)}
}

// encode returns obj's blob, in a slice of its own exact size.
func (c *compactCodec[T]) encode(obj T) ([]byte, error) {
	format, raw, err := c.marshal(obj)
	if err != nil {
		return nil, err
	}
	enc, _ := zstdCoders()
	if d := c.dict.Load(); d != nil {
		enc, format = d.enc, format-'a'+'A'
	} else {
		c.sample(raw)
	}
	buf := buffers.Get().(*[]byte)
	defer putBuffer(buf)
	*buf = enc.EncodeAll(raw, append((*buf)[:0], format))
	blob := make([]byte, len(*buf))
	copy(blob, *buf)
	return blob, nil
}

// sample keeps a copy of raw to train the dictionary on, and trains it
// once there are enough. A dictionary that cannot be trained (e.g. tiny
// objects) is not tried again: objects are then compressed without one.
func (c *compactCodec[T]) sample(raw []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.samples == nil {
		return
	}
	c.samples = append(c.samples, slices.Clone(raw))
	if len(c.samples) < dictSamples {
		return
	}
	samples := c.samples
	c.samples = nil
	var history []byte
	for _, s := range samples {
		if len(history)+len(s) > dictHistory {
			break
		}
		history = append(history, s...)
	}
	dict, err := zstd.BuildDict(zstd.BuildDictOptions{
		ID: 1, Contents: samples, History: history,
		Offsets: [3]int{1, 4, 8}, // zstd's initial repeat offsets
		Level:   zstd.SpeedFastest,
	})
	if err != nil {
		return
	}
	enc, dec, err := newZstdCoders(dict)
	if err != nil {
		return
	}
	c.dict.Store(&dictCoders{enc: enc, dec: dec})
}

func (c *compactCodec[T]) marshal(obj T) (format byte, raw []byte, err error) {
	switch {
	case c.unstructured:
		raw, err = json.Marshal(any(obj).(*unstructured.Unstructured).Object)
	case c.proto && c.protoTypeMeta(obj):
		raw, err = any(obj).(protoMessage).Marshal()
		return formatProto, raw, err
	default:
		raw, err = json.Marshal(obj)
	}
	return formatJSON, raw, err
}

// protoTypeMeta reports whether obj has the TypeMeta protobuf blobs are
// decoded with, making obj's that TypeMeta if it is the first.
func (c *compactCodec[T]) protoTypeMeta(obj T) bool {
	tm, ok := obj.GetObjectKind().(*metav1.TypeMeta)
	if !ok {
		return false
	}
	want := c.typeMeta.Load()
	if want == nil {
		first := *tm
		c.typeMeta.CompareAndSwap(nil, &first)
		want = c.typeMeta.Load()
	}
	return *want == *tm
}

// decode returns a new object decoded from blob.
func (c *compactCodec[T]) decode(blob []byte) (T, error) {
	var zero T
	if len(blob) == 0 {
		return zero, errors.New("empty blob")
	}
	_, dec := zstdCoders()
	format := blob[0]
	if format == formatProtoDict || format == formatJSONDict {
		d := c.dict.Load()
		if d == nil {
			return zero, errors.New("blob needs a dictionary the codec does not have")
		}
		dec, format = d.dec, format-'A'+'a'
	}
	buf := buffers.Get().(*[]byte)
	defer putBuffer(buf)
	raw, err := dec.DecodeAll(blob[1:], (*buf)[:0])
	if err != nil {
		return zero, fmt.Errorf("decompress: %w", err)
	}
	*buf = raw
	obj := reflect.New(c.elem).Interface().(T)
	switch {
	case format == formatProto:
		err = any(obj).(protoMessage).Unmarshal(raw)
		*obj.GetObjectKind().(*metav1.TypeMeta) = *c.typeMeta.Load()
	case c.unstructured:
		u := any(obj).(*unstructured.Unstructured)
		err = k8sjson.UnmarshalCaseSensitivePreserveInts(raw, &u.Object)
	default:
		err = k8sjson.UnmarshalCaseSensitivePreserveInts(raw, obj)
	}
	if err != nil {
		return zero, err
	}
	return obj, nil
}

// compactObjects keeps each object as a compactObject: writes encode
// before taking the lock, reads decode after releasing it, and what
// relists, label selectors and resourceVersion comparisons need is read
// without decoding.
type compactObjects[T client.Object] struct {
	tableOf[T, compactObject]
	codec *compactCodec[T]
}

func newCompactObjects[T client.Object](core *storeCore[T]) *compactObjects[T] {
	return &compactObjects[T]{tableOf: tableOf[T, compactObject]{storeCore: core, table: table[compactObject]{}}, codec: newCompactCodec[T]()}
}

func (c *compactObjects[T]) decode(blob []byte) T {
	obj, err := c.codec.decode(blob)
	if err != nil {
		panic(fmt.Sprintf("informer: compact cache: decode %T: %v", obj, err))
	}
	return obj
}

// decodeAll decodes blobs collected under the lock, without holding it.
func (c *compactObjects[T]) decodeAll(blobs [][]byte) []T {
	if blobs == nil {
		return nil
	}
	out := make([]T, len(blobs))
	for i, b := range blobs {
		out[i] = c.decode(b)
	}
	return out
}

func blobOf(e compactObject) []byte { return e.blob }

func allBlobs(e compactObject) ([]byte, bool) { return e.blob, true }

func (c *compactObjects[T]) get(namespace, name string) (T, bool) {
	e, ok := c.lookup(namespace, name)
	if !ok {
		var zero T
		return zero, false
	}
	return c.decode(e.blob), true
}

func (c *compactObjects[T]) identity(namespace, name string) (identity, bool) {
	e, ok := c.lookup(namespace, name)
	return e.identity(), ok
}

func (c *compactObjects[T]) identityBytes(namespace, name []byte) (identity, bool) {
	e, ok := c.lookupBytes(namespace, name)
	return e.identity(), ok
}

func (c *compactObjects[T]) list(namespace string, sel labels.Selector) []T {
	keep := allBlobs
	if sel != nil {
		var ls compactLabels // one variable, so that only it escapes to the heap
		keep = func(e compactObject) ([]byte, bool) {
			ls = e.labels()
			return e.blob, sel.Matches(&ls)
		}
	}
	c.mu.RLock()
	blobs := filter(c.table, namespace, c.count, keep)
	c.mu.RUnlock()
	return c.decodeAll(blobs)
}

func (c *compactObjects[T]) byIndex(indexName, value string) ([]T, error) {
	c.mu.RLock()
	set, err := c.indexedLocked(indexName, value)
	var blobs [][]byte
	if err == nil {
		blobs = pick(c.table, set, blobOf)
	}
	c.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	return c.decodeAll(blobs), nil
}

// each decodes a snapshot, calling fn without the lock held.
func (c *compactObjects[T]) each(fn func(T) bool) {
	c.mu.RLock()
	blobs := filter(c.table, "", c.count, allBlobs)
	c.mu.RUnlock()
	for _, b := range blobs {
		if !fn(c.decode(b)) {
			return
		}
	}
}

func (c *compactObjects[T]) entries(fn func(k Key, obj T, blob []byte) bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var zero T
	for k, e := range c.table.all {
		if !fn(k, zero, e.blob) {
			return
		}
	}
}

func (c *compactObjects[T]) put(k Key, obj T, wantOld bool) (old T, replaced bool) {
	blob, err := c.codec.encode(obj) // before locking: it takes a while
	if err != nil {
		panic(fmt.Sprintf("informer: compact cache: encode %s: %v", k, err))
	}
	e := newCompactObject(blob, obj)
	c.mu.Lock()
	prev, replaced := c.table.put(k, e)
	if !replaced {
		c.count++
	}
	// Indexes need the replaced object's values: decoding it here is
	// cheaper than keeping every object's values.
	decoded := replaced && len(c.indexers) > 0
	if decoded {
		old = c.decode(prev.blob)
	}
	c.reindexLocked(k, old, replaced, obj, true)
	c.mu.Unlock()
	if replaced && wantOld && !decoded {
		old = c.decode(prev.blob) // blobs never change: no lock needed
	}
	return old, replaced
}

func (c *compactObjects[T]) delete(k Key, wantOld bool) (old T, uid types.UID, ok bool) {
	var zero T
	c.mu.Lock()
	prev, ok := c.table.delete(k)
	if !ok {
		c.mu.Unlock()
		return zero, "", false
	}
	c.count--
	decoded := len(c.indexers) > 0
	if decoded {
		old = c.decode(prev.blob)
		c.reindexLocked(k, old, true, zero, false)
	}
	c.mu.Unlock()
	if wantOld && !decoded {
		old = c.decode(prev.blob)
	}
	return old, prev.uid(), true
}

// allLocked decodes every object, with the lock held (AddIndexers).
func (c *compactObjects[T]) allLocked(yield func(Key, T) bool) {
	for k, e := range c.table.all {
		if !yield(k, c.decode(e.blob)) {
			return
		}
	}
}

// compactObject is a cached object in compact mode: its blob, and what
// the store reads without decoding it (resourceVersion, UID and labels),
// packed into one string to save allocations and map space.
type compactObject struct {
	blob          []byte
	meta          string // resourceVersion, UID, labels
	rvEnd, uidEnd uint32
}

func newCompactObject(blob []byte, obj client.Object) compactObject {
	rv, uid := obj.GetResourceVersion(), string(obj.GetUID())
	return compactObject{blob: blob, meta: rv + uid + string(makeCompactLabels(obj.GetLabels())),
		rvEnd: uint32(len(rv)), uidEnd: uint32(len(rv) + len(uid))}
}

func (c compactObject) rv() string            { return c.meta[:c.rvEnd] }
func (c compactObject) uid() types.UID        { return types.UID(c.meta[c.rvEnd:c.uidEnd]) }
func (c compactObject) labels() compactLabels { return compactLabels(c.meta[c.uidEnd:]) }

func (c compactObject) identity() identity { return identity{rv: c.rv(), uid: c.uid()} }

// compactLabels is a label set in one string: its key\x00value\x00 pairs,
// sorted by key. Kubernetes forbids NUL in label keys and values.
type compactLabels string

var _ labels.Labels = compactLabels("")

func makeCompactLabels(m map[string]string) compactLabels {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	n := 0
	for k, v := range m {
		keys = append(keys, k)
		n += len(k) + len(v) + 2
	}
	slices.Sort(keys)
	var sb strings.Builder
	sb.Grow(n)
	for _, k := range keys {
		sb.WriteString(k)
		sb.WriteByte(0)
		sb.WriteString(m[k])
		sb.WriteByte(0)
	}
	return compactLabels(sb.String())
}

// Lookup returns the value of label and whether it is set.
func (l compactLabels) Lookup(label string) (string, bool) {
	for s := string(l); s != ""; {
		var k, v string
		k, s, _ = strings.Cut(s, "\x00")
		v, s, _ = strings.Cut(s, "\x00")
		switch strings.Compare(k, label) {
		case 0:
			return v, true
		case 1:
			return "", false // sorted: it would have come
		}
	}
	return "", false
}

// Has reports whether label is set.
func (l compactLabels) Has(label string) bool {
	_, ok := l.Lookup(label)
	return ok
}

// Get returns the value of label ("" if not set).
func (l compactLabels) Get(label string) string {
	v, _ := l.Lookup(label)
	return v
}
