package endpoints

import (
	"bytes"
	"fmt"
	"net/http"
	"reflect"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// encoding is the wire encoding of a response, negotiated from its
// Accept header (see negotiate). Objects are stored and cached as JSON;
// protobuf and CBOR responses are encoded from them by apimachinery's
// serializers, never by hand:
//
//   - protobuf (application/vnd.kubernetes.protobuf) only for the kinds
//     whose Go types registry.Scheme has, and for PartialObjectMetadata
//     of any resource, as kube-apiserver serves it;
//   - CBOR (application/cbor, KEP-4222) for every resource: a built-in
//     kind through its Go type (as kube-apiserver encodes it: byte fields
//     as byte strings), a custom resource as its unstructured content.
//
// A protobuf or CBOR list served from the watch cache is not encoded
// whole: each item's encoding is made once per object revision and kept
// with the cached object, and the list is written around them
// (listencoded.go), the same bytes.
//
// A watch in protobuf is a stream of length-prefixed metav1.WatchEvent
// messages (apimachinery's LengthDelimitedFramer) whose objects are
// enveloped protobuf; a watch in CBOR is a CBOR sequence
// (application/cbor-seq) of WatchEvent data items, their objects embedded
// as CBOR, not transcoded.
type encoding uint8

const (
	encJSON encoding = iota
	encProtobuf
	encCBOR
	// encYAML is asked for by an Accept clause of application/yaml:
	// negotiate renders such a response as JSON (output.yaml) and
	// convertedResponse converts it, as Kubernetes' YAML serializer is its JSON
	// one followed by a conversion. Only a Status is encoded in it
	// directly (statusEncoding).
	encYAML
)

const (
	cborType    = "application/cbor"
	cborSeqType = "application/cbor-seq"
	jsonType    = "application/json"
	yamlType    = "application/yaml"
)

var (
	// protobufRaw encodes a protobuf watch's events: unenveloped, as
	// apimachinery's protobuf stream serializer does.
	protobufRaw = protobuf.NewRawSerializer(registry.Scheme, registry.Scheme)
	cborCodec   = cbor.NewSerializer(registry.Scheme, registry.Scheme)
	// cborEvents encodes a CBOR watch's events, their objects' CBOR
	// embedded as it is (apimachinery's CBOR stream serializer).
	cborEvents = cbor.NewSerializer(registry.Scheme, registry.Scheme, cbor.Transcode(false))
)

// contentType is the Content-Type of a response in e (of a watch's when
// watch is true), as kube-apiserver sends it.
func (e encoding) contentType(watch bool) string {
	switch {
	case e == encProtobuf && watch:
		return protobufType + ";stream=watch"
	case e == encProtobuf:
		return protobufType
	case e == encCBOR && watch:
		return cborSeqType
	case e == encCBOR:
		return cborType
	case e == encYAML:
		return yamlType
	}
	return jsonType
}

// typed reports whether res's objects have a Go type the server can encode
// as protobuf, and as CBOR through that type.
func typed(res *registry.Resource) bool {
	return !res.Custom && registry.Scheme.Recognizes(res.GVK())
}

// encode writes v, a runtime.Object, in e with code.
func (e encoding) encode(w http.ResponseWriter, code int, v runtime.Object) error {
	var buf bytes.Buffer
	var err error
	switch e {
	case encProtobuf:
		err = protobufCodec.Encode(v, &buf)
	case encCBOR:
		err = cborCodec.Encode(v, &buf)
	case encYAML:
		var y []byte
		y, err = yaml.Marshal(v) // its JSON, converted, as Kubernetes' YAML serializer
		buf.Write(y)
	default:
		WriteJSON(w, code, v)
		return nil
	}
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("encode %T as %s: %w", v, e.contentType(false), err))
	}
	w.Header().Set("Content-Type", e.contentType(false))
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(code)
	w.Write(buf.Bytes())
	return nil
}

// write sends v, as output.object or output.list render it, in o's
// encoding: a decoded object of res becomes its Go type (typed) or, for a
// custom resource in CBOR, an Unstructured.
func (o output) write(w http.ResponseWriter, res *registry.Resource, code int, v any) error {
	if o.enc == encJSON {
		WriteJSON(w, code, v)
		return nil
	}
	obj, err := o.wireObject(res, v)
	if err != nil {
		return err
	}
	return o.enc.encode(w, code, obj)
}

