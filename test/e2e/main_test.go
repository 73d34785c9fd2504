// Package e2e_test runs objwatch end to end with client-go as the reference
// client: typed, dynamic and REST clients, informers, conflict retries and
// leader election, against servers started in-process by testenv.
package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/objwatch/objwatch/testenv"
)

func TestMain(m *testing.M) {
	// No ignores: every server, etcd, informer and elector is stopped by
	// its test, and client-go's pooled connections close with the server.
	// klog's flush daemon only runs when it logs to files, which these
	// tests never do.
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every poll in these tests; the server is local, so
// anything slower than this is a bug, not a slow machine.
const waitTimeout = 15 * time.Second

// restConfig returns a client-go configuration for env without client-side
// rate limiting, which would only slow the tests down.
func restConfig(t *testing.T, env *testenv.Env) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil {
		t.Fatalf("BuildConfigFromFlags(%q) = %v", env.Kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	cfg.UserAgent = "objwatch-e2e"
	return cfg
}

func typedClient(t *testing.T, env *testenv.Env) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(restConfig(t, env))
	if err != nil {
		t.Fatalf("kubernetes.NewForConfig() = %v", err)
	}
	return cs
}

func dynamicClient(t *testing.T, env *testenv.Env) *dynamic.DynamicClient {
	t.Helper()
	dc, err := dynamic.NewForConfig(restConfig(t, env))
	if err != nil {
		t.Fatalf("dynamic.NewForConfig() = %v", err)
	}
	return dc
}

// createNamespace creates a namespace for one test (or subtest).
func createNamespace(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("Namespaces().Create(%s) = %v", name, err)
	}
}

// createConfigMap creates a ConfigMap with data and labels.
func createConfigMap(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string, labels, data map[string]string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Data: data}
	out, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("ConfigMaps(%s).Create(%s) = %v", ns, name, err)
	}
	return out
}

// poll calls cond until it returns true, failing the test after
// waitTimeout. what describes the awaited state for the failure message.
func poll(ctx context.Context, t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, waitTimeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// names returns "prefix-00" ... "prefix-(n-1)".
func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return out
}
