package instance_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/objwatch/objwatch/internal/instance"
)

func TestMain(m *testing.M) {
	if os.Getenv(etcdChildEnv) != "" {
		runEtcdChild()
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

func start(t *testing.T, dir string) *instance.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in, err := instance.Start(ctx, instance.Options{
		DataDir: dir, Listen: "127.0.0.1:0", Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return in
}

func client(t *testing.T, in *instance.Instance) *http.Client {
	tc, err := in.TLSClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
}

// A restart on the same data directory keeps objects and credentials, and
// Close ends open watches instead of waiting for them.
func TestRestartKeepsObjectsAndCredentials(t *testing.T) {
	dir := t.TempDir()
	in := start(t, dir)
	c := client(t, in)
	resp, err := c.Post(in.URL+"/api/v1/namespaces/default/configmaps", "application/json",
		strings.NewReader(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"keep"},"data":{"a":"b"}}`))
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("create: %v %v", err, resp)
	}
	resp.Body.Close()
	token := in.Credentials.AdminToken
	kubeconfig, _ := os.ReadFile(in.Kubeconfig)

	watch, err := c.Get(in.URL + "/api/v1/namespaces/default/configmaps?watch=true")
	if err != nil || watch.StatusCode != 200 {
		t.Fatalf("watch: %v", err)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		sc := bufio.NewScanner(watch.Body)
		for sc.Scan() {
		}
	}()
	closed := make(chan struct{})
	go func() { in.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatalf("Close did not return with an open watch")
	}
	<-ended
	watch.Body.Close()
	c.CloseIdleConnections()

	again := start(t, dir)
	defer again.Close()
	if again.Credentials.AdminToken != token {
		t.Fatalf("admin token changed across restart")
	}
	if kc2, _ := os.ReadFile(again.Kubeconfig); len(kubeconfig) == 0 || !strings.Contains(string(kc2), "certificate-authority-data") {
		t.Fatalf("kubeconfig missing after restart")
	}
	c2 := client(t, again)
	defer c2.CloseIdleConnections()
	resp, err = c2.Get(again.URL + "/api/v1/namespaces/default/configmaps/keep")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("get after restart = %d, want 200", resp.StatusCode)
	}
}
