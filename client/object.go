package client

import (
	"fmt"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/json"
)

// Object is what typed clients and informers handle: a pointer to a struct
// that embeds metav1.TypeMeta and metav1.ObjectMeta (k8s.io/api types, or
// your own custom-resource structs, no code generation needed), or
// *unstructured.Unstructured.
type Object interface {
	metav1.Object
	GetObjectKind() schema.ObjectKind
}

// codec decodes objects of one type.
type codec[T Object] struct {
	elem         reflect.Type // T's element type
	unstructured bool
	gvk          schema.GroupVersionKind // filled into objects without a kind
	cbor         bool                    // T can be decoded from CBOR (cborCapable)
	protobuf     bool                    // T can be decoded from protobuf (protobufCapable)
}

func newCodec[T Object](res Resource) codec[T] {
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("client: %v is not a pointer to a struct", t))
	}
	c := codec[T]{elem: t.Elem(), unstructured: t == reflect.TypeFor[*unstructured.Unstructured]()}
	c.cbor = cborCapable(t, c.unstructured)
	c.protobuf = protobufCapable(t)
	if res.Kind != "" {
		c.gvk = res.GVK()
	}
	return c
}

// New returns a new, empty T.
func (c codec[T]) New() T { return reflect.New(c.elem).Interface().(T) }

// decode decodes data into a new T the way Kubernetes does: field names are
// case-sensitive and numbers in untyped fields become int64 where they fit.
func (c codec[T]) decode(data []byte) (T, error) {
	obj := c.New()
	if c.unstructured {
		u := any(obj).(*unstructured.Unstructured)
		if err := json.UnmarshalCaseSensitivePreserveInts(data, &u.Object); err != nil {
			var zero T
			return zero, fmt.Errorf("decode: %w", err)
		}
		if u.Object == nil {
			var zero T
			return zero, fmt.Errorf("decode: not an object")
		}
	} else if err := json.UnmarshalCaseSensitivePreserveInts(data, obj); err != nil {
		var zero T
		return zero, fmt.Errorf("decode: %w", err)
	}
	c.fillKind(obj)
	return obj, nil
}

// fillKind sets the resource's kind on an object decoded without one
// (list items).
func (c codec[T]) fillKind(obj T) {
	if !c.gvk.Empty() {
		if ok := obj.GetObjectKind(); ok.GroupVersionKind().Kind == "" {
			ok.SetGroupVersionKind(c.gvk)
		}
	}
}

// decodeCBOR decodes one CBOR data item into a new T as apimachinery's
// CBOR serializer does (json tags, unknown fields ignored); T must be
// cborCapable.
func (c codec[T]) decodeCBOR(data []byte) (T, error) {
	var zero T
	obj := c.New()
	if c.unstructured {
		m, err := decodeCBORMap(data)
		if err != nil {
			return zero, fmt.Errorf("decode CBOR: %w", err)
		}
		any(obj).(*unstructured.Unstructured).Object = m
	} else {
		ro, ok := any(obj).(runtime.Object)
		if !ok {
			return zero, fmt.Errorf("decode CBOR: %T is not a runtime.Object", obj)
		}
		if err := decodeCBORInto(data, ro); err != nil {
			return zero, fmt.Errorf("decode CBOR: %w", err)
		}
	}
	c.fillKind(obj)
	return obj, nil
}

// decodeProtobuf decodes an object's protobuf message (without its
// envelope) into a new T, its kind set from env (the envelope it came in)
// if given, else as fillKind sets it. T must be protobufCapable.
func (c codec[T]) decodeProtobuf(data []byte, env *envelope) (T, error) {
	var zero T
	obj := c.New()
	pm, ok := any(obj).(protoMessage)
	if !ok {
		return zero, fmt.Errorf("decode protobuf: %T is not a protobuf message", obj)
	}
	if err := unmarshalProtobuf(pm, data, env); err != nil {
		return zero, fmt.Errorf("decode protobuf: %w", err)
	}
	c.fillKind(obj)
	return obj, nil
}

// decodeAs decodes data in the encoding of a response's Content-Type.
func (c codec[T]) decodeAs(contentType string, data []byte) (T, error) {
	switch {
	case isCBOR(contentType):
		return c.decodeCBOR(data)
	case isProtobuf(contentType):
		env, err := openEnvelope(data)
		if err != nil {
			var zero T
			return zero, fmt.Errorf("decode protobuf: %w", err)
		}
		return c.decodeProtobuf(env.raw, &env)
	}
	return c.decode(data)
}

