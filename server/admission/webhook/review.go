package webhook

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"

	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/server/jsonenc"
	"github.com/objwatch/objwatch/server/webhookclient"
)

// reviewScheme knows the AdmissionReview versions a webhook may answer
// with, and Status.
var reviewScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{admissionv1.AddToScheme, admissionv1beta1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s
}()

var (
	jsonSerializer = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, reviewScheme, reviewScheme, kjson.SerializerOptions{})
	// yamlSerializer reads what is not JSON, as client-go's rest client
	// does with a body it cannot take for JSON (so its errors are those
	// kube-apiserver reports).
	yamlSerializer = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, reviewScheme, reviewScheme, kjson.SerializerOptions{Yaml: true})
)

// encodeReview encodes a review built by k8s.io/apiserver's request
// builder: its RawExtensions carry objects, which are encoded in place.
// A v1 review is written by hand (appendReviewV1), as encoding/json would
// write it but without its reflection over the review and the object,
// and without validating the object's encoding again: that was most of a
// webhook call's CPU in the server.
func encodeReview(review runtime.Object) ([]byte, error) {
	switch r := review.(type) {
	case *admissionv1.AdmissionReview:
		return appendReviewV1(make([]byte, 0, 4096), r.Request), nil
	case *admissionv1beta1.AdmissionReview:
		r.TypeMeta = metav1.TypeMeta{APIVersion: admissionv1beta1.SchemeGroupVersion.String(), Kind: "AdmissionReview"}
		for _, e := range []*runtime.RawExtension{&r.Request.Object, &r.Request.OldObject, &r.Request.Options} {
			if e.Object != nil {
				e.Raw, e.Object = appendRaw(nil, e), nil
			}
		}
		return json.Marshal(review)
	default:
		return nil, fmt.Errorf("unexpected review type %T", review)
	}
}

// appendReviewV1 appends an admission.k8s.io/v1 AdmissionReview of r as
// encoding/json encodes admissionv1.AdmissionReview (object, oldObject
// and options null when absent, as RawExtension encodes them).
func appendReviewV1(b []byte, r *admissionv1.AdmissionRequest) []byte {
	str := jsonenc.AppendString
	// A GroupVersionKind or GroupVersionResource: last is "kind" or
	// "resource".
	gv := func(b []byte, g, v, last, val string) []byte {
		b = append(b, `{"group":`...)
		b = str(b, g)
		b = append(b, `,"version":`...)
		b = str(b, v)
		b = append(b, ',', '"')
		b = append(b, last...)
		b = append(b, '"', ':')
		b = str(b, val)
		return append(b, '}')
	}
	opt := func(b []byte, name, v string) []byte {
		if v == "" {
			return b
		}
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		return str(b, v)
	}
	b = append(b, `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":`...)
	b = str(b, string(r.UID))
	b = append(b, `,"kind":`...)
	b = gv(b, r.Kind.Group, r.Kind.Version, "kind", r.Kind.Kind)
	b = append(b, `,"resource":`...)
	b = gv(b, r.Resource.Group, r.Resource.Version, "resource", r.Resource.Resource)
	b = opt(b, "subResource", r.SubResource)
	if k := r.RequestKind; k != nil {
		b = append(b, `,"requestKind":`...)
		b = gv(b, k.Group, k.Version, "kind", k.Kind)
	}
	if res := r.RequestResource; res != nil {
		b = append(b, `,"requestResource":`...)
		b = gv(b, res.Group, res.Version, "resource", res.Resource)
	}
	b = opt(b, "requestSubResource", r.RequestSubResource)
	b = opt(b, "name", r.Name)
	b = opt(b, "namespace", r.Namespace)
	b = append(b, `,"operation":`...)
	b = str(b, string(r.Operation))
	b = append(b, `,"userInfo":`...)
	b = audit.AppendUserInfo(b, &r.UserInfo)
	b = append(b, `,"object":`...)
	b = appendRaw(b, &r.Object)
	b = append(b, `,"oldObject":`...)
	b = appendRaw(b, &r.OldObject)
	if r.DryRun != nil {
		b = append(b, `,"dryRun":`...)
		b = strconv.AppendBool(b, *r.DryRun)
	}
	b = append(b, `,"options":`...)
	b = appendRaw(b, &r.Options)
	return append(b, '}', '}')
}

// appendRaw appends what e carries: its object (an unstructured one
// without reflection), its raw bytes, or null.
func appendRaw(b []byte, e *runtime.RawExtension) []byte {
	switch {
	case e.Object != nil:
		if u, ok := e.Object.(*unstructured.Unstructured); ok {
			return audit.AppendJSON(b, u.Object)
		}
		return audit.AppendJSON(b, e.Object) // encoding/json
	case e.Raw != nil:
		return append(b, e.Raw...)
	}
	return append(b, "null"...)
}

// maxErrorBody is how much of a non-Status error body is quoted, as in
// client-go.
const maxErrorBody = 2048

// decodeResponse reads a webhook's answer into into as client-go's rest
// client would: a status other than 2xx is an error (the Status the body
// carries, or Kubernetes' generic error for the code), a body that is not
// a review the decoder's error.
func decodeResponse(resp *webhookclient.Response, into runtime.Object) (runtime.Object, error) {
	if resp.StatusCode < http.StatusOK || resp.StatusCode > http.StatusPartialContent {
		mediaType, _, _ := mime.ParseMediaType(resp.ContentType)
		var st metav1.Status
		if json.Unmarshal(resp.Body, &st) == nil && st.Kind == "Status" && st.Status != "" {
			return nil, &apierrors.StatusError{ErrStatus: st}
		}
		msg := "unknown"
		if mediaType == "text/plain" {
			b := resp.Body
			if len(b) > maxErrorBody {
				b = b[:maxErrorBody]
			}
			msg = strings.TrimSpace(string(b))
		}
		return nil, apierrors.NewGenericServerResponse(resp.StatusCode, "POST", schema.GroupResource{}, "", msg, 0, true)
	}
	s := jsonSerializer
	if !json.Valid(resp.Body) {
		s = yamlSerializer
	}
	out, _, err := s.Decode(resp.Body, nil, into)
	if err != nil {
		return nil, err
	}
	return out, nil
}
