package webhook

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"

	webhookclient "github.com/objwatch/objwatch/server/webhook"
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
func encodeReview(review runtime.Object) ([]byte, error) {
	raw := func(exts ...*runtime.RawExtension) error {
		for _, e := range exts {
			if e.Object == nil {
				continue
			}
			var v any = e.Object
			if u, ok := e.Object.(*unstructured.Unstructured); ok {
				v = u.Object // encoding/json is faster than the unstructured codec
			}
			b, err := json.Marshal(v)
			if err != nil {
				return err
			}
			e.Raw, e.Object = b, nil
		}
		return nil
	}
	switch r := review.(type) {
	case *admissionv1.AdmissionReview:
		r.TypeMeta = metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"}
		if err := raw(&r.Request.Object, &r.Request.OldObject, &r.Request.Options); err != nil {
			return nil, err
		}
	case *admissionv1beta1.AdmissionReview:
		r.TypeMeta = metav1.TypeMeta{APIVersion: admissionv1beta1.SchemeGroupVersion.String(), Kind: "AdmissionReview"}
		if err := raw(&r.Request.Object, &r.Request.OldObject, &r.Request.Options); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unexpected review type %T", review)
	}
	return json.Marshal(review)
}

// maxErrorBody is how much of a non-Status error body is quoted, as in
// client-go.
const maxErrorBody = 2048

// decodeResponse reads a webhook's answer into into as client-go's rest
// client would: a status other than 2xx is an error (the Status the body
// carries, or Kubernetes' generic error for the code), a body that is not
// a review the decoder's error.
func decodeResponse(resp *webhookclient.Response, into runtime.Object) (runtime.Object, error) {
	mediaType, _, _ := mime.ParseMediaType(resp.ContentType)
	if resp.StatusCode < http.StatusOK || resp.StatusCode > http.StatusPartialContent {
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
