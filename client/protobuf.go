package client

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"mime"
	"reflect"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Protobuf as Kubernetes sends it for built-in kinds
// (application/vnd.kubernetes.protobuf): an object or list is the magic
// "k8s\x00" and a runtime.Unknown whose raw field holds the object's
// message (without its TypeMeta, which the Unknown carries); a watch
// (;stream=watch) is a sequence of frames, each a 4-byte big-endian length
// and a metav1.WatchEvent's message (no envelope), whose object is the
// envelope of the object.
//
// Objects, events, list metadata and Statuses are decoded by their
// generated Unmarshal methods and apimachinery's protobuf serializer. By
// hand, with protowire, the client reads only what those cannot give
// without copying: an envelope's raw field and a list's items, as slices
// of the response (so that ListRaw passes each item on undecoded, like a
// JSON list's), and an object's identity for PeekMeta.

const protobufType = "application/vnd.kubernetes.protobuf"

// Accept headers of reads with protobuf preferred: a server that does not
// offer protobuf for the resource (a custom resource) answers JSON, which
// is decoded by its Content-Type.
const (
	protobufAccept     = protobufType + ", application/json;q=0.9"
	protobufDropAccept = protobufType + ";drop=metadata.managedFields, application/json;drop=metadata.managedFields;q=0.9"
)

// protobufMagic starts every protobuf envelope.
var protobufMagic = []byte("k8s\x00")

// isProtobuf reports whether a response's Content-Type is Kubernetes'
// protobuf (an object, a list or, with ;stream=watch, a watch).
func isProtobuf(contentType string) bool {
	if contentType == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == protobufType
}

// protoMessage is what generated protobuf types (every k8s.io/api type)
// have, and what apimachinery's protobuf serializer decodes with: objects
// of such a T can be decoded from protobuf.
type protoMessage interface {
	runtime.Object
	Reset()
	Unmarshal([]byte) error
}

// protobufCapable reports whether objects of type t can be decoded from
// protobuf (see protoMessage).
func protobufCapable(t reflect.Type) bool {
	return t.Implements(reflect.TypeFor[protoMessage]())
}

// Fields of the messages read by hand: runtime.Unknown's raw, a list's
// metadata and items (the same in every Kubernetes list), and an object's
// metadata with the parts of metav1.ObjectMeta Meta reads.
const (
	unknownTypeMeta     = 1
	unknownRaw          = 2
	typeMetaAPIVersion  = 1
	typeMetaKind        = 2
	listMetadata        = 1
	listItems           = 2
	objectMetadata      = 1
	metaName            = 1
	metaNamespace       = 3
	metaUID             = 5
	metaResourceVersion = 6
	eventType           = 1
	eventObject         = 2
	rawExtensionRaw     = 1
)

// protoFields calls fn with each length-delimited field of the message b
// (a slice of b) and skips the others; fn returning false stops.
func protoFields(b []byte, fn func(num protowire.Number, v []byte) bool) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			if !fn(num, v) {
				return nil
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil
}

// envelope is a protobuf envelope read in place: its object's message
// and the TypeMeta the envelope gives it.
type envelope struct {
	raw        []byte
	apiVersion []byte
	kind       []byte
}

// openEnvelope reads the envelope data (magic included) without copying.
func openEnvelope(data []byte) (envelope, error) {
	var e envelope
	if !bytes.HasPrefix(data, protobufMagic) {
		return e, errors.New("not a protobuf envelope")
	}
	var ierr error
	err := protoFields(data[len(protobufMagic):], func(num protowire.Number, v []byte) bool {
		switch num {
		case unknownRaw:
			e.raw = v
		case unknownTypeMeta: // occurrences merge, as in a decode
			ierr = protoFields(v, func(num protowire.Number, v []byte) bool {
				switch num {
				case typeMetaAPIVersion:
					e.apiVersion = v
				case typeMetaKind:
					e.kind = v
				}
				return true
			})
		}
		return ierr == nil
	})
	return e, cmp.Or(err, ierr)
}

