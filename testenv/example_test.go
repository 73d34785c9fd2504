package testenv_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/testenv"
)

// testSettings is a test of your own (name it TestSettings): a complete
// server, reached with objwatch's client library, or with client-go.
func testSettings(t *testing.T) {
	env := testenv.Start(t) // stops when the test ends
	ctx := t.Context()

	rc, err := client.New(env.Config.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.CloseIdleConnections()
	cms := client.NewClient[*corev1.ConfigMap](rc, client.Resource{
		GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap"})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The same server through client-go.
	cs, err := kubernetes.NewForConfig(env.Config.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A test reaches its own server with client.New(env.Config.ClientConfig())
// or client-go's kubernetes.NewForConfig(env.Config.RESTConfig()).
func Example() {
	// In a _test.go file, testSettings above would be func TestSettings;
	// TestClientConfigs runs it.
}
