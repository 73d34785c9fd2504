package testenv_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/testenv"
)

// dialCRD is shop.example.com's Dial: v1 has spec.size, a string ("3");
// v2 has spec.replicas, an integer (3). v1 is stored.
func dialCRD() *apiextensionsv1.CustomResourceDefinition {
	schema := func(field, typ string) *apiextensionsv1.CustomResourceValidation {
		return &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{field: {Type: typ}}},
			}}}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "dials.shop.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "shop.example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "dials", Singular: "dial", Kind: "Dial", ListKind: "DialList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: schema("size", "string")},
				{Name: "v2", Served: true, Schema: schema("replicas", "integer")},
			},
		},
	}
}

// convertDial turns spec.size into spec.replicas and back.
func convertDial(obj map[string]any, to string) (map[string]any, error) {
	spec, _ := obj["spec"].(map[string]any)
	if spec == nil {
		return obj, nil
	}
	switch to {
	case "shop.example.com/v2":
		if s, ok := spec["size"].(string); ok {
			n, err := strconv.Atoi(s)
			if err != nil {
				return nil, fmt.Errorf("spec.size %q is not a number", s)
			}
			delete(spec, "size")
			spec["replicas"] = n
		}
	case "shop.example.com/v1":
		if n, ok := spec["replicas"].(float64); ok {
			delete(spec, "replicas")
			spec["size"] = strconv.Itoa(int(n))
		}
	default:
		return nil, fmt.Errorf("unknown version %s", to)
	}
	return obj, nil
}

// ExampleWithConversion serves a Go function as a CRD's conversion
// webhook (HTTPS, CA bundle wired into spec.conversion);
// TestConversionWebhook runs it against a real server.
func ExampleWithConversion() {
	// In a _test.go file:
	//
	//	env := testenv.Start(t,
	//		testenv.WithCRDs("config/crd/bases"),
	//		testenv.WithConversion("dials.shop.example.com", convertDial))
	//
	// and Dials written in v1 read in v2 through convertDial.
}

func TestConversionWebhook(t *testing.T) {
	var calls atomic.Int64
	counted := func(obj map[string]any, to string) (map[string]any, error) {
		calls.Add(1)
		return convertDial(obj, to)
	}
	env := testenv.Start(t, testenv.WithCRDObjects(dialCRD()), testenv.WithConversion("dials.shop.example.com", counted))
	if conv := env.CRDs[0].Spec.Conversion; conv == nil || conv.Strategy != apiextensionsv1.WebhookConverter || len(conv.Webhook.ClientConfig.CABundle) == 0 {
		t.Fatalf("CRD conversion = %+v, want a webhook with a CA bundle", conv)
	}
	hc := env.HTTPClient()
	defer hc.CloseIdleConnections()
	v1 := env.Config.Host + "/apis/shop.example.com/v1/namespaces/default/dials"
	v2 := env.Config.Host + "/apis/shop.example.com/v2/namespaces/default/dials"

	do(t, hc, "POST", v1, `{"apiVersion":"shop.example.com/v1","kind":"Dial","metadata":{"name":"d"},"spec":{"size":"3"}}`, http.StatusCreated)
	got := do(t, hc, "GET", v2+"/d", "", http.StatusOK)
	if got["apiVersion"] != "shop.example.com/v2" || spec(got)["replicas"] != float64(3) || spec(got)["size"] != nil {
		t.Fatalf("v1 object read in v2 = %v, want spec.replicas 3", got)
	}
	// Written in v2 (stored in v1), read back in v1.
	spec(got)["replicas"] = 5
	b, _ := json.Marshal(got)
	do(t, hc, "PUT", v2+"/d", string(b), http.StatusOK)
	back := do(t, hc, "GET", v1+"/d", "", http.StatusOK)
	if spec(back)["size"] != "5" || spec(back)["replicas"] != nil {
		t.Fatalf("v2 update read in v1 = %v, want spec.size \"5\"", back)
	}
	if calls.Load() == 0 {
		t.Fatal("the conversion function was never called")
	}
	// A conversion the function refuses fails the request with its error.
	do(t, hc, "POST", v1, `{"apiVersion":"shop.example.com/v1","kind":"Dial","metadata":{"name":"bad"},"spec":{"size":"three"}}`, http.StatusCreated)
	resp, err := hc.Get(v2 + "/bad")
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode < 500 || !strings.Contains(string(msg), `spec.size \"three\" is not a number`) {
		t.Errorf("refused conversion: %s %s, want a 5xx with the function's error", resp.Status, msg)
	}
}

// TestWireConversion: a CRD created by the test itself points at the
// webhook's /convert with its CA.
func TestWireConversion(t *testing.T) {
	s := testenv.StartConversionWebhook(t, convertDial)
	crd := dialCRD()
	s.WireConversion(crd)
	if w := crd.Spec.Conversion.Webhook; *w.ClientConfig.URL != s.URL+"/convert" || string(w.ClientConfig.CABundle) != string(s.Certs.CABundle) {
		t.Errorf("WireConversion set %+v", w)
	}
}

func spec(obj map[string]any) map[string]any {
	s, _ := obj["spec"].(map[string]any)
	return s
}

// do sends a JSON request and decodes the answer, failing the test on
// another status than want.
func do(t *testing.T, hc *http.Client, method, url, body string, want int) map[string]any {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s = %d %s, want %d", method, url, resp.StatusCode, b, want)
	}
	var out map[string]any
	json.Unmarshal(b, &out)
	return out
}

// ExampleConversionHandler answers a ConversionReview as the server sends
// it to a CRD's conversion webhook (WithConversion serves the same handler
// over HTTPS).
func ExampleConversionHandler() {
	h := testenv.ConversionHandler(convertDial)
	review := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"1",
		"desiredAPIVersion":"shop.example.com/v2",
		"objects":[{"apiVersion":"shop.example.com/v1","kind":"Dial","metadata":{"name":"d"},"spec":{"size":"3"}}]}}`
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/convert", strings.NewReader(review)))
	var out apiextensionsv1.ConversionReview
	json.Unmarshal(rec.Body.Bytes(), &out)
	fmt.Println(out.Response.Result.Status, string(out.Response.ConvertedObjects[0].Raw))
	// Output:
	// Success {"apiVersion":"shop.example.com/v2","kind":"Dial","metadata":{"name":"d"},"spec":{"replicas":3}}
}