// wireObject is v as a runtime.Object to encode in o's encoding.
func (o output) wireObject(res *registry.Resource, v any) (runtime.Object, error) {
	switch v := v.(type) {
	case runtime.Object:
		return v, nil
	case map[string]any:
		switch {
		case v["kind"] == asPartial:
			// A PartialObjectMetadata watch's bookmark.
			p := &metav1.PartialObjectMetadata{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(v, p); err != nil {
				return nil, apierrors.NewInternalError(err)
			}
			return p, nil
		case !typed(res):
			return &unstructured.Unstructured{Object: v}, nil
		}
		return typedObject(res.GVK(), v)
	}
	return nil, apierrors.NewInternalError(fmt.Errorf("cannot encode %T as %s", v, o.enc.contentType(false)))
}

// typedObject converts a decoded object to its Go type, gvk's.
func typedObject(gvk schema.GroupVersionKind, m map[string]any) (runtime.Object, error) {
	obj, err := registry.Scheme.New(gvk)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, obj); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("convert %s: %w", gvk.Kind, err))
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return obj, nil
}

// typedFromJSON decodes an encoded object of gvk into its Go type, as
// Kubernetes' JSON serializer decodes it (case-sensitive).
func typedFromJSON(gvk schema.GroupVersionKind, b []byte) (runtime.Object, error) {
	obj, err := registry.Scheme.New(gvk)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(b, obj); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("decode %s: %w", gvk.Kind, err))
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return obj, nil
}

// wireList is a list of res's objects (encoded ones, raw, or decoded
// ones, items) to encode in o's encoding: the Go list type of a typed
// resource, its items without apiVersion and kind as Kubernetes sends
// them, or an UnstructuredList.
func (o output) wireList(res *registry.Resource, l *objects.List) (runtime.Object, error) {
	raw, items, lm := l.Raw, l.Items, l.Meta
	gvk := res.GVK().GroupVersion().WithKind(res.ListKind)
	if !typed(res) || !registry.Scheme.Recognizes(gvk) {
		ul := &unstructured.UnstructuredList{Object: map[string]any{"kind": res.ListKind, "apiVersion": res.APIVersion()}}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&lm)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		ul.Object["metadata"] = m
		n := max(len(raw), len(items))
		ul.Items = make([]unstructured.Unstructured, n)
		for i := range n {
			var obj map[string]any
			if raw != nil {
				u, err := objects.Decode(raw[i])
				if err != nil {
					return nil, err
				}
				obj = u.Object
			} else {
				obj = items[i].Object
			}
			ul.Items[i].Object = o.listItem(obj)
		}
		return ul, nil
	}
	list, err := registry.Scheme.New(gvk)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	list.GetObjectKind().SetGroupVersionKind(gvk)
	la, err := meta.ListAccessor(list)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	la.SetResourceVersion(lm.ResourceVersion)
	la.SetContinue(lm.Continue)
	la.SetRemainingItemCount(lm.RemainingItemCount)
	field := reflect.ValueOf(list).Elem().FieldByName("Items")
	if !field.IsValid() || field.Kind() != reflect.Slice {
		return nil, apierrors.NewInternalError(fmt.Errorf("%s has no items", res.ListKind))
	}
	n := max(len(raw), len(items))
	s := reflect.MakeSlice(field.Type(), n, n)
	for i := range n {
		item := s.Index(i).Addr().Interface()
		if raw != nil {
			b := raw[i]
			if o.drop {
				if b, err = o.rawJSON(b); err != nil {
					return nil, apierrors.NewInternalError(err)
				}
			}
			err = sigsjson.UnmarshalCaseSensitivePreserveInts(b, item)
		} else {
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.listItem(items[i].Object), item)
		}
		if err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("decode %s: %w", res.Kind, err))
		}
		if tm := s.Index(i).FieldByName("TypeMeta"); tm.IsValid() {
			tm.SetZero() // as Kubernetes sends a list's items
		}
	}
	field.Set(s)
	return list, nil
}

// statusEncoding is the encoding of an error's Status: the first Accept
// clause of JSON, YAML, protobuf or CBOR that asks for no conversion, as
// kube-apiserver negotiates an error (a protobuf client of a custom
// resource gets a protobuf Status too); JSON otherwise.
func statusEncoding(r *http.Request) encoding {
	for _, c := range acceptClauses(r) {
		if c.Params["as"] != "" || c.Params["g"] != "" || c.Params["v"] != "" {
			continue
		}
		if e, ok := clauseEncoding(c.Type, c.SubType); ok {
			return e
		}
	}
	return encJSON
}

// clauseEncoding is the encoding of an Accept clause's media type; ok is
// false for one the server does not write.
func clauseEncoding(typ, sub string) (encoding, bool) {
	switch {
	case typ == "*" && sub == "*", typ == "application" && (sub == "*" || sub == "json"):
		return encJSON, true
	case typ == "application" && sub == "vnd.kubernetes.protobuf":
		return encProtobuf, true
	case typ == "application" && sub == "cbor":
		return encCBOR, true
	case typ == "application" && sub == "yaml":
		return encYAML, true
	}
	return encJSON, false
}
