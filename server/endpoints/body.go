package endpoints

import (
	"fmt"
	"io"
	"mime"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"sigs.k8s.io/yaml"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// readBody reads the request body, enforcing the size limit (413).
func (a *API) readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > a.cfg.MaxRequestBytes {
		return nil, tooBig(a.cfg.MaxRequestBytes)
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, a.cfg.MaxRequestBytes+1))
	if err != nil {
		return nil, apistatus.BadRequest("read request body: %v", err)
	}
	if int64(len(b)) > a.cfg.MaxRequestBytes {
		return nil, tooBig(a.cfg.MaxRequestBytes)
	}
	return b, nil
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
	gvk := obj.GetObjectKind().GroupVersionKind()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, apistatus.BadRequest("the body of the request was malformed: %v", err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	if md, ok := m["metadata"].(map[string]any); ok && md["creationTimestamp"] == nil {
		delete(md, "creationTimestamp")
	}
	return u, nil
}

// decodeBody decodes a JSON, YAML or (built-in types) protobuf object body.
func decodeBody(r *http.Request, body []byte) (*unstructured.Unstructured, error) {
	switch mediaType(r) {
	case protobufType:
		return decodeProtobuf(body)
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
