package testenv_test

import (
	"errors"
	"io"
	"net/http"
	"testing"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"

	"github.com/objwatch/objwatch/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

func TestStartServesAndStops(t *testing.T) {
	env := testenv.Start(t)
	resp, err := env.HTTPClient().Get(env.Config.Host + "/api/v1/namespaces/default")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET default namespace = %d %s", resp.StatusCode, b)
	}
	env.Stop()
	if _, err := http.Get(env.Config.Host + "/healthz"); err == nil {
		t.Fatalf("server still answers after Stop")
	}
}

// TestClientConfigs: the Config of Start and of User convert to working
// configurations of objwatch's client and of client-go, each with its own
// credentials.
func TestClientConfigs(t *testing.T) {
	testSettings(t) // the package example
	env := testenv.Start(t)
	configMaps := client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap"}
	get := func(cfg *client.Config) error {
		rc, err := client.New(cfg)
		if err != nil {
			return err
		}
		defer rc.CloseIdleConnections()
		_, err = client.NewClient[*corev1.ConfigMap](rc, configMaps).List(t.Context(), "default", metav1.ListOptions{})
		return err
	}
	if err := get(env.Config.ClientConfig()); err != nil {
		t.Errorf("admin by certificate: %v", err)
	}
	token := env.Config
	token.CertData, token.KeyData = nil, nil
	if cfg := token.ClientConfig(); cfg.BearerToken == "" || get(cfg) != nil {
		t.Errorf("admin by token: token %q, %v", cfg.BearerToken, get(cfg))
	}
	alice := env.User(t, "alice")
	if err := get(alice.ClientConfig()); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("alice, bound to no role: %v, want ErrForbidden", err)
	}
	if rc := alice.RESTConfig(); string(rc.CertData) != string(alice.CertData) || rc.BearerToken != "" || rc.Host != env.Config.Host {
		t.Errorf("alice's RESTConfig = %+v, want her certificate and no token", rc)
	}
	// Each call is a new value: changing one changes no other.
	a := env.Config.ClientConfig()
	a.Host = "https://elsewhere"
	if env.Config.ClientConfig().Host != env.Config.Host {
		t.Error("ClientConfig results share memory")
	}
}

// BenchmarkStart measures how long a test waits for its server.
func BenchmarkStart(b *testing.B) {
	for b.Loop() {
		env := testenv.Start(b)
		env.Stop()
	}
}
