package client

import (
	"errors"
	"fmt"
	"mime"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
)

// CBOR (KEP-4222) as the server sends it: an object or list is one CBOR
// data item (application/cbor), a watch a CBOR sequence
// (application/cbor-seq) of metav1.WatchEvent items whose objects are
// embedded CBOR. Everything here is decoded by apimachinery's CBOR
// serializer and its direct package, which honour json tags, so typed
// objects come out as they do from JSON; nothing is decoded by hand.

const (
	cborType    = "application/cbor"
	cborSeqType = "application/cbor-seq"
)

// Accept headers of reads with CBOR preferred: a server without CBOR
// (any Kubernetes before KEP-4222's serving) answers JSON, which is
// decoded by its Content-Type.
const (
	cborAccept     = "application/cbor, application/json;q=0.9"
	cborDropAccept = "application/cbor;drop=metadata.managedFields, application/json;drop=metadata.managedFields;q=0.9"
)

// isCBOR reports whether a response's Content-Type is CBOR (an object,
// a list or a watch's sequence).
func isCBOR(contentType string) bool {
	if contentType == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == cborType || mt == cborSeqType
}

// cborCapable reports whether objects of type t can be decoded from CBOR:
// unstructured ones, and typed ones that are runtime.Objects (every
// k8s.io/api type, and structs with generated deep copies), which
// apimachinery's serializer decodes leniently (unknown fields ignored, as
// JSON decoding ignores them). Other types are read as JSON.
func cborCapable(t reflect.Type, unstructured bool) bool {
	return unstructured || t.Implements(reflect.TypeFor[runtime.Object]())
}

// placeholderKind is the kind the lenient decoder assumes for data
// without apiVersion and kind (list items, partial structs): the
// decoder needs one, and the object is filled in place whatever it is.
var placeholderKind = schema.GroupVersionKind{Version: "v1", Kind: "Object"}

// intoTyper and intoCreater make apimachinery's CBOR serializer decode
// into one given object whatever its data's kind, as JSON decoding does.
type intoTyper struct{}

func (intoTyper) ObjectKinds(runtime.Object) ([]schema.GroupVersionKind, bool, error) {
	return []schema.GroupVersionKind{placeholderKind}, false, nil
}

func (intoTyper) Recognizes(schema.GroupVersionKind) bool { return true }

type intoCreater struct{ obj runtime.Object }

func (c intoCreater) New(schema.GroupVersionKind) (runtime.Object, error) { return c.obj, nil }

// decodeCBORInto decodes one CBOR data item into obj, ignoring fields obj
// does not have. The serializer then transcodes obj's RawExtension fields
// to JSON, as a JSON decode would have them.
func decodeCBORInto(data []byte, obj runtime.Object) error {
	return decodeCBORWith(data, obj, true)
}

// decodeCBORWith is decodeCBORInto, transcoding RawExtensions or not (a
// list envelope keeps its items' CBOR).
func decodeCBORWith(data []byte, obj runtime.Object, transcode bool) error {
	s := cbor.NewSerializer(intoCreater{obj}, intoTyper{}, cbor.Transcode(transcode))
	if _, _, err := s.Decode(data, nil, obj); err != nil {
		return err
	}
	return nil
}

// decodeCBORMap decodes one CBOR data item that must be a map, as the
// serializer decodes unstructured content: integers as int64, floats as
// float64, byte strings as strings.
func decodeCBORMap(data []byte) (map[string]any, error) {
	var m map[string]any
	if err := direct.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("not an object")
	}
	return m, nil
}

// cborList is a list's envelope in CBOR, its items kept undecoded.
type cborList struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ListMeta `json:"metadata"`
	Items           []cborItem      `json:"items"`
}

// cborItem is one data item, undecoded: a slice of the input it was
// decoded from (the CBOR decoder passes Unmarshalers their bytes in
// place), valid as long as that input.
type cborItem []byte

func (i *cborItem) UnmarshalCBOR(b []byte) error {
	*i = b
	return nil
}

// MarshalCBOR writes the item as it is (null when empty).
func (i cborItem) MarshalCBOR() ([]byte, error) {
	if len(i) == 0 {
		return []byte{0xf6}, nil
	}
	return i, nil
}

// isCBORNull reports whether b is empty or the CBOR null (or undefined).
func isCBORNull(b []byte) bool {
	return len(b) == 0 || (len(b) == 1 && (b[0] == 0xf6 || b[0] == 0xf7))
}

func (l *cborList) DeepCopyObject() runtime.Object { panic("cborList is not copied") }

// cborMeta is an object's identity, decoded from CBOR.
type cborMeta struct {
	metav1.TypeMeta `json:",inline"`
	metaOnly        `json:",inline"`
}

func (m *cborMeta) DeepCopyObject() runtime.Object { panic("cborMeta is not copied") }

// decodeCBORStatus decodes a metav1.Status (an error response's body, or
// a watch ERROR event's object).
func decodeCBORStatus(data []byte) (metav1.Status, error) {
	var st metav1.Status
	err := decodeCBORInto(data, &st)
	return st, err
}

// cborEvent decodes one watch event of a CBOR sequence.
func cborEvent(frame []byte, ev *metav1.WatchEvent) error {
	ev.Type = ""
	ev.Object.Raw = ev.Object.Raw[:0]
	if err := direct.Unmarshal(frame, ev); err != nil {
		return fmt.Errorf("decode CBOR event: %w", err)
	}
	return nil
}

// errorEventText is an ERROR event's object that is not a Status, for
// its error: JSON as it is, CBOR in diagnostic notation, protobuf by its
// size.
func errorEventText(obj []byte, enc wireEncoding) string {
	switch enc {
	case wireCBOR:
		if d, err := direct.Diagnose(obj); err == nil {
			return d
		}
		return fmt.Sprintf("%d bytes of invalid CBOR", len(obj))
	case wireProtobuf:
		return fmt.Sprintf("%d bytes of protobuf that are not a Status", len(obj))
	}
	return string(obj)
}

// decodeCBORAnswer decodes a CBOR answer into obj: leniently for a
// runtime.Object (and into an Unstructured's content), strictly (unknown
// fields are errors) for other types.
func decodeCBORAnswer(data []byte, obj any) error {
	var err error
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		o.Object, err = decodeCBORMap(data)
	case runtime.Object:
		err = decodeCBORInto(data, o)
	default:
		err = direct.Unmarshal(data, obj)
	}
	if err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return nil
}