// unmarshal decodes a non-object response (Status, discovery documents).
func unmarshal(data []byte, out any) error {
	if err := json.UnmarshalCaseSensitivePreserveInts(data, out); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	return nil
}

// Meta is the identity of an undecoded object: enough for a cache to decide
// whether it already has this state.
type Meta struct {
	Namespace, Name, UID, ResourceVersion string
}

type metaOnly struct {
	Metadata struct {
		Namespace       string `json:"namespace"`
		Name            string `json:"name"`
		UID             string `json:"uid"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
}

// Raw is an object read from a list or a watch but not yet decoded, so a
// cache can skip decoding states it already has. Its bytes are only valid
// until the callback that received it returns (lists) or the next call to
// the watch (watches).
type Raw[T Object] struct {
	data  []byte
	codec *codec[T]
	enc   wireEncoding
	env   *envelope // a protobuf object's envelope, for its kind; nil for list items
}

// wireEncoding is the encoding of a Raw's bytes.
type wireEncoding uint8

const (
	wireJSON     wireEncoding = iota
	wireCBOR                  // one CBOR data item
	wireProtobuf              // an object's protobuf message, without its envelope
)

// Bytes returns the object as the server encoded it: JSON, CBOR when
// IsCBOR (see Config.PreferCBOR), or when IsProtobuf the object's protobuf
// message without the envelope ("k8s\x00" and a runtime.Unknown) it came
// in (see Config.PreferProtobuf).
func (r Raw[T]) Bytes() []byte { return r.data }

// IsCBOR reports whether Bytes is a CBOR data item rather than JSON.
func (r Raw[T]) IsCBOR() bool { return r.enc == wireCBOR }

// IsProtobuf reports whether Bytes is a protobuf message rather than JSON.
func (r Raw[T]) IsProtobuf() bool { return r.enc == wireProtobuf }

// Meta reads the object's identity, without decoding the rest.
func (r Raw[T]) Meta() (Meta, error) {
	if r.enc == wireProtobuf {
		m, err := protoPeekMeta(r.data)
		if err != nil {
			return Meta{}, fmt.Errorf("decode metadata: %w", err)
		}
		return Meta{Namespace: string(m.Namespace), Name: string(m.Name), UID: string(m.UID), ResourceVersion: string(m.ResourceVersion)}, nil
	}
	if r.enc == wireCBOR {
		var m cborMeta
		if err := decodeCBORInto(r.data, &m); err != nil {
			return Meta{}, fmt.Errorf("decode metadata: %w", err)
		}
		md := m.Metadata
		return Meta{Namespace: md.Namespace, Name: md.Name, UID: md.UID, ResourceVersion: md.ResourceVersion}, nil
	}
	if m, ok := peekMeta(r.data); ok {
		return Meta{Namespace: string(m.Namespace), Name: string(m.Name), UID: string(m.UID), ResourceVersion: string(m.ResourceVersion)}, nil
	}
	var m metaOnly
	if err := json.UnmarshalCaseSensitivePreserveInts(r.data, &m); err != nil {
		return Meta{}, fmt.Errorf("decode metadata: %w", err)
	}
	md := m.Metadata
	return Meta{Namespace: md.Namespace, Name: md.Name, UID: md.UID, ResourceVersion: md.ResourceVersion}, nil
}

// PeekMeta reads the object's identity like Meta but allocates nothing:
// the slices point into the object's bytes. Use it to compare a listed
// object with a cached one (JSON or protobuf). For CBOR it decodes the
// identity as Meta does, with its allocations.
func (r Raw[T]) PeekMeta() (RawMeta, error) {
	if r.enc == wireProtobuf {
		m, err := protoPeekMeta(r.data)
		if err != nil {
			return RawMeta{}, fmt.Errorf("decode metadata: %w", err)
		}
		return m, nil
	}
	if r.enc == wireJSON {
		if m, ok := peekMeta(r.data); ok {
			return m, nil
		}
	}
	m, err := r.Meta()
	if err != nil {
		return RawMeta{}, err
	}
	return RawMeta{Namespace: []byte(m.Namespace), Name: []byte(m.Name), UID: []byte(m.UID), ResourceVersion: []byte(m.ResourceVersion)}, nil
}

// Decode decodes the object.
func (r Raw[T]) Decode() (T, error) {
	switch r.enc {
	case wireCBOR:
		return r.codec.decodeCBOR(r.data)
	case wireProtobuf:
		return r.codec.decodeProtobuf(r.data, r.env)
	}
	return r.codec.decode(r.data)
}
