package testenv

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WebhookCerts are a CA and a serving certificate for 127.0.0.1 and
// localhost signed by it, for a webhook server in the test's process.
type WebhookCerts struct {
	// CABundle is the CA certificate (PEM): a webhook configuration's
	// clientConfig.caBundle.
	CABundle []byte
	// CertPEM and KeyPEM are the serving certificate and its key.
	CertPEM, KeyPEM []byte
	// CertDir holds them as tls.crt and tls.key, the names
	// controller-runtime's webhook.Server reads from its CertDir.
	CertDir string
}

// TLSConfig returns a server TLS configuration serving the certificate.
func (c *WebhookCerts) TLSConfig() (*tls.Config, error) {
	cert, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// NewWebhookCerts generates WebhookCerts valid for a day, written to a
// temporary directory removed when the test ends.
func NewWebhookCerts(t testing.TB) *WebhookCerts {
	t.Helper()
	c, err := newWebhookCerts(t.TempDir())
	if err != nil {
		t.Fatalf("testenv: webhook certificates: %v", err)
	}
	return c
}

func newWebhookCerts(dir string) (*WebhookCerts, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "testenv-webhook-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, IsCA: true, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	c := &WebhookCerts{
		CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		CertPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:   pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		CertDir:  dir,
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), c.CertPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), c.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	return c, nil
}

// WebhookServer is an HTTPS server in the test's process, on a random
// loopback port, stopped when the test ends.
type WebhookServer struct {
	// URL is https://127.0.0.1:port.
	URL   string
	Certs *WebhookCerts
}

// StartWebhookServer serves h over HTTPS with new WebhookCerts until the
// test ends.
func StartWebhookServer(t testing.TB, h http.Handler) *WebhookServer {
	t.Helper()
	certs := NewWebhookCerts(t)
	tc, err := certs.TLSConfig()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: webhook listener: %v", err)
	}
	srv := &http.Server{Handler: h, TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.ServeTLS(ln, "", "")
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return &WebhookServer{URL: "https://" + ln.Addr().String(), Certs: certs}
}

// AdmissionFunc answers one admission request. The response's uid is
// filled in.
type AdmissionFunc func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

// AdmissionHandler serves AdmissionReview v1 requests with f, as a
// webhook server does.
func AdmissionHandler(f AdmissionFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		resp := f(r.Context(), review.Request)
		if resp == nil {
			resp = &admissionv1.AdmissionResponse{Allowed: true}
		}
		resp.UID = review.Request.UID
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Response: resp,
		})
	})
}

// WebhookOptions describe the webhooks Env.Webhook registers.
type WebhookOptions struct {
	// Name names the configurations (default "testenv"); the webhooks
	// are NAME.testenv.objwatch.io.
	Name string
	// Validating and Mutating answer the validating and mutating
	// webhook; at least one is required.
	Validating, Mutating AdmissionFunc
	// Rules select the requests sent to the webhooks. Required.
	Rules []admissionregistrationv1.RuleWithOperations
	// Validate and Mutate, if set, adjust the generated webhooks
	// (failurePolicy, selectors, matchConditions, ...) before they are
	// created.
	Validate func(*admissionregistrationv1.ValidatingWebhook)
	Mutate   func(*admissionregistrationv1.MutatingWebhook)
}

// Webhook starts an HTTPS server in the test's process answering
// /validate with o.Validating and /mutate with o.Mutating, registers a
// ValidatingWebhookConfiguration and a MutatingWebhookConfiguration for
// them (sideEffects None, caBundle filled in), and returns once the
// server enforces them. The server stops and the configurations are
// deleted when the test ends.
func (e *Env) Webhook(t testing.TB, o WebhookOptions) *WebhookServer {
	t.Helper()
	if o.Validating == nil && o.Mutating == nil {
		t.Fatal("testenv: Webhook needs Validating or Mutating")
	}
	if o.Name == "" {
		o.Name = "testenv"
	}
	mux := http.NewServeMux()
	if o.Validating != nil {
		mux.Handle("/validate", AdmissionHandler(o.Validating))
	}
	if o.Mutating != nil {
		mux.Handle("/mutate", AdmissionHandler(o.Mutating))
	}
	s := StartWebhookServer(t, mux)
	none := admissionregistrationv1.SideEffectClassNone
	cc := func(path string) admissionregistrationv1.WebhookClientConfig {
		u := s.URL + path
		return admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: s.Certs.CABundle}
	}
	var vc *admissionregistrationv1.ValidatingWebhookConfiguration
	var mc *admissionregistrationv1.MutatingWebhookConfiguration
	if o.Validating != nil {
		h := admissionregistrationv1.ValidatingWebhook{Name: o.Name + ".testenv.objwatch.io", ClientConfig: cc("/validate"),
			Rules: o.Rules, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}}
		if o.Validate != nil {
			o.Validate(&h)
		}
		vc = &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: o.Name}, Webhooks: []admissionregistrationv1.ValidatingWebhook{h}}
	}
	if o.Mutating != nil {
		h := admissionregistrationv1.MutatingWebhook{Name: o.Name + ".testenv.objwatch.io", ClientConfig: cc("/mutate"),
			Rules: o.Rules, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}}
		if o.Mutate != nil {
			o.Mutate(&h)
		}
		mc = &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: o.Name}, Webhooks: []admissionregistrationv1.MutatingWebhook{h}}
	}
	e.RegisterWebhooks(t, vc, mc)
	return s
}

// RegisterWebhooks creates the configurations that are not nil (for a
// webhook server the test runs itself, such as controller-runtime's with
// CertDir from NewWebhookCerts) and returns once the server enforces
// them; they are deleted when the test ends.
func (e *Env) RegisterWebhooks(t testing.TB, v *admissionregistrationv1.ValidatingWebhookConfiguration, m *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	hc := e.HTTPClient()
	type config struct {
		kind, plural string
		obj          any
		name         string
	}
	var cs []config
	if m != nil {
		m.APIVersion, m.Kind = "admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"
		cs = append(cs, config{m.Kind, "mutatingwebhookconfigurations", m, m.Name})
	}
	if v != nil {
		v.APIVersion, v.Kind = "admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"
		cs = append(cs, config{v.Kind, "validatingwebhookconfigurations", v, v.Name})
	}
	for _, c := range cs {
		base := e.Config.Host + "/apis/admissionregistration.k8s.io/v1/" + c.plural
		rv, err := createObject(hc, base, c.obj)
		if err != nil {
			t.Fatalf("testenv: create %s %s: %v", c.kind, c.name, err)
		}
		t.Cleanup(func() {
			req, _ := http.NewRequest(http.MethodDelete, base+"/"+c.name, nil)
			if resp, err := hc.Do(req); err == nil {
				resp.Body.Close()
			}
		})
		deadline := time.Now().Add(30 * time.Second)
		for !e.Server.AdmissionWebhookInstalled(c.kind, c.name, rv) {
			if time.Now().After(deadline) {
				t.Fatalf("testenv: %s %s not enforced after 30 s", c.kind, c.name)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	hc.CloseIdleConnections()
}

// createObject POSTs obj to url and returns the created object's
// resourceVersion.
func createObject(hc *http.Client, url string, obj any) (int64, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return 0, fmt.Errorf("%s: %s", resp.Status, body)
	}
	var out metav1.PartialObjectMetadata
	if err := json.Unmarshal(body, &out); err != nil {
		return 0, err
	}
	rv, err := strconv.ParseInt(out.ResourceVersion, 10, 64)
	if err != nil {
		return 0, errors.New("created object has no resourceVersion")
	}
	return rv, nil
}