// protoList reads a list's message: its metadata, and each item's
// message (a slice of data) passed to fn in order; an error from fn stops
// the list and is returned.
func protoList(data []byte, fn func(item []byte) error) (metav1.ListMeta, error) {
	var meta metav1.ListMeta
	var ferr error
	err := protoFields(data, func(num protowire.Number, v []byte) bool {
		switch num {
		case listMetadata:
			if err := meta.Unmarshal(v); err != nil {
				ferr = fmt.Errorf("metadata: %w", err)
			}
		case listItems:
			ferr = fn(v)
		}
		return ferr == nil
	})
	if err != nil {
		return meta, err
	}
	return meta, ferr
}

// protoPeekMeta reads an object message's identity in place (the slices
// point into data). Occurrences of metadata merge, field by field, as in
// a decode.
func protoPeekMeta(data []byte) (RawMeta, error) {
	var m RawMeta
	var ierr error
	err := protoFields(data, func(num protowire.Number, md []byte) bool {
		if num != objectMetadata {
			return true
		}
		ierr = protoFields(md, func(num protowire.Number, v []byte) bool {
			switch num {
			case metaName:
				m.Name = v
			case metaNamespace:
				m.Namespace = v
			case metaUID:
				m.UID = v
			case metaResourceVersion:
				m.ResourceVersion = v
			}
			return true
		})
		return ierr == nil
	})
	return m, cmp.Or(err, ierr)
}

// decodeProtobufStatus decodes a metav1.Status envelope (an error
// response's body).
func decodeProtobufStatus(data []byte) (metav1.Status, error) {
	env, err := openEnvelope(data)
	if err != nil {
		return metav1.Status{}, err
	}
	return protobufStatus(env)
}

// protobufStatus decodes the metav1.Status in env (an error response's
// body, or a watch ERROR event's object), its kind from the envelope.
func protobufStatus(env envelope) (metav1.Status, error) {
	var st metav1.Status
	if err := st.Unmarshal(env.raw); err != nil {
		return st, err
	}
	st.APIVersion, st.Kind = string(env.apiVersion), string(env.kind)
	return st, nil
}

// protobufEvent reads a frame of a protobuf watch: a metav1.WatchEvent's
// message, without an envelope (type, and the object's envelope in a
// RawExtension). It returns the event's type and the object's envelope
// opened, its slices pointing into frame.
func protobufEvent(frame []byte) (EventType, envelope, error) {
	var typ, obj []byte
	var ierr error
	err := protoFields(frame, func(num protowire.Number, v []byte) bool {
		switch num {
		case eventType:
			typ = v
		case eventObject: // occurrences merge, as in a decode
			ierr = protoFields(v, func(num protowire.Number, v []byte) bool {
				if num == rawExtensionRaw {
					obj = v
				}
				return true
			})
		}
		return ierr == nil
	})
	if err = cmp.Or(err, ierr); err != nil {
		return "", envelope{}, fmt.Errorf("decode protobuf event: %w", err)
	}
	inner, err := openEnvelope(obj)
	if err != nil {
		return "", envelope{}, fmt.Errorf("decode protobuf event object: %w", err)
	}
	return eventTypeOf(typ), inner, nil
}

// eventTypeOf is typ as an EventType, without allocating for the known
// types.
func eventTypeOf(typ []byte) EventType {
	switch string(typ) {
	case string(Added):
		return Added
	case string(Modified):
		return Modified
	case string(Deleted):
		return Deleted
	case string(Bookmark):
		return Bookmark
	case string(Error):
		return Error
	}
	return EventType(typ)
}

// decodeProtobufAnswer decodes a protobuf answer (an envelope) into obj,
// which must be a generated protobuf type; its kind is set from the
// envelope.
func decodeProtobufAnswer(data []byte, obj any) error {
	pm, ok := obj.(protoMessage)
	if !ok {
		return fmt.Errorf("decode answer: protobuf cannot be decoded into %T", obj)
	}
	env, err := openEnvelope(data)
	if err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	pm.Reset()
	if err := unmarshalProtobuf(pm, env.raw, &env); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return nil
}

// unmarshalProtobuf decodes an object's message into pm, and sets its kind
// from env (the envelope it came in) if there is one with a kind.
func unmarshalProtobuf(pm protoMessage, data []byte, env *envelope) error {
	if err := pm.Unmarshal(data); err != nil {
		return err
	}
	if env != nil && len(env.kind) > 0 {
		pm.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(string(env.apiVersion), string(env.kind)))
	}
	return nil
}
