package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestReinvocationAcrossPlugins: a MutatingAdmissionPolicy with
// reinvocationPolicy IfNeeded is invoked once more when a mutating
// webhook, which runs after the policies, changed the object, and then
// sees the webhook's change; one with Never is not, and a webhook with
// Never is not called again for the policy's change, as kube-apiserver's
// reinvoking admission chain.
func TestReinvocationAcrossPlugins(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	copyB := func(to string) string {
		return fmt.Sprintf(`[JSONPatch{op: "add", path: "/metadata/labels/%s", value: ("b" in object.metadata.labels) ? object.metadata.labels["b"] : "none"}]`, to)
	}
	a.MutatingPolicy("copy-if-needed", "reinv", "IfNeeded", copyB("a"))
	a.MutatingPolicy("copy-never", "reinv", "Never", copyB("c"))
	obj := servertest.Labelled("r", "reinv", "")
	a.DryRunUntil(servertest.CMs, obj, "policies enforced", func(l map[string]any) bool { return l["a"] == "none" && l["c"] == "none" })
	var calls atomic.Int32
	env.Webhook(t, testenv.WebhookOptions{Name: "set-b", Rules: servertest.ConfigMapRules,
		Mutating: func(_ context.Context, r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			calls.Add(1)
			if strings.Contains(string(r.Object.Raw), `"b":"from-webhook"`) {
				return nil
			}
			return servertest.JSONPatch(`{"op":"add","path":"/metadata/labels/b","value":"from-webhook"}`)
		}})
	r := a.Must("POST", servertest.CMs, obj)
	l := servertest.LabelsOf(r)
	if l["a"] != "from-webhook" || l["b"] != "from-webhook" || l["c"] != "none" || calls.Load() != 1 {
		t.Errorf("labels %v, webhook calls %d; want a=b=from-webhook (the IfNeeded policy reinvoked), c=none, one webhook call", l, calls.Load())
	}
}

// serviceWebhooks serves h over HTTPS on a loopback port with a new CA's
// certificate for the in-cluster names NAME.NAMESPACE.svc of the given
// Services (what kube-apiserver verifies for a clientConfig.service), and
// creates each Service, of type ExternalName pointing at 127.0.0.1. It
// returns the CA (PEM) and the port.
func serviceWebhooks(t *testing.T, a *servertest.API, h http.Handler, services ...string) ([]byte, int32) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "service webhook CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	var names []string
	for _, s := range services {
		names = append(names, s+".default.svc")
		servertest.MustCode(t, "create service "+s, a.JSON("POST", "/api/v1/namespaces/default/services",
			fmt.Sprintf(`{"metadata":{"name":%q},"spec":{"type":"ExternalName","externalName":"127.0.0.1"}}`, s)), http.StatusCreated)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), int32(srv.Listener.Addr().(*net.TCPAddr).Port)
}

// TestServiceWebhooks: an admission webhook and a conversion webhook
// reached through clientConfig.service (an ExternalName Service; the
// certificate is the in-cluster name's), and a dry-run create in a
// version other than the storage version calls the conversion webhook and
// fails when it fails, as in Kubernetes.
func TestServiceWebhooks(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	conv := &servertest.ConvWebhook{Mode: "ok"}
	mux := http.NewServeMux()
	mux.HandleFunc("/convert", conv.Serve)
	mux.Handle("/admit", testenv.AdmissionHandler(func(_ context.Context, r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		if strings.Contains(string(r.Object.Raw), `"deny":"yes"`) {
			return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: "denied through a service"}}
		}
		return nil
	}))
	ca, port := serviceWebhooks(t, a, mux, "conv", "adm")

	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	path := "/admit"
	env.RegisterWebhooks(t, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "by-service"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "deny.example.com", Rules: servertest.ConfigMapRules, FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: ca,
				Service: &admissionregistrationv1.ServiceReference{Namespace: "default", Name: "adm", Path: &path, Port: &port}},
		}},
	}, nil)
	servertest.MustCode(t, "allowed create", a.JSON("POST", servertest.CMs, servertest.CM("ok", "")), http.StatusCreated)
	servertest.WantStatus(t, a.JSON("POST", servertest.CMs, servertest.Labelled("no", "deny", "")), http.StatusBadRequest,
		`admission webhook "deny.example.com" denied the request: denied through a service`)

	crd := strings.Replace(servertest.WidgetCRD("", ca, "v1"), `"url":""`,
		fmt.Sprintf(`"service":{"namespace":"default","name":"conv","path":"/convert","port":%d}`, port), 1)
	servertest.MustCode(t, "create CRD", a.JSON("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd), http.StatusCreated)
	deadline := time.Now().Add(10 * time.Second)
	for a.JSON("GET", servertest.WidgetsV2, "").Code != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("widgets not served within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	servertest.MustCode(t, "create in v2", a.JSON("POST", servertest.WidgetsV2, servertest.WidgetV2("w", 4)), http.StatusCreated)
	if got := servertest.SpecOf(a.JSON("GET", servertest.WidgetsV1+"/w", "").Object()); got["size"] != "4" {
		t.Errorf("w in v1 = %v, want size 4 (converted by the service's webhook)", got)
	}
	conv.Reset()
	servertest.MustCode(t, "dry-run create in v2", a.JSON("POST", servertest.WidgetsV2+"?dryRun=All", servertest.WidgetV2("dry", 1)), http.StatusCreated)
	if n := conv.CallsFor("example.com/v1", "dry"); n != 1 {
		t.Errorf("dry-run create in v2 converted %d times to v1, want once", n)
	}
	conv.SetMode("500")
	r := a.JSON("POST", servertest.WidgetsV2+"?dryRun=All", servertest.WidgetV2("dry", 1))
	if want := "conversion webhook for example.com/v2, Kind=Widget failed: "; r.Code != http.StatusInternalServerError || !strings.HasPrefix(r.Status().Message, want) {
		t.Errorf("dry-run create in v2 with the webhook failing = %d %s, want 500 %q", r.Code, r.Body, want)
	}
	servertest.MustCode(t, "dry-run create in v1 needs no webhook", a.JSON("POST", servertest.WidgetsV1+"?dryRun=All", servertest.WidgetV1("dry", "1")), http.StatusCreated)
	conv.SetMode("ok")
	servertest.MustCode(t, "nothing stored", a.JSON("GET", servertest.WidgetsV1+"/dry", ""), http.StatusNotFound)
}
