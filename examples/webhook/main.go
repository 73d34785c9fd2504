// Command webhook is an example admission webhook server for ConfigMaps,
// built with the standard library and k8s.io/api types only: a mutating
// webhook that gives every ConfigMap a team label, and a validating
// webhook that refuses passwords in ConfigMaps and warns about keys with
// upper-case letters. With -register it also creates its webhook
// configurations through objwatch's client library (the kubeconfig of
// KUBECONFIG or ~/.kube/config).
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
)

// TeamLabel is the label the mutating webhook sets when it is missing.
const TeamLabel = "examples.objwatch.dev/team"

func main() {
	listen := flag.String("listen", "127.0.0.1:8443", "address to serve HTTPS on")
	certDir := flag.String("cert-dir", ".", "directory with tls.crt and tls.key")
	register := flag.Bool("register", false, "create the webhook configurations (caBundle: -ca-file)")
	caFile := flag.String("ca-file", "", "PEM CA certificate that signed tls.crt, for -register")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ln, err := Listen(*listen, filepath.Join(*certDir, "tls.crt"), filepath.Join(*certDir, "tls.key"))
	if err != nil {
		log.Fatal(err)
	}
	if *register {
		ca, err := os.ReadFile(*caFile)
		if err != nil {
			log.Fatal(err)
		}
		if err := registerConfigurations(ctx, "https://"+*listen, ca); err != nil {
			log.Fatal(err)
		}
	}
	if err := Serve(ctx, ln); err != nil {
		log.Fatal(err)
	}
}

// Listen opens the TLS listener with the serving certificate's files.
func Listen(addr, certFile, keyFile string) (net.Listener, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return tls.Listen("tcp", addr, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
}

// Serve answers /mutate and /validate on ln until ctx ends.
func Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/mutate", review(Mutate))
	mux.Handle("/validate", review(Validate))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// review adapts an admission function to an AdmissionReview v1 handler.
func review(f func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in admissionv1.AdmissionReview
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 3<<20)).Decode(&in); err != nil || in.Request == nil {
			http.Error(w, "expected an AdmissionReview", http.StatusBadRequest)
			return
		}
		resp := f(in.Request)
		resp.UID = in.Request.UID
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(admissionv1.AdmissionReview{TypeMeta: in.TypeMeta, Response: resp})
	})
}

func configMapOf(raw []byte) (*corev1.ConfigMap, error) {
	var cm corev1.ConfigMap
	return &cm, json.Unmarshal(raw, &cm)
}

// Mutate gives a ConfigMap without a team label TeamLabel=unassigned, as
// a JSON patch.
func Mutate(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	cm, err := configMapOf(req.Object.Raw)
	if err != nil {
		return &admissionv1.AdmissionResponse{Result: &metav1.Status{Code: http.StatusBadRequest, Message: err.Error()}}
	}
	if _, ok := cm.Labels[TeamLabel]; ok {
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	// "~1" escapes the "/" of the label key in a JSON pointer.
	patch := fmt.Sprintf(`[{"op":"add","path":"/metadata/labels/%s","value":"unassigned"}]`, strings.ReplaceAll(TeamLabel, "/", "~1"))
	if cm.Labels == nil {
		patch = fmt.Sprintf(`[{"op":"add","path":"/metadata/labels","value":{%q:"unassigned"}}]`, TeamLabel)
	}
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, PatchType: &pt, Patch: []byte(patch)}
}

// Validate refuses a ConfigMap with a data key that names a password
// (secrets belong in Secrets) and warns about keys with upper-case
// letters.
func Validate(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	cm, err := configMapOf(req.Object.Raw)
	if err != nil {
		return &admissionv1.AdmissionResponse{Result: &metav1.Status{Code: http.StatusBadRequest, Message: err.Error()}}
	}
	var warnings []string
	for k := range cm.Data {
		if strings.Contains(strings.ToLower(k), "password") {
			return &admissionv1.AdmissionResponse{Result: &metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
				Message: fmt.Sprintf("data key %q looks like a password; put it in a Secret", k)}}
		}
		if strings.ToLower(k) != k {
			warnings = append(warnings, fmt.Sprintf("data key %q has upper-case letters", k))
		}
	}
	return &admissionv1.AdmissionResponse{Allowed: true, Warnings: warnings}
}

// Configurations are the webhook configurations for a server at baseURL
// whose certificate caBundle verifies: ConfigMap creates and updates.
func Configurations(baseURL string, caBundle []byte) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}
	none := admissionregistrationv1.SideEffectClassNone
	cc := func(path string) admissionregistrationv1.WebhookClientConfig {
		u := baseURL + path
		return admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: caBundle}
	}
	// Leave kube-system alone, as webhooks usually do.
	skipSystem := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system"}}}}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: "configmap-team"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "team.configmaps.examples.objwatch.dev", ClientConfig: cc("/mutate"),
			Rules: rules, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, NamespaceSelector: skipSystem}},
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: "configmap-no-passwords"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "passwords.configmaps.examples.objwatch.dev", ClientConfig: cc("/validate"),
			Rules: rules, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, NamespaceSelector: skipSystem}},
	}
	return m, v
}

var (
	mutatingConfigs   = client.Resource{GVR: admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingwebhookconfigurations"), Kind: "MutatingWebhookConfiguration"}
	validatingConfigs = client.Resource{GVR: admissionregistrationv1.SchemeGroupVersion.WithResource("validatingwebhookconfigurations"), Kind: "ValidatingWebhookConfiguration"}
)

func registerConfigurations(ctx context.Context, baseURL string, ca []byte) error {
	cfg, err := client.Default()
	if err != nil {
		return err
	}
	rest, err := client.New(cfg)
	if err != nil {
		return err
	}
	m, v := Configurations(baseURL, ca)
	if _, err := client.NewClient[*admissionregistrationv1.MutatingWebhookConfiguration](rest, mutatingConfigs).Create(ctx, m, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err = client.NewClient[*admissionregistrationv1.ValidatingWebhookConfiguration](rest, validatingConfigs).Create(ctx, v, metav1.CreateOptions{})
	return err
}
