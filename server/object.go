package server

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// readBody reads the request body, enforcing the size limit (413).
func (s *Server) readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > s.cfg.MaxRequestBytes {
		return nil, tooBig(s.cfg.MaxRequestBytes)
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, s.cfg.MaxRequestBytes+1))
	if err != nil {
		return nil, badRequest("read request body: %v", err)
	}
	if int64(len(b)) > s.cfg.MaxRequestBytes {
		return nil, tooBig(s.cfg.MaxRequestBytes)
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

// builtinScheme knows the Go types of the built-in kinds, their lists and
// the meta types (DeleteOptions); OpenAPI documents and protobuf decoding
// use it.
var builtinScheme = func() *runtime.Scheme {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, eventsv1.AddToScheme, coordinationv1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	return scheme
}()

// protobufCodec decodes the protobuf bodies Kubernetes clients send for
// built-in types.
var protobufCodec = protobuf.NewSerializer(builtinScheme, builtinScheme)

const protobufType = "application/vnd.kubernetes.protobuf"

// decodeProtobuf decodes a protobuf-encoded built-in object.
func decodeProtobuf(body []byte) (*unstructured.Unstructured, error) {
	obj, _, err := protobufCodec.Decode(body, nil, nil)
	if err != nil {
		return nil, badRequest("the body of the request was malformed: %v", err)
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, badRequest("the body of the request was malformed: %v", err)
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
			return nil, badRequest("the body of the request is not valid YAML: %v", err)
		}
		body = j
	default:
		return nil, unsupportedMediaType(mediaType(r))
	}
	return decodeObject(body)
}

// decodeObject parses a JSON object, with numbers as int64 or float64.
func decodeObject(b []byte) (*unstructured.Unstructured, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return nil, badRequest("the body of the request is not a JSON object")
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, badRequest("the body of the request was malformed: %v", err)
	}
	if md, ok := m["metadata"]; ok && md != nil {
		if _, ok := md.(map[string]any); !ok {
			return nil, badRequest("metadata must be an object")
		}
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// fromStorage decodes a stored value and stamps it with its revision and
// the apiVersion of the version it is served as.
func fromStorage(res *registry.Resource, kv storage.KeyValue) (*unstructured.Unstructured, error) {
	var m map[string]any
	if err := json.Unmarshal(kv.Value, &m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
	}
	if err := res.Strategy.Stored(m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(res.APIVersion())
	u.SetKind(res.Kind)
	u.SetResourceVersion(strconv.FormatInt(kv.ModRevision, 10))
	return u, nil
}

// toStorage encodes obj for storage: without resourceVersion, which is the
// etcd revision and not stored.
func toStorage(obj *unstructured.Unstructured) ([]byte, error) {
	rv := obj.GetResourceVersion()
	unstructured.RemoveNestedField(obj.Object, "metadata", "resourceVersion")
	var b []byte
	m, err := registry.StorageForm(obj.Object)
	if err == nil {
		b, err = json.Marshal(m)
	}
	if rv != "" {
		obj.SetResourceVersion(rv)
	}
	return b, err
}

// checkTypeMeta fills a missing apiVersion/kind from the URL and rejects
// ones that do not match it.
func checkTypeMeta(obj *unstructured.Unstructured, res *registry.Resource) error {
	av, kind := obj.GetAPIVersion(), obj.GetKind()
	if av == "" {
		obj.SetAPIVersion(res.APIVersion())
	} else if av != res.APIVersion() {
		return badRequest("the API version in the data (%s) does not match the expected API version (%s)", av, res.APIVersion())
	}
	if kind == "" {
		obj.SetKind(res.Kind)
	} else if kind != res.Kind {
		return badRequest("the kind in the data (%s) does not match the expected kind (%s)", kind, res.Kind)
	}
	return nil
}

// parseRV parses a resourceVersion parameter; "" is 0.
func parseRV(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("invalid resource version %q: must be a non-negative integer", s)
	}
	return n, nil
}

// strictErr formats unknown fields the way Kubernetes' strict decoding does.
func strictErr(unknown []string) error {
	msgs := make([]string, len(unknown))
	for i, u := range unknown {
		msgs[i] = fmt.Sprintf("unknown field %q", u)
	}
	return badRequest("strict decoding error: %s", strings.Join(msgs, ", "))
}
