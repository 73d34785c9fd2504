package endpoints

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/munnerz/goautoneg"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/change/fieldmask"
	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/fieldmanager"
	"github.com/objwatch/objwatch/server/jsonenc"
	"github.com/objwatch/objwatch/server/registry"
)

// The conversions a client may ask for with the as, g and v parameters of
// an Accept media type, as in Kubernetes.
const (
	asTable       = "Table"
	asPartial     = "PartialObjectMetadata"
	asPartialList = "PartialObjectMetadataList"
)

// output is how a response renders objects, negotiated from the request's
// Accept header: in which encoding (JSON, protobuf, CBOR: see encoding),
// as the object itself (as ""), or converted to a meta.k8s.io Table,
// PartialObjectMetadata or PartialObjectMetadataList of version; without
// metadata.managedFields when the client asked (drop=metadata.managedFields,
// see the package doc).
type output struct {
	enc encoding // never encYAML: see yaml
	// yaml: the client asked for YAML; the response is rendered as JSON
	// and converted by convertedResponse. A watch refuses it (406).
	yaml          bool
	as, version   string
	drop          bool
	includeObject string // a Table's rows: Metadata (default), Object or None
	// mask, on a list with projection=mask, trims its items (watchext.go).
	mask *fieldmask.Mask
}

// acceptClauses are the request's Accept clauses in goautoneg's order (by
// quality, then as written).
func acceptClauses(r *http.Request) []goautoneg.Accept {
	header := r.Header.Get("Accept")
	if header == "" {
		return nil
	}
	return goautoneg.ParseAccept(header)
}

// noneAccepted is kube-apiserver's 406 (go-restful's words, in a JSON
// Status) when no Accept clause names a media type a resource path
// serves; the server also serves CBOR, as kube-apiserver does with its
// CBOR feature gates on.
const noneAccepted = "406: Not Acceptable\n\nAvailable representations: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/cbor"

// streamsAccepted is kube-apiserver's 406 for a watch asked for in YAML,
// which has no stream encoding.
const streamsAccepted = "only the following media types are accepted: application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch, application/cbor-seq"

// acceptedTypes is kube-apiserver's list of what it serves, in its 406.
const acceptedTypes = "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/cbor"

// negotiate picks the first clause of the Accept header that the server
// can answer for res, as Kubernetes' negotiation does (goautoneg's order:
// by quality, then as written):
//
//   - JSON (application/json, application/*, */*) with or without a
//     conversion;
//   - protobuf for a kind with a Go type (see typed), and a
//     PartialObjectMetadata(List) conversion of any resource; a Table is
//     JSON only, as kube-apiserver allows it;
//   - CBOR for any resource, and PartialObjectMetadata(List), not Table;
//   - YAML (application/yaml) as JSON does, rendered as JSON and
//     converted (output.yaml); a watch refuses it.
//
// Other media types are skipped; an Accept header that names none of
// these at all gets kube-apiserver's 406 (noneAccepted), one without any
// clause plain JSON. When a clause the server refuses was skipped (a
// custom resource in protobuf, a Table not in JSON or YAML, a conversion
// it does not know) and none fits, the answer is Kubernetes' 406 too.
func negotiate(r *http.Request, res *registry.Resource) (output, error) {
	out := output{includeObject: r.URL.Query().Get("includeObject")}
	clauses := acceptClauses(r)
	refused, known := false, false
	for _, c := range clauses {
		enc, ok := clauseEncoding(c.Type, c.SubType)
		if !ok {
			continue
		}
		known = true
		o, ok := clauseOutput(c.Params)
		if enc == encYAML {
			enc, o.yaml = encJSON, true
		}
		switch {
		case !ok:
			refused = true
			continue
		case enc != encJSON && o.as == asTable,
			enc == encProtobuf && o.as == "" && !typed(res):
			// As kube-apiserver: a Table is JSON or YAML only; a
			// custom resource's serializers offer protobuf for
			// conversions only.
			refused = true
			continue
		}
		o.enc = enc
		o.includeObject = out.includeObject
		return o, nil
	}
	if refused {
		return out, notAcceptable(acceptedTypes)
	}
	if len(clauses) > 0 && !known {
		return out, notAcceptable(noneAccepted)
	}
	return out, nil
}

