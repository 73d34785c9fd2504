package main

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var configMaps = client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap"}

// TestWebhookServer runs the example's server with certificates from
// testenv, registers its configurations and checks both webhooks end to
// end.
func TestWebhookServer(t *testing.T) {
	env := testenv.Start(t)
	certs := testenv.NewWebhookCerts(t)
	ln, err := Listen("127.0.0.1:0", filepath.Join(certs.CertDir, "tls.crt"), filepath.Join(certs.CertDir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	m, v := Configurations("https://"+ln.Addr().(*net.TCPAddr).String(), certs.CABundle)
	env.RegisterWebhooks(t, v, m)

	cfg, err := client.FromKubeconfig(env.Kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	rest, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rest.CloseIdleConnections)
	cms := client.NewClient[*corev1.ConfigMap](rest, configMaps)

	got, err := cms.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default"}, Data: map[string]string{"url": "https://example.com"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[TeamLabel] != "unassigned" {
		t.Errorf("labels = %v, want the mutating webhook's %s", got.Labels, TeamLabel)
	}
	got, err = cms.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owned", Namespace: "default", Labels: map[string]string{TeamLabel: "storage", "app": "x"}}}, metav1.CreateOptions{})
	if err != nil || got.Labels[TeamLabel] != "storage" {
		t.Errorf("create with a team = %v, %v; want the team kept", got, err)
	}

	_, err = cms.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "leaky", Namespace: "default"}, Data: map[string]string{"dbPassword": "hunter2"}}, metav1.CreateOptions{})
	var se interface{ Status() metav1.Status }
	if !errors.As(err, &se) || se.Status().Code != 403 ||
		se.Status().Message != `admission webhook "passwords.configmaps.examples.objwatch.dev" denied the request: data key "dbPassword" looks like a password; put it in a Secret` {
		t.Errorf("create with a password = %v, want the validating webhook's 403", err)
	}
	if _, err := cms.Get(t.Context(), "default", "leaky", metav1.GetOptions{}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("refused ConfigMap was stored: %v", err)
	}
}
