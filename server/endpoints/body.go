package endpoints

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"sigs.k8s.io/yaml"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// bodies reads request bodies within the size limit (413 beyond it).
// Immutable; safe for concurrent use.
type bodies struct{ maxBytes int64 }

// readBody reads the request body, enforcing the size limit (413).
func (bs *bodies) readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > bs.maxBytes {
		return nil, tooBig(bs.maxBytes)
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, bs.maxBytes+1))
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) || r.Context().Err() != nil {
			// The body did not arrive before the request's deadline (set
			// on the connection by serveResource).
			return nil, bodyTimeout()
		}
		return nil, apistatus.BadRequest("read request body: %v", err)
	}
	if int64(len(b)) > bs.maxBytes {
		return nil, tooBig(bs.maxBytes)
	}
	return b, nil
}

// prereadBody reads r's body (up to the size limit) before the request
// queues for an execution seat, so that a body that trickles in holds an
// admission slot of its user's share, never a seat. What it read and the
// error that ended the read are replayed to readBody, so that a request's
// errors keep their order (a bad option or media type before a body's).
func (bs *bodies) prereadBody(r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength > bs.maxBytes {
		return
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, bs.maxBytes+1))
	r.Body = &replayedBody{r: bytes.NewReader(b), err: err, c: r.Body}
}

// replayedBody is a body read already: its bytes, then its read error.
type replayedBody struct {
	r   *bytes.Reader
	err error
	c   io.Closer
}

func (b *replayedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF && b.err != nil {
		err = b.err
	}
	return n, err
}

func (b *replayedBody) Close() error { return b.c.Close() }

// bodyTimeout is the answer to a request whose body is still arriving at
// its deadline: the Status of any request that ran out of time.
func bodyTimeout() error {
	return apierrors.NewTimeoutError("request did not complete within the allowed duration", 0)
}

func tooBig(limit int64) error {
	return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", limit))
}

// mediaType returns the request's content type without parameters.
func mediaType(r *http.Request) string {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return "application/json"
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ct
	}
	return mt
}

// protobufCodec decodes the protobuf bodies Kubernetes clients send for
// built-in types.
var protobufCodec = protobuf.NewSerializer(registry.Scheme, registry.Scheme)

const protobufType = "application/vnd.kubernetes.protobuf"

// decodeProtobuf decodes a protobuf-encoded built-in object.
func decodeProtobuf(body []byte) (*unstructured.Unstructured, error) {
	obj, _, err := protobufCodec.Decode(body, nil, nil)
	if err != nil {
		return nil, apistatus.BadRequest("the body of the request was malformed: %v", err)
	}
	return fromTyped(obj)
}

// decodeCBOR decodes a CBOR-encoded object: a built-in kind through its Go
// type (whose byte fields a client sends as byte strings), any other kind
// as unstructured content.
func decodeCBOR(body []byte) (*unstructured.Unstructured, error) {
	obj, _, err := cborCodec.Decode(body, nil, nil)
	if runtime.IsNotRegisteredError(err) || runtime.IsMissingKind(err) || runtime.IsMissingVersion(err) {
		u := &unstructured.Unstructured{}
		if _, _, err := cborCodec.Decode(body, nil, u); err != nil {
			return nil, apistatus.BadRequest("the body of the request was malformed: %v", err)
		}
		return u, nil
	}
	if err != nil {
		return nil, apistatus.BadRequest("the body of the request was malformed: %v", err)
	}
	return fromTyped(obj)
}

