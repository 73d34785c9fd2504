package servertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"

	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/objwatch/objwatch/testenv"
)

// ConvWebhook is an in-process HTTPS conversion webhook for Widgets:
// example.com/v1 has spec.size, a string ("3"); example.com/v2 has
// spec.replicas, an integer (3). mode makes it misbehave.
type ConvWebhook struct {
	Srv    *httptest.Server
	CaPEM  []byte
	Mu     sync.Mutex
	Mode   string
	Calls  []ConvCall // every review received
	Closed bool
}

// ConvCall is one ConversionReview request the webhook received.
type ConvCall struct {
	ApiVersion string // of the ConversionReview
	Desired    string
	Names      []string
}

func StartConvWebhook(t testing.TB) *ConvWebhook {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "conversion test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	w := &ConvWebhook{Mode: "ok", CaPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
	w.Srv = httptest.NewUnstartedServer(http.HandlerFunc(w.Serve))
	w.Srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	w.Srv.StartTLS()
	t.Cleanup(w.Close)
	return w
}

func (w *ConvWebhook) Close() {
	w.Mu.Lock()
	closed := w.Closed
	w.Closed = true
	w.Mu.Unlock()
	if !closed {
		w.Srv.Close()
	}
}

func (w *ConvWebhook) SetMode(m string) {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	w.Mode = m
}

// callsFor returns the reviews received so far that converted name to
// desired.
func (w *ConvWebhook) CallsFor(desired, name string) int {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	n := 0
	for _, c := range w.Calls {
		for _, o := range c.Names {
			if c.Desired == desired && o == name {
				n++
			}
		}
	}
	return n
}

func (w *ConvWebhook) Reset() []ConvCall {
	w.Mu.Lock()
	defer w.Mu.Unlock()
	c := w.Calls
	w.Calls = nil
	return c
}

func (w *ConvWebhook) Serve(rw http.ResponseWriter, r *http.Request) {
	var rv struct {
		APIVersion string `json:"apiVersion"`
		Request    struct {
			UID     string           `json:"uid"`
			Desired string           `json:"desiredAPIVersion"`
			Objects []map[string]any `json:"objects"`
		} `json:"request"`
	}
	if err := json.NewDecoder(r.Body).Decode(&rv); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	w.Mu.Lock()
	mode := w.Mode
	call := ConvCall{ApiVersion: rv.APIVersion, Desired: rv.Request.Desired}
	for _, o := range rv.Request.Objects {
		md, _ := o["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		call.Names = append(call.Names, name)
	}
	w.Calls = append(w.Calls, call)
	w.Mu.Unlock()
	switch mode {
	case "500":
		http.Error(rw, "boom", http.StatusInternalServerError)
		return
	case "garbage":
		rw.Write([]byte("not json"))
		return
	case "slow":
		// Past the caller's timeout: answers nothing until it hangs up
		// (or the server closes).
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Minute):
		}
		return
	}
	out := []any{}
	for _, o := range rv.Request.Objects {
		spec, _ := o["spec"].(map[string]any)
		switch rv.Request.Desired {
		case "example.com/v2":
			if s, ok := spec["size"].(string); ok {
				n, _ := strconv.Atoi(s)
				delete(spec, "size")
				spec["replicas"] = n
			}
		case "example.com/v1":
			if n, ok := spec["replicas"].(float64); ok {
				delete(spec, "replicas")
				spec["size"] = strconv.Itoa(int(n))
			}
		}
		o["apiVersion"] = rv.Request.Desired
		if mode == "wrongversion" {
			o["apiVersion"] = "example.com/v3"
		}
		md := o["metadata"].(map[string]any)
		switch mode {
		case "rename":
			md["name"] = "other"
		case "stamp":
			// What the converted object says (a default a webhook sets)
			// shows wherever it is read.
			labels, _ := md["labels"].(map[string]any)
			if labels == nil {
				labels = map[string]any{}
			}
			labels["converted-to"] = strings.TrimPrefix(rv.Request.Desired, "example.com/")
			md["labels"] = labels
		case "metadata":
			// Labels may change; the rest is restored.
			md["labels"] = map[string]any{"converted": "yes"}
			md["generation"] = 42
			md["finalizers"] = []any{"example.com/keep"}
		}
		out = append(out, o)
	}
	uid := rv.Request.UID
	if mode == "wronguid" {
		uid = "not-the-request-uid"
	}
	resp := map[string]any{"uid": uid, "convertedObjects": out, "result": map[string]any{"status": "Success"}}
	switch mode {
	case "refuse":
		resp["result"] = map[string]any{"status": "Failure", "message": "cannot convert this one"}
	case "failed":
		resp["result"] = map[string]any{"status": "Failure"}
	case "count":
		resp["convertedObjects"] = []any{}
	}
	// A v1beta1 review is answered in v1beta1, as a webhook that knows
	// only v1beta1 does.
	apiVersion := "apiextensions.k8s.io/v1"
	if rv.APIVersion == "apiextensions.k8s.io/v1beta1" {
		apiVersion = rv.APIVersion
	}
	json.NewEncoder(rw).Encode(map[string]any{"apiVersion": apiVersion, "kind": "ConversionReview", "response": resp})
}