// clauseOutput is the output one Accept clause asks for; ok is false for a
// conversion the server cannot make. Unknown parameters are ignored, as
// Kubernetes ignores them.
func clauseOutput(params map[string]string) (output, bool) {
	var o output
	as, g, v := params["as"], params["g"], params["v"]
	o.drop = fieldmanager.DropsManagedFields(params[fieldmanager.DropParameter])
	if as == "" && g == "" && v == "" {
		return o, true
	}
	if g != metav1.GroupName || (v != "v1" && v != "v1beta1") {
		return o, false
	}
	switch as {
	case asTable, asPartial, asPartialList:
		o.as, o.version = as, v
		return o, true
	}
	return o, false
}

func notAcceptable(format string, args ...any) error {
	return apistatus.New(http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable, fmt.Sprintf(format, args...))
}

// goType is how Kubernetes' messages name the Go type of res's objects
// (or lists): *core.ConfigMap, *apps.Deployment, and for custom resources
// *unstructured.Unstructured.
func goType(res *registry.Resource, list bool) string {
	if res.Custom {
		if list {
			return "*unstructured.UnstructuredList"
		}
		return "*unstructured.Unstructured"
	}
	pkg := "core"
	if res.Group != "" {
		pkg, _, _ = strings.Cut(res.Group, ".")
	}
	kind := res.Kind
	if list {
		kind = res.ListKind
	}
	return "*" + pkg + "." + kind
}

// object renders one object (not a list) as o asks, or Kubernetes' 406
// for a list conversion.
func (o output) object(res *registry.Resource, obj *unstructured.Unstructured) (any, error) {
	switch o.as {
	case asTable:
		t := table(res, o.version, []*unstructured.Unstructured{obj}, o.includeObject, o.drop)
		t.ResourceVersion = obj.GetResourceVersion()
		return t, nil
	case asPartial:
		return o.partial(obj), nil
	case asPartialList:
		if res.Custom {
			// As kube-apiserver answers for a custom resource, whose
			// Unstructured passes for a list until it is read as one.
			return nil, apistatus.New(http.StatusInternalServerError, "", "content is not a list")
		}
		return nil, notAcceptable("you requested PartialObjectMetadataList, but the requested object is not a list (%s)", goType(res, false))
	}
	if o.drop {
		return fieldmanager.WithoutManagedFields(obj.Object), nil
	}
	return obj.Object, nil
}

// partial is obj's PartialObjectMetadata in o's version.
func (o output) partial(obj *unstructured.Unstructured) *metav1.PartialObjectMetadata {
	m := objectMeta(obj)
	if o.drop {
		m.ManagedFields = nil
	}
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{Kind: asPartial, APIVersion: metav1.GroupName + "/" + o.version},
		ObjectMeta: m,
	}
}

// list renders a list as o asks: a Table, a PartialObjectMetadataList, or
// Kubernetes' 406 for PartialObjectMetadata. It returns nil for a plain
// list, which the caller writes itself.
func (o output) list(res *registry.Resource, items []*unstructured.Unstructured, meta metav1.ListMeta) (any, error) {
	switch o.as {
	case asTable:
		t := table(res, o.version, items, o.includeObject, o.drop)
		t.ListMeta = meta
		return t, nil
	case asPartial:
		return nil, notAcceptable("you requested PartialObjectMetadata, but the requested object is a list (%s)", goType(res, true))
	case asPartialList:
		l := &metav1.PartialObjectMetadataList{
			TypeMeta: metav1.TypeMeta{Kind: asPartialList, APIVersion: metav1.GroupName + "/" + o.version},
			ListMeta: meta,
			Items:    make([]metav1.PartialObjectMetadata, len(items)),
		}
		for i, it := range items {
			l.Items[i] = *o.partial(it)
		}
		return l, nil
	}
	return nil, nil
}

// rawJSON returns an encoded object as o asks for it: b itself, or b
// without metadata.managedFields. Only a plain output (as "") may be
// written from encoded bytes.
func (o output) rawJSON(b []byte) ([]byte, error) {
	switch {
	case o.mask != nil:
		m, ok := jsonenc.Decode(b)
		if !ok {
			return nil, errors.New("cached object does not decode")
		}
		out, ok := jsonenc.Append(nil, o.mask.Project(m))
		if !ok {
			return nil, errors.New("projected object does not encode")
		}
		return out, nil
	case o.drop:
		return fieldmanager.DropManagedFieldsJSON(b)
	}
	return b, nil
}

// listItem is a decoded list item as o renders it: projected, or without
// managedFields, or as it is.
func (o output) listItem(obj map[string]any) map[string]any {
	switch {
	case o.mask != nil:
		return o.mask.Project(obj)
	case o.drop:
		return fieldmanager.WithoutManagedFields(obj)
	}
	return obj
}
