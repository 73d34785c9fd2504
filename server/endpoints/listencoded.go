package endpoints

import (
	"bufio"
	"encoding/binary"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// Protobuf and CBOR lists served from the watch cache.
//
// A JSON list from the watch cache is the cached objects' JSON
// concatenated (writeRawList). A protobuf or CBOR list of plain objects
// (no as=, managedFields kept) served from the cache is built the same
// way from each item's binary encoding, made from the cached JSON once per
// object revision and encoding and kept with the cached object
// (objects.List.Encoded, watchcache.Object.Encoded), inside the list's
// envelope written here. The first such list pays each item's decode and
// encode once; later lists, and concurrent ones, copy bytes. The response
// is byte for byte what apimachinery's serializers give for the list
// wireList builds (TestCachedBinaryListIdentical):
//
//   - protobuf: the "k8s\x00" prefix, then a runtime.Unknown whose
//     typeMeta (field 1) names the list kind and whose raw (field 2) is the
//     list message: its ListMeta as field 1, each item as field 2; then the
//     Unknown's empty contentEncoding and contentType (fields 3 and 4), as
//     the generated marshaller writes them. An item is its Go type's
//     message (which has no TypeMeta).
//   - CBOR: the self-described tag, then a map of four entries in the
//     order apimachinery's deterministic mode sorts keys (shorter first,
//     then bytewise): kind, items (an array of the items' encodings),
//     metadata, apiVersion. A built-in kind's item is its Go type with an
//     empty TypeMeta, a custom resource's its unstructured content.
//
// Other lists (from etcd, or with as=, dropped managedFields, a
// projection) are built and encoded whole (wireList).

// Keys of the item encodings kept with cached objects. An object belongs
// to one resource version's cache, so a key needs no kind.
const (
	protobufItemKey     = "protobuf list item"
	cborItemKey         = "cbor list item"
	cborUnstructuredKey = "cbor unstructured list item"
)

// protobufPrefix starts every enveloped protobuf message.
var protobufPrefix = []byte("k8s\x00")

// selfDescribedCBOR is the tag apimachinery's CBOR serializer starts
// every object with.
var selfDescribedCBOR = []byte{0xd9, 0xd9, 0xf7}

// cachedListEncoding is how the items of a list of res in o's encoding
// are encoded from their JSON and kept with the cached objects: the key
// they are kept under and the encoder. ok is false for a list the cached
// path does not serve (see above).
func cachedListEncoding(res *registry.Resource, o output) (key string, encode func([]byte) ([]byte, error), ok bool) {
	if o.enc == encJSON || o.as != "" || o.drop || o.mask != nil {
		return "", nil, false
	}
	listGVK := res.GVK().GroupVersion().WithKind(res.ListKind)
	if !typed(res) || !registry.Scheme.Recognizes(listGVK) {
		if o.enc != encCBOR {
			return "", nil, false
		}
		return cborUnstructuredKey, func(b []byte) ([]byte, error) {
			u, err := objects.Decode(b)
			if err != nil {
				return nil, err
			}
			return direct.Marshal(u.Object)
		}, true
	}
	// Each item as wireList decodes it: its Go type, without apiVersion
	// and kind, as Kubernetes sends a list's items.
	gvk := res.GVK()
	decode := func(b []byte) (runtime.Object, error) {
		obj, err := typedFromJSON(gvk, b)
		if err != nil {
			return nil, err
		}
		obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
		return obj, nil
	}
	type marshaler interface{ Marshal() ([]byte, error) }
	if o.enc == encProtobuf {
		if obj, err := registry.Scheme.New(gvk); err != nil {
			return "", nil, false
		} else if _, ok := obj.(marshaler); !ok {
			return "", nil, false
		}
		return protobufItemKey, func(b []byte) ([]byte, error) {
			obj, err := decode(b)
			if err != nil {
				return nil, err
			}
			return obj.(marshaler).Marshal()
		}, true
	}
	return cborItemKey, func(b []byte) ([]byte, error) {
		obj, err := decode(b)
		if err != nil {
			return nil, err
		}
		return direct.Marshal(obj)
	}, true
}

// writeCachedList writes l in o's encoding from its items' cached
// encodings. done is false, with nothing written, when the list is not
// one the cached path serves (not from the watch cache, or see
// cachedListEncoding): the caller encodes it whole.
func writeCachedList(w http.ResponseWriter, res *registry.Resource, l *objects.List, o output) (done bool, err error) {
	key, encode, ok := cachedListEncoding(res, o)
	if !ok {
		return false, nil
	}
	items, ok, err := l.Encoded(key, encode)
	switch {
	case !ok:
		return false, nil
	case err != nil:
		return true, apierrors.NewInternalError(err)
	}
	var head, tail []byte
	if o.enc == encProtobuf {
		head, tail, err = protobufListEnvelope(res, l.Meta, items)
	} else {
		head, tail, err = cborListEnvelope(res, key == cborItemKey, l.Meta, len(items))
	}
	if err != nil {
		return true, apierrors.NewInternalError(err)
	}
	n := len(head) + len(tail)
	for _, b := range items {
		n += len(b)
		if o.enc == encProtobuf {
			n += 1 + uvarintLen(uint64(len(b)))
		}
	}
	streamList(w, o.enc.contentType(false), n, func(bw *bufio.Writer) {
		bw.Write(head)
		var field [1 + binary.MaxVarintLen64]byte
		for _, b := range items {
			if o.enc == encProtobuf {
				field[0] = protoItemsTag
				bw.Write(binary.AppendUvarint(field[:1], uint64(len(b))))
			}
			bw.Write(b)
		}
		bw.Write(tail)
	})
	return true, nil
}

// Protobuf field tags (field number << 3 | 2, length-delimited) of
// runtime.Unknown and of a list message.
const (
	protoUnknownTypeMeta        = 0x0a // Unknown.typeMeta
	protoUnknownRaw             = 0x12 // Unknown.raw
	protoUnknownContentEncoding = 0x1a // Unknown.contentEncoding
	protoUnknownContentType     = 0x22 // Unknown.contentType
	protoListMetaTag            = 0x0a // a list's metadata
	protoItemsTag               = 0x12 // a list's items, one field each
)

// protobufListEnvelope is what goes before and after the items (each as
// its field, tag and length) of a protobuf list of res with meta.
func protobufListEnvelope(res *registry.Resource, meta metav1.ListMeta, items [][]byte) (head, tail []byte, err error) {
	tm, err := (&runtime.TypeMeta{APIVersion: res.GVK().GroupVersion().String(), Kind: res.ListKind}).Marshal()
	if err != nil {
		return nil, nil, err
	}
	lm, err := meta.Marshal()
	if err != nil {
		return nil, nil, err
	}
	size := 1 + uvarintLen(uint64(len(lm))) + len(lm)
	for _, b := range items {
		size += 1 + uvarintLen(uint64(len(b))) + len(b)
	}
	head = make([]byte, 0, len(protobufPrefix)+len(tm)+len(lm)+4*binary.MaxVarintLen64)
	head = append(head, protobufPrefix...)
	head = append(head, protoUnknownTypeMeta)
	head = binary.AppendUvarint(head, uint64(len(tm)))
	head = append(head, tm...)
	head = append(head, protoUnknownRaw)
	head = binary.AppendUvarint(head, uint64(size))
	head = append(head, protoListMetaTag)
	head = binary.AppendUvarint(head, uint64(len(lm)))
	head = append(head, lm...)
	// The Unknown's contentEncoding and contentType, empty.
	return head, []byte{protoUnknownContentEncoding, 0, protoUnknownContentType, 0}, nil
}

// cborListEnvelope is what goes before and after the n items of a CBOR
// list of res with meta: typed says the list is a built-in kind's Go list
// type (its metadata a ListMeta), not an UnstructuredList (its metadata
// the ListMeta's unstructured content).
func cborListEnvelope(res *registry.Resource, typed bool, meta metav1.ListMeta, n int) (head, tail []byte, err error) {
	var md []byte
	if typed {
		md, err = direct.Marshal(meta)
	} else {
		var m map[string]any
		if m, err = runtime.DefaultUnstructuredConverter.ToUnstructured(&meta); err == nil {
			md, err = direct.Marshal(m)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	// Strings as apimachinery's mode encodes them (byte strings).
	str := func(b []byte, s string) []byte {
		if err != nil {
			return b
		}
		var e []byte
		e, err = direct.Marshal(s)
		return append(b, e...)
	}
	head = append(head, selfDescribedCBOR...)
	head = cborHead(head, cborMap, 4)
	head = str(head, "kind")
	head = str(head, res.ListKind)
	head = str(head, "items")
	head = cborHead(head, cborArray, uint64(n))
	tail = str(nil, "metadata")
	tail = append(tail, md...)
	tail = str(tail, "apiVersion")
	tail = str(tail, res.APIVersion())
	if err != nil {
		return nil, nil, err
	}
	return head, tail, nil
}

// CBOR major types, in the top three bits of a data item's head.
const (
	cborArray = 4 << 5
	cborMap   = 5 << 5
)

// cborHead appends the head of a data item of major type major and
// argument n (a length or count) in its shortest form.
func cborHead(b []byte, major byte, n uint64) []byte {
	switch {
	case n < 24:
		return append(b, major|byte(n))
	case n <= 0xff:
		return append(b, major|24, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, major|25), uint16(n))
	case n <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, major|26), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, major|27), n)
}

// uvarintLen is the length of v as a protobuf varint.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