// fromTyped is a decoded built-in object's unstructured content, refused
// (400) when it nests deeper than a JSON body may.
func fromTyped(obj runtime.Object) (*unstructured.Unstructured, error) {
	gvk := obj.GetObjectKind().GroupVersionKind()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, apistatus.BadRequest("the body of the request was malformed: %v", err)
	}
	if err := checkDepth(m, maxDepth); err != nil {
		// Protobuf has no depth limit, but the object's JSON, as stored
		// and served, would be refused by every JSON decoder of
		// Kubernetes, this server's included.
		return nil, apistatus.BadRequest("the body of the request was malformed: %v", err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	if md, ok := m["metadata"].(map[string]any); ok && md["creationTimestamp"] == nil {
		delete(md, "creationTimestamp")
	}
	return u, nil
}

// maxDepth is the deepest nesting of JSON objects and arrays that
// Kubernetes decodes (sigs.k8s.io/json's scanner, apimachinery's
// util/json and go.yaml.in/yaml all refuse deeper documents): the body's
// outermost object is level 1.
const maxDepth = 10000

// checkDepth fails if v, a decoded JSON value, nests objects and arrays
// deeper than limit levels. It recurses at most limit+1 deep.
func checkDepth(v any, limit int) error {
	var walk func(v any, depth int) error
	walk = func(v any, depth int) error {
		switch v := v.(type) {
		case map[string]any:
			if depth++; depth > limit {
				return fmt.Errorf("exceeded max depth of %d", limit)
			}
			for _, e := range v {
				if err := walk(e, depth); err != nil {
					return err
				}
			}
		case []any:
			if depth++; depth > limit {
				return fmt.Errorf("exceeded max depth of %d", limit)
			}
			for _, e := range v {
				if err := walk(e, depth); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(v, 0)
}

// decodeBody decodes a JSON, YAML, CBOR or (built-in types) protobuf
// object body.
func decodeBody(r *http.Request, body []byte) (*unstructured.Unstructured, error) {
	switch mediaType(r) {
	case protobufType:
		return decodeProtobuf(body)
	case cborType:
		return decodeCBOR(body)
	case "application/json", "*/*":
	case "application/yaml", "application/x-yaml", "text/yaml":
		j, err := yaml.YAMLToJSON(body)
		if err != nil {
			return nil, apistatus.BadRequest("the body of the request is not valid YAML: %v", err)
		}
		body = j
	default:
		return nil, apistatus.UnsupportedMediaType(mediaType(r))
	}
	return objects.Decode(body)
}

// checkBodyTypeMeta is checkTypeMeta for the object of a create or an
// update, in kube-apiserver's words for a built-in kind: its decoder
// refuses a kind it does not know, or cannot convert to the URL's, before
// an API version is compared (the missing parts taken from the URL's).
// Another version of the URL's kind gets checkTypeMeta's API version
// error, as from kube-apiserver for the versions its scheme knows (it
// knows old beta versions this server's scheme does not; one it does not
// know at all, such as core v2, it words as an unregistered kind).
func checkBodyTypeMeta(obj *unstructured.Unstructured, res *registry.Resource) error {
	want := res.GVK()
	got := want
	if av := obj.GetAPIVersion(); av != "" {
		gv, err := schema.ParseGroupVersion(av)
		if err != nil {
			return apistatus.BadRequest("%v", err)
		}
		got.Group, got.Version = gv.Group, gv.Version
	}
	if kind := obj.GetKind(); kind != "" {
		got.Kind = kind
	}
	if res.Custom || got.GroupKind() == want.GroupKind() {
		return checkTypeMeta(obj, res)
	}
	// kube-apiserver names its scheme by where apimachinery creates it.
	why := runtime.NewNotRegisteredErrForKind("pkg/runtime/scheme.go:111", got).Error()
	if o, err := registry.Scheme.New(got); err == nil {
		why = fmt.Sprintf("converting (%s) to (%s): unknown conversion", strings.TrimPrefix(reflect.TypeOf(o).String(), "*"), strings.TrimPrefix(goType(res, false), "*"))
	}
	return apistatus.BadRequest("%s in version %q cannot be handled as a %s: %s", got.Kind, got.Version, want.Kind, why)
}

// checkTypeMeta fills a missing apiVersion/kind from the URL and rejects
// ones that do not match it.
func checkTypeMeta(obj *unstructured.Unstructured, res *registry.Resource) error {
	av, kind := obj.GetAPIVersion(), obj.GetKind()
	if av == "" {
		obj.SetAPIVersion(res.APIVersion())
	} else if av != res.APIVersion() {
		return apistatus.BadRequest("the API version in the data (%s) does not match the expected API version (%s)", av, res.APIVersion())
	}
	if kind == "" {
		obj.SetKind(res.Kind)
	} else if kind != res.Kind {
		return apistatus.BadRequest("the kind in the data (%s) does not match the expected kind (%s)", kind, res.Kind)
	}
	return nil
}
