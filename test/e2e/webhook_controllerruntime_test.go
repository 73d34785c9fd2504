package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/objwatch/objwatch/testenv"
)

// configMapHooks is a controller-runtime Defaulter and Validator of
// ConfigMaps: it labels them and refuses data key "forbidden".
type configMapHooks struct{}

func (configMapHooks) Default(_ context.Context, cm *corev1.ConfigMap) error {
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels["defaulted-by"] = "controller-runtime"
	return nil
}

func (configMapHooks) check(cm *corev1.ConfigMap) (admission.Warnings, error) {
	if _, ok := cm.Data["forbidden"]; ok {
		return nil, errors.New("data key forbidden is not allowed")
	}
	return admission.Warnings{"checked by controller-runtime"}, nil
}

func (h configMapHooks) ValidateCreate(_ context.Context, cm *corev1.ConfigMap) (admission.Warnings, error) {
	return h.check(cm)
}

func (h configMapHooks) ValidateUpdate(_ context.Context, _, cm *corev1.ConfigMap) (admission.Warnings, error) {
	return h.check(cm)
}

func (configMapHooks) ValidateDelete(context.Context, *corev1.ConfigMap) (admission.Warnings, error) {
	return nil, nil
}

// TestControllerRuntimeWebhook: a controller-runtime webhook.Server with
// a Defaulter and a Validator, serving certificates from testenv, is
// registered in testenv and enforced end to end.
func TestControllerRuntimeWebhook(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	env := testenv.Start(t)
	certs := testenv.NewWebhookCerts(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	scheme := runtime.NewScheme()
	clientgoscheme.AddToScheme(scheme)
	srv := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: certs.CertDir})
	srv.Register("/mutate-configmap", admission.WithDefaulter[*corev1.ConfigMap](scheme, configMapHooks{}))
	srv.Register("/validate-configmap", admission.WithValidator[*corev1.ConfigMap](scheme, configMapHooks{}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("webhook server: %v", err)
		}
	})
	deadline := time.Now().Add(waitTimeout)
	for srv.StartedChecker()(nil) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the controller-runtime webhook server did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}

	none := admissionregistrationv1.SideEffectClassNone
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{"CREATE", "UPDATE"},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}
	url := func(path string) *string { u := fmt.Sprintf("https://127.0.0.1:%d%s", port, path); return &u }
	env.RegisterWebhooks(t,
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "cr-validate"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "vconfigmap.example.com", Rules: rules, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
				ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: url("/validate-configmap"), CABundle: certs.CABundle}}}},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "cr-mutate"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "mconfigmap.example.com", Rules: rules, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
				ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: url("/mutate-configmap"), CABundle: certs.CABundle}}}})

	cs := typedClient(t, env)
	cm := createConfigMap(t.Context(), t, cs, "default", "defaulted", nil, map[string]string{"a": "b"})
	if cm.Labels["defaulted-by"] != "controller-runtime" {
		t.Errorf("labels = %v, want the defaulter's", cm.Labels)
	}
	_, err = cs.CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "refused"}, Data: map[string]string{"forbidden": "x"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `admission webhook "vconfigmap.example.com" denied the request: data key forbidden is not allowed`) {
		t.Errorf("create with a forbidden key = %v", err)
	}
}
