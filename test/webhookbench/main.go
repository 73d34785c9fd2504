// Command webhookbench measures what one no-op validating admission
// webhook adds to a create: sequential ConfigMap creates in namespace
// default against the server of a kubeconfig (objwatch or kube-apiserver),
// first without a webhook, then with a ValidatingWebhookConfiguration for
// ConfigMap creates whose webhook (served over HTTPS in this process)
// allows everything. It prints p50 and p99 of each, then deletes what it
// created.
//
//	go run ./test/webhookbench KUBECONFIG [N]
package main

import (
	"bytes"
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
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: webhookbench KUBECONFIG [N]")
	}
	n := 2000
	if len(os.Args) > 2 {
		var err error
		if n, err = strconv.Atoi(os.Args[2]); err != nil || n < 100 {
			log.Fatal("N must be a number of at least 100")
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		log.Fatal(err)
	}
	ln, ca, err := listen()
	if err != nil {
		log.Fatal(err)
	}
	var calls atomic.Int64
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var rev struct {
			Request struct{ UID string } `json:"request"`
		}
		json.NewDecoder(r.Body).Decode(&rev)
		fmt.Fprintf(w, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":%q,"allowed":true}}`, rev.Request.UID)
	}))
	do := func(method, path, body string) int {
		req, err := http.NewRequest(method, cfg.Host+path, bytes.NewReader([]byte(body)))
		if err != nil {
			log.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	const cms = "/api/v1/namespaces/default/configmaps"
	run := func(label string) {
		calls.Store(0)
		prefix := fmt.Sprintf("wb%d-", time.Now().UnixNano()%1e9)
		for i := range 50 { // warm connections and caches
			do("POST", cms, fmt.Sprintf(`{"metadata":{"name":"%sw%d"},"data":{"k":"v"}}`, prefix, i))
		}
		lat := make([]time.Duration, n)
		for i := range n {
			t := time.Now()
			if c := do("POST", cms, fmt.Sprintf(`{"metadata":{"name":"%s%d"},"data":{"k":"v"}}`, prefix, i)); c != http.StatusCreated {
				log.Fatalf("create: %d", c)
			}
			lat[i] = time.Since(t)
		}
		slices.Sort(lat)
		// calls: webhook calls per create (1 with the webhook, as in
		// kube-apiserver; 0 without).
		fmt.Printf("%s: n=%d p50=%v p99=%v calls/create=%.2f\n", label, n, lat[n/2].Round(time.Microsecond), lat[n*99/100].Round(time.Microsecond), float64(calls.Load())/float64(n+50))
	}
	run("none")
	const configs = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
	config := fmt.Sprintf(`{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration","metadata":{"name":"webhookbench-noop"},"webhooks":[{"name":"noop.webhookbench.objwatch.io","clientConfig":{"url":"https://%s/","caBundle":%q},"rules":[{"operations":["CREATE"],"apiGroups":[""],"apiVersions":["v1"],"resources":["configmaps"]}],"sideEffects":"None","admissionReviewVersions":["v1"]}]}`,
		ln.Addr(), base64.StdEncoding.EncodeToString(ca))
	if c := do("POST", configs, config); c != http.StatusCreated {
		log.Fatalf("create webhook configuration: %d", c)
	}
	time.Sleep(3 * time.Second) // both servers follow configurations by watch
	run("validating-noop")
	do("DELETE", configs+"/webhookbench-noop", "")
	do("DELETE", cms, "")
}

// listen opens a TLS listener on a loopback port with a self-signed
// certificate for 127.0.0.1, returned as the caBundle.
func listen() (net.Listener, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhookbench"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	return ln, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), err
}
