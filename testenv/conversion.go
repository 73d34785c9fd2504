package testenv

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/objwatch/objwatch/internal/instance"
)

// ConversionFunc converts one custom resource to toAPIVersion
// ("group/version"). obj is the object as JSON decodes it (apiVersion,
// kind, metadata, spec, ...), the function's own copy, which it may change
// and return. The helper sets the result's apiVersion to toAPIVersion; the
// function changes the rest (fields renamed or reshaped between versions)
// and must keep metadata but labels and annotations, as the server
// checks. An error fails the conversion: the client's request gets it as
// a 500 with the error's text.
//
// The function sees maps rather than typed objects because a test's
// custom resources are seldom Go types in both versions; convert with
// runtime.DefaultUnstructuredConverter when they are. It may be called
// concurrently.
type ConversionFunc func(obj map[string]any, toAPIVersion string) (map[string]any, error)

// ConversionHandler serves apiextensions.k8s.io/v1 ConversionReview
// requests with f, as a conversion webhook does.
func ConversionHandler(f ConversionFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review apiextensionsv1.ConversionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not a ConversionReview", http.StatusBadRequest)
			return
		}
		resp := convertAll(f, review.Request)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(apiextensionsv1.ConversionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
			Response: resp,
		})
	})
}

// convertAll answers one ConversionRequest: every object converted, or a
// Failure naming the first that could not be.
func convertAll(f ConversionFunc, req *apiextensionsv1.ConversionRequest) *apiextensionsv1.ConversionResponse {
	resp := &apiextensionsv1.ConversionResponse{UID: req.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	for i, raw := range req.Objects {
		out, err := convertOne(f, raw.Raw, req.DesiredAPIVersion)
		if err != nil {
			resp.ConvertedObjects = nil
			resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: fmt.Sprintf("object %d: %v", i, err)}
			return resp
		}
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: out})
	}
	return resp
}

func convertOne(f ConversionFunc, raw []byte, to string) ([]byte, error) {
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	out, err := f(obj, to)
	if err != nil {
		return nil, err
	}
	if out == nil {
		return nil, fmt.Errorf("conversion to %s returned no object", to)
	}
	out["apiVersion"] = to
	return json.Marshal(out)
}

// StartConversionWebhook serves f as a conversion webhook over HTTPS at
// URL+"/convert" until the test ends. Wire a CRD to it with
// WireConversion, or use WithConversion at Start.
func StartConversionWebhook(t testing.TB, f ConversionFunc) *WebhookServer {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/convert", ConversionHandler(f))
	return StartWebhookServer(t, mux)
}

// WireConversion sets crd's spec.conversion to the Webhook strategy with
// this server's /convert URL and CA bundle (ConversionReview v1). Create
// or update the CRD afterwards.
func (s *WebhookServer) WireConversion(crd *apiextensionsv1.CustomResourceDefinition) {
	u := s.URL + "/convert"
	crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
		Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{
			ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &u, CABundle: s.Certs.CABundle},
			ConversionReviewVersions: []string{"v1"},
		},
	}
}

// conversionPlan is one WithConversion: the CRD to wire and its function.
type conversionPlan struct {
	crd string
	f   ConversionFunc
}

// WithConversion serves f as the conversion webhook of the CRD named
// crdName (plural.group), which WithCRDs or WithCRDObjects installs: Start
// starts the webhook and sets the CRD's spec.conversion before creating
// it, so the CRD converts through f from its first request. The webhook
// stops when the test ends. A name no installed CRD has fails Start.
func WithConversion(crdName string, f ConversionFunc) Option {
	return func(o *instance.Options) {
		p := planOf(o)
		p.conversions = append(p.conversions, conversionPlan{crd: crdName, f: f})
	}
}

// wire starts c's webhook and points its CRD among crds at it.
func (c conversionPlan) wire(t testing.TB, crds []*apiextensionsv1.CustomResourceDefinition) error {
	for _, crd := range crds {
		if crd.Name == c.crd {
			StartConversionWebhook(t, c.f).WireConversion(crd)
			return nil
		}
	}
	return fmt.Errorf("WithConversion: no CustomResourceDefinition %q among those installed", c.crd)
}
