package server_test

import (
	"bufio"
	"context"
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
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/testenv"
)

// convWebhook is an in-process HTTPS conversion webhook for Widgets:
// example.com/v1 has spec.size, a string ("3"); example.com/v2 has
// spec.replicas, an integer (3). mode makes it misbehave.
type convWebhook struct {
	srv    *httptest.Server
	caPEM  []byte
	mu     sync.Mutex
	mode   string
	calls  []convCall // every review received
	closed bool
}

// convCall is one ConversionReview request the webhook received.
type convCall struct {
	apiVersion string // of the ConversionReview
	desired    string
	names      []string
}

func startConvWebhook(t testing.TB) *convWebhook {
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
	w := &convWebhook{mode: "ok", caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
	w.srv = httptest.NewUnstartedServer(http.HandlerFunc(w.serve))
	w.srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	w.srv.StartTLS()
	t.Cleanup(w.close)
	return w
}

func (w *convWebhook) close() {
	w.mu.Lock()
	closed := w.closed
	w.closed = true
	w.mu.Unlock()
	if !closed {
		w.srv.Close()
	}
}

func (w *convWebhook) setMode(m string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mode = m
}

// callsFor returns the reviews received so far that converted name to
// desired.
func (w *convWebhook) callsFor(desired, name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.calls {
		for _, o := range c.names {
			if c.desired == desired && o == name {
				n++
			}
		}
	}
	return n
}

func (w *convWebhook) reset() []convCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.calls
	w.calls = nil
	return c
}

