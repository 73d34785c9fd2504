package testenv_test

import (
	"io"
	"net/http"
	"testing"

	"go.uber.org/goleak"

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

// BenchmarkStart measures how long a test waits for its server.
func BenchmarkStart(b *testing.B) {
	for b.Loop() {
		env := testenv.Start(b)
		env.Stop()
	}
}