// WidgetCRD is example.com's Widget with v1 (spec.size) and v2
// (spec.replicas), converted by the webhook at url; storage says which
// version is stored.
func WidgetCRD(url string, caPEM []byte, storage string) string {
	return fmt.Sprintf(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"widgets.example.com"},
 "spec":{"group":"example.com","scope":"Namespaced",
  "names":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList"},
  "conversion":{"strategy":"Webhook","webhook":{"conversionReviewVersions":["v1"],
    "clientConfig":{"url":%q,"caBundle":%q}}},
  "versions":[
   {"name":"v1","served":true,"storage":%t,"schema":{"openAPIV3Schema":{"type":"object","properties":{
     "spec":{"type":"object","properties":{"size":{"type":"string"}}}}}}},
   {"name":"v2","served":true,"storage":%t,"schema":{"openAPIV3Schema":{"type":"object","properties":{
     "spec":{"type":"object","properties":{"replicas":{"type":"integer"}}}}}}}]}}`,
		url, base64.StdEncoding.EncodeToString(caPEM), storage == "v1", storage == "v2")
}

const (
	WidgetsV1 = "/apis/example.com/v1/namespaces/default/widgets"
	WidgetsV2 = "/apis/example.com/v2/namespaces/default/widgets"
)

func WidgetV1(name, size string) string {
	return fmt.Sprintf(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":%q},"spec":{"size":%q}}`, name, size)
}

func WidgetV2(name string, replicas int) string {
	return fmt.Sprintf(`{"apiVersion":"example.com/v2","kind":"Widget","metadata":{"name":%q},"spec":{"replicas":%d}}`, name, replicas)
}

func SpecOf(m map[string]any) map[string]any {
	s, _ := m["spec"].(map[string]any)
	return s
}

// RawJSON sends one JSON request and returns the status code and body.
func RawJSON(tb testing.TB, c *http.Client, url, method, body string) (int, []byte) {
	tb.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// StartWidgets starts a server serving Widgets converted by a new webhook.
func StartWidgets(t testing.TB, opts ...testenv.Option) (*testenv.Env, *ConvWebhook) {
	env := testenv.Start(t, opts...)
	c, host := env.HTTPClient(), env.Config.Host
	w := StartConvWebhook(t)
	if code, b := RawJSON(t, c, host+"/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "POST", WidgetCRD(w.Srv.URL+"/convert", w.CaPEM, "v1")); code != http.StatusCreated {
		t.Fatalf("create CRD = %d %s", code, Truncate(b))
	}
	deadline := time.Now().Add(10 * time.Second)
	for code, _ := RawJSON(t, c, host+WidgetsV2, "GET", ""); code != http.StatusOK; code, _ = RawJSON(t, c, host+WidgetsV2, "GET", "") {
		if time.Now().After(deadline) {
			t.Fatal("widgets not served within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return env, w
}