func (w *convWebhook) serve(rw http.ResponseWriter, r *http.Request) {
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
	w.mu.Lock()
	mode := w.mode
	call := convCall{apiVersion: rv.APIVersion, desired: rv.Request.Desired}
	for _, o := range rv.Request.Objects {
		md, _ := o["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		call.names = append(call.names, name)
	}
	w.calls = append(w.calls, call)
	w.mu.Unlock()
	switch mode {
	case "500":
		http.Error(rw, "boom", http.StatusInternalServerError)
		return
	case "garbage":
		rw.Write([]byte("not json"))
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

// widgetCRD is example.com's Widget with v1 (spec.size) and v2
// (spec.replicas), converted by the webhook at url; storage says which
// version is stored.
func widgetCRD(url string, caPEM []byte, storage string) string {
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
	widgetsV1 = "/apis/example.com/v1/namespaces/default/widgets"
	widgetsV2 = "/apis/example.com/v2/namespaces/default/widgets"
)

func widgetV1(name, size string) string {
	return fmt.Sprintf(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":%q},"spec":{"size":%q}}`, name, size)
}

func widgetV2(name string, replicas int) string {
	return fmt.Sprintf(`{"apiVersion":"example.com/v2","kind":"Widget","metadata":{"name":%q},"spec":{"replicas":%d}}`, name, replicas)
}

func specOf(m map[string]any) map[string]any {
	s, _ := m["spec"].(map[string]any)
	return s
}

// rawJSON sends one JSON request and returns the status code and body.
func rawJSON(tb testing.TB, c *http.Client, url, method, body string) (int, []byte) {
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

// startWidgets starts a server serving Widgets converted by a new webhook.
func startWidgets(t testing.TB, opts ...testenv.Option) (*testenv.Env, *convWebhook) {
	env := testenv.Start(t, opts...)
	c, host := env.HTTPClient(), env.Config.Host
	w := startConvWebhook(t)
	if code, b := rawJSON(t, c, host+"/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "POST", widgetCRD(w.srv.URL+"/convert", w.caPEM, "v1")); code != http.StatusCreated {
		t.Fatalf("create CRD = %d %s", code, truncate(b))
	}
	deadline := time.Now().Add(10 * time.Second)
	for code, _ := rawJSON(t, c, host+widgetsV2, "GET", ""); code != http.StatusOK; code, _ = rawJSON(t, c, host+widgetsV2, "GET", "") {
		if time.Now().After(deadline) {
			t.Fatal("widgets not served within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return env, w
}

// watchWidgets opens a watch and returns its events.
func watchWidgets(t *testing.T, ctx context.Context, a *api, path string) <-chan map[string]any {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", a.host+path, nil)
	resp, err := a.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("watch %s = %d", path, resp.StatusCode)
	}
	events := make(chan map[string]any, 100)
	go func() {
		defer close(events)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
	}()
	return events
}

func nextEvent(t *testing.T, events <-chan map[string]any, within time.Duration) map[string]any {
	t.Helper()
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatal("watch ended")
		}
		return ev
	case <-time.After(within):
		t.Fatalf("no watch event within %v", within)
	}
	return nil
}

// TestConversionWebhook: a CRD whose versions differ in shape is served
// in every version through its conversion webhook: writes in v2 are
// stored in v1, reads and watches in v2 of objects stored in v1 (and, after
// the storage version changes, in both) are converted, and a webhook that
// fails or answers wrongly is a clear error that writes nothing.
func TestConversionWebhook(t *testing.T) {
	env, w := startWidgets(t)
	a := newAPI(t, env)

	// Created in v1, read in v2; created in v2, read in v1.
	mustCode(t, "create a in v1", a.json("POST", widgetsV1, widgetV1("a", "3")), http.StatusCreated)
	r := a.json("POST", widgetsV2, widgetV2("b", 5))
	mustCode(t, "create b in v2", r, http.StatusCreated)
	if got := r.object(); got["apiVersion"] != "example.com/v2" || specOf(got)["replicas"] != float64(5) {
		t.Errorf("create b in v2 answered %s", r.body)
	}
	r = a.json("GET", widgetsV2+"/a", "")
	mustCode(t, "get a in v2", r, http.StatusOK)
	if got := r.object(); got["apiVersion"] != "example.com/v2" || specOf(got)["replicas"] != float64(3) || specOf(got)["size"] != nil {
		t.Errorf("a in v2 = %s, want spec.replicas 3", r.body)
	}
	r = a.json("GET", widgetsV1+"/b", "")
	mustCode(t, "get b in v1", r, http.StatusOK)
	if got := r.object(); got["apiVersion"] != "example.com/v1" || specOf(got)["size"] != "5" {
		t.Errorf("b in v1 = %s, want spec.size \"5\"", r.body)
	}
	for _, q := range []string{"", "?resourceVersion=0", "?limit=10"} { // cache, any state, etcd
		r = a.json("GET", widgetsV2+q, "")
		mustCode(t, "list in v2"+q, r, http.StatusOK)
		items, _ := r.object()["items"].([]any)
		if len(items) != 2 || specOf(items[0].(map[string]any))["replicas"] != float64(3) || specOf(items[1].(map[string]any))["replicas"] != float64(5) {
			t.Errorf("list in v2%s = %s", q, truncate(r.body))
		}
	}
	w.reset()
	mustCode(t, "list in v1 from etcd", a.json("GET", widgetsV1+"?limit=10", ""), http.StatusOK)
	if calls := w.reset(); len(calls) != 0 {
		t.Errorf("a list in the storage version called the webhook: %v", calls)
	}

	t.Run("watch", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rv := rvOf(t, a.json("GET", widgetsV2, ""))
		w1 := watchWidgets(t, ctx, a, widgetsV2+"?watch=1&resourceVersion="+rv)
		w2 := watchWidgets(t, ctx, a, widgetsV2+"?watch=1&resourceVersion="+rv)
		mustCode(t, "create c in v1", a.json("POST", widgetsV1, widgetV1("c", "7")), http.StatusCreated)
		for _, events := range []<-chan map[string]any{w1, w2} {
			ev := nextEvent(t, events, 5*time.Second)
			obj, _ := ev["object"].(map[string]any)
			if ev["type"] != "ADDED" || obj["apiVersion"] != "example.com/v2" || specOf(obj)["replicas"] != float64(7) {
				t.Errorf("watch in v2 got %v, want c ADDED in v2", ev)
			}
		}
		// Converted once for both watchers: by the v2 watch cache.
		if n := w.callsFor("example.com/v2", "c"); n != 1 {
			t.Errorf("c was converted to v2 %d times for two watchers, want once", n)
		}

		// The webhook fails: as in Kubernetes, the v2 cache waits for it
		// (the event is not lost, nothing newer comes), then delivers.
		w.setMode("500")
		mustCode(t, "create d in v1", a.json("POST", widgetsV1, widgetV1("d", "1")), http.StatusCreated)
		select {
		case ev := <-w1:
			t.Fatalf("an event while the webhook fails: %v", ev)
		case <-time.After(500 * time.Millisecond):
		}
		w.setMode("ok")
		ev := nextEvent(t, w1, 10*time.Second)
		if obj, _ := ev["object"].(map[string]any); ev["type"] != "ADDED" || specOf(obj)["replicas"] != float64(1) {
			t.Errorf("after the webhook recovered: %v, want d ADDED in v2", ev)
		}
		mustCode(t, "delete d", a.json("DELETE", widgetsV1+"/d", ""), http.StatusOK)
	})

	t.Run("failures", func(t *testing.T) {
		defer w.setMode("ok")
		prefix := "conversion webhook for example.com/v2, Kind=Widget "
		for _, tc := range []struct{ mode, want string }{
			{"500", prefix + `failed: an error on the server ("boom") has prevented the request from succeeding`},
			{"garbage", prefix + "failed: "},
			{"wronguid", prefix + `failed: expected response.uid=`},
			{"rename", prefix + "returned invalid object: must have the same name: x-rename != other"},
			{"refuse", prefix + "failed: cannot convert this one"},
			{"count", prefix + "returned 0 objects, expected 1"},
		} {
			w.setMode(tc.mode)
			r := a.json("POST", widgetsV2, widgetV2("x-"+tc.mode, 1))
			st := r.status()
			if r.code != http.StatusInternalServerError || !strings.HasPrefix(st.Message, tc.want) {
				t.Errorf("%s: create in v2 = %d %q, want 500 %q", tc.mode, r.code, st.Message, tc.want)
			}
			r = a.do("PATCH", widgetsV2+"/b", "application/merge-patch+json", []byte(`{"spec":{"replicas":9}}`))
			if r.code != http.StatusInternalServerError {
				t.Errorf("%s: update in v2 = %d %s, want 500", tc.mode, r.code, truncate(r.body))
			}
			w.setMode("ok")
			mustCode(t, tc.mode+": x in v1", a.json("GET", widgetsV1+"/x-"+tc.mode, ""), http.StatusNotFound)
			if got := specOf(a.json("GET", widgetsV1+"/b", "").object()); got["size"] != "5" {
				t.Errorf("%s: b after the failed update = %v, want size 5", tc.mode, got)
			}
		}

		// Reads: v2 fails clearly, v1 (the storage version) works.
		w.setMode("500")
		r := a.json("GET", widgetsV2+"/a", "")
		want := `Internal error occurred: StorageError: corrupt object, Code: 7, Key: /example.com/widgets/default/a, ResourceVersion: 0, AdditionalErrorMsg: object not decodable revision=`
		if st := r.status(); r.code != http.StatusInternalServerError || st.Reason != "InternalError" || !strings.HasPrefix(st.Message, want) ||
			!strings.Contains(st.Message, `conversion webhook for example.com/v1, Kind=Widget failed: an error on the server ("boom")`) {
			t.Errorf("get in v2 with the webhook failing = %d %s", r.code, r.body)
		}
		if r := a.json("GET", widgetsV2+"?limit=10", ""); r.code != http.StatusInternalServerError || !strings.Contains(r.status().Message, "conversion webhook for example.com/v1, Kind=Widget failed") {
			t.Errorf("list in v2 from etcd with the webhook failing = %d %s", r.code, truncate(r.body))
		}
		mustCode(t, "get in v1 with the webhook failing", a.json("GET", widgetsV1+"/a", ""), http.StatusOK)
		mustCode(t, "list in v1 with the webhook failing", a.json("GET", widgetsV1+"?limit=10", ""), http.StatusOK)
		mustCode(t, "create in v1 with the webhook failing", a.json("POST", widgetsV1, widgetV1("y", "2")), http.StatusCreated)

		// Labels and annotations may change in a conversion; other
		// metadata is restored.
		w.setMode("metadata")
		r = a.json("GET", widgetsV2+"/a", "")
		md, _ := r.object()["metadata"].(map[string]any)
		if labels, _ := md["labels"].(map[string]any); labels["converted"] != "yes" || md["generation"] != float64(1) || md["finalizers"] != nil {
			t.Errorf("metadata after a conversion = %v, want the label and nothing else changed", md)
		}
	})

	t.Run("apply", func(t *testing.T) {
		// Server-side apply in v2 to an object written in v1: stored in
		// v1, the managers' entries keep their own apiVersion.
		r := a.do("PATCH", widgetsV2+"/a?fieldManager=applier&force=true", "application/apply-patch+yaml",
			[]byte("apiVersion: example.com/v2\nkind: Widget\nmetadata:\n  name: a\nspec:\n  replicas: 4\n"))
		mustCode(t, "apply in v2", r, http.StatusOK)
		if specOf(r.object())["replicas"] != float64(4) {
			t.Errorf("apply in v2 answered %s", r.body)
		}
		got := a.json("GET", widgetsV1+"/a", "").object()
		if specOf(got)["size"] != "4" {
			t.Errorf("a in v1 after the apply = %v", got)
		}
		md, _ := got["metadata"].(map[string]any)
		versions := map[string]string{}
		for _, e := range md["managedFields"].([]any) {
			e := e.(map[string]any)
			versions[e["manager"].(string)] = e["apiVersion"].(string)
		}
		if versions["applier"] != "example.com/v2" {
			t.Errorf("managedFields = %v, want applier's entry in example.com/v2", md["managedFields"])
		}
	})

	t.Run("kubectl", func(t *testing.T) {
		kubectl, err := exec.LookPath("kubectl")
		if err != nil {
			t.Skip("kubectl is not on PATH")
		}
		out, err := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "get", "widgets.v2.example.com", "-n", "default", "a", "-o", "jsonpath={.apiVersion} {.spec.replicas}").CombinedOutput()
		if err != nil || string(out) != "example.com/v2 4" {
			t.Errorf("kubectl get widgets.v2.example.com a = %q, %v", out, err)
		}
	})

	t.Run("storage version v2", func(t *testing.T) {
		// Switch the storage version: objects stored in v1 stay there
		// until rewritten, new ones are stored in v2, and a list in
		// either version converts those stored in the other.
		cur := a.json("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", "").object()
		next := map[string]any{}
		json.Unmarshal([]byte(widgetCRD(w.srv.URL+"/convert", w.caPEM, "v2")), &next)
		next["metadata"] = cur["metadata"]
		b, _ := json.Marshal(next)
		mustCode(t, "switch storage to v2", a.json("PUT", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", string(b)), http.StatusOK)
		deadline := time.Now().Add(10 * time.Second)
		for {
			res, ok := env.Server.Registry().Get(schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "widgets"})
			if ok && res.Versions != nil && res.Versions.StorageVersion() == "v2" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("storage version not v2 within 10 s")
			}
			time.Sleep(20 * time.Millisecond)
		}
		mustCode(t, "create e in v2", a.json("POST", widgetsV2, widgetV2("e", 6)), http.StatusCreated)
		w.reset()
		r := a.json("GET", widgetsV2+"?limit=100", "")
		mustCode(t, "list in v2", r, http.StatusOK)
		items, _ := r.object()["items"].([]any)
		got := map[string]any{}
		for _, it := range items {
			it := it.(map[string]any)
			got[it["metadata"].(map[string]any)["name"].(string)] = specOf(it)["replicas"]
		}
		want := map[string]any{"a": float64(4), "b": float64(5), "c": float64(7), "e": float64(6), "y": float64(2)}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("list in v2 = %v, want %v", got, want)
		}
		// One review for the page: the four objects stored in v1. (The
		// new watch caches convert one object per review meanwhile.)
		var toV2 []convCall
		for _, c := range w.reset() {
			if c.desired == "example.com/v2" && len(c.names) > 1 {
				toV2 = append(toV2, c)
			}
		}
		if len(toV2) != 1 || len(toV2[0].names) != 4 {
			t.Errorf("list in v2 made reviews %v, want one of the 4 objects stored in v1", toV2)
		}
		r = a.json("GET", widgetsV1+"/e", "")
		if specOf(r.object())["size"] != "6" {
			t.Errorf("e (stored in v2) in v1 = %s", r.body)
		}
		// With the webhook gone, v2 objects stored in v2 still read.
		w.close()
		mustCode(t, "get e in v2, webhook down", a.json("GET", widgetsV2+"/e", ""), http.StatusOK)
		r = a.json("GET", widgetsV2+"/b", "")
		if r.code != http.StatusInternalServerError || !strings.Contains(r.status().Message, "conversion webhook for example.com/v1, Kind=Widget failed: Post") {
			t.Errorf("get b (stored in v1) in v2, webhook down = %d %s", r.code, r.body)
		}
	})
}

// TestConversionWebhookWatchFromEtcd: a watch served from etcd (no watch
// cache) whose event does not convert ends with an ERROR event, as
// kube-apiserver's etcd watcher ends it.
func TestConversionWebhookWatchFromEtcd(t *testing.T) {
	env, w := startWidgets(t, testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = true }))
	a := newAPI(t, env)
	rv := rvOf(t, a.json("POST", widgetsV1, widgetV1("a", "3")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := watchWidgets(t, ctx, a, widgetsV2+"?watch=1&resourceVersion="+rv)
	mustCode(t, "create b", a.json("POST", widgetsV1, widgetV1("b", "4")), http.StatusCreated)
	if ev := nextEvent(t, events, 5*time.Second); ev["type"] != "ADDED" || specOf(ev["object"].(map[string]any))["replicas"] != float64(4) {
		t.Fatalf("watch in v2 got %v", ev)
	}
	w.setMode("500")
	mustCode(t, "create c", a.json("POST", widgetsV1, widgetV1("c", "5")), http.StatusCreated)
	ev := nextEvent(t, events, 5*time.Second)
	st, _ := ev["object"].(map[string]any)
	if msg, _ := st["message"].(string); ev["type"] != "ERROR" || st["code"] != float64(500) || !strings.Contains(msg, "conversion webhook for example.com/v1, Kind=Widget failed") {
		t.Fatalf("after a failed conversion: %v, want an ERROR event", ev)
	}
	if ev, ok := <-events; ok {
		t.Errorf("the watch went on after its ERROR event: %v", ev)
	}
}

// BenchmarkConversionList lists N widgets stored in v1 through etcd
// (limit, so the watch cache does not answer) and through the watch cache,
// in v1 (the storage version: no conversion) and in v2 (one
// ConversionReview per etcd page; the cache holds them converted).
func BenchmarkConversionList(b *testing.B) {
	n := 500
	if s := os.Getenv("CONVERSION_BENCH_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	env, _ := startWidgets(b)
	c, host := env.HTTPClient(), env.Config.Host
	for i := range n {
		if code, body := rawJSON(b, c, host+widgetsV1, "POST", widgetV1(fmt.Sprintf("w%04d", i), strconv.Itoa(i))); code != http.StatusCreated {
			b.Fatalf("create = %d %s", code, body)
		}
	}
	for _, bc := range []struct{ name, path string }{
		{"etcd/v1", widgetsV1 + "?limit=100000"},
		{"etcd/v2", widgetsV2 + "?limit=100000"},
		{"cache/v1", widgetsV1},
		{"cache/v2", widgetsV2},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				code, body := rawJSON(b, c, host+bc.path, "GET", "")
				if code != http.StatusOK || strings.Count(string(body), `"kind":"Widget"`) != n {
					b.Fatalf("list = %d %s", code, truncate(body))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/object")
		})
	}
}
