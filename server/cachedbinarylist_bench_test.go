package server_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/featuregate"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// BenchmarkCachedListMemory: the heap a protobuf, then a CBOR, list of
// every ConfigMap adds to the server process per object (the item
// encodings the watch cache keeps for later lists), against the whole
// process's heap per object before (server, watch cache and embedded
// etcd), in the "memory" sub-benchmark. Objects: MEMORY_BENCH_OBJECTS
// (default 10,000) ConfigMaps of ~1 KiB. Then whole lists in JSON,
// protobuf and CBOR over HTTP, read and discarded ("list"), and through
// client-go's typed client, decoded ("client-go").
//
//	go test -run '^$' -bench CachedListMemory -benchtime 3x ./server/
func BenchmarkCachedListMemory(b *testing.B) {
	n := 10000
	if s := os.Getenv("MEMORY_BENCH_OBJECTS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatalf("MEMORY_BENCH_OBJECTS: %v", err)
		}
	}
	env := testenv.Start(b)
	createPaddedConfigMaps(b, env, n)
	c, host := env.HTTPClient(), env.Config.Host
	list := func(accept string) int {
		req, err := http.NewRequest("GET", host+servertest.CMs, nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Accept", accept)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		m, err := io.Copy(io.Discard, resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != accept {
			b.Fatalf("list in %s = %d %s, %d bytes, %v", accept, resp.StatusCode, resp.Header.Get("Content-Type"), m, err)
		}
		return int(m)
	}
	heap := func() float64 {
		var ms runtime.MemStats
		for range 3 {
			runtime.GC()
		}
		runtime.ReadMemStats(&ms)
		return float64(ms.HeapAlloc)
	}
	list("application/json") // the cache has every object
	base := heap()
	made := server.ListItemsEncoded(env.Server)
	list(pbType)
	withPB := heap()
	list(cborType)
	withCBOR := heap()
	if got := server.ListItemsEncoded(env.Server) - made; got != int64(2*n) {
		b.Fatalf("the lists encoded %d items, want %d", got, 2*n)
	}
	b.Run("memory", func(b *testing.B) {
		for b.Loop() {
		}
		b.ReportMetric(base/float64(n), "heap-B/obj")
		b.ReportMetric((withPB-base)/float64(n), "protobuf-B/obj")
		b.ReportMetric((withCBOR-withPB)/float64(n), "cbor-B/obj")
	})
	// Whole lists over HTTP, read and discarded (not decoded), the binary
	// ones from the kept encodings.
	for _, accept := range []string{"application/json", pbType, cborType} {
		b.Run("list/"+accept, func(b *testing.B) {
			var bytes int
			for b.Loop() {
				bytes = list(accept)
			}
			b.ReportMetric(float64(bytes)/float64(n), "resp-B/obj")
		})
	}
	// The same lists through client-go's typed client, decoded: what a
	// controller's first list costs it and the server together.
	featuregatetesting.SetFeatureGatesDuringTest(b, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		featuregate.Feature(clientfeatures.ClientsAllowCBOR): true, featuregate.Feature(clientfeatures.ClientsPreferCBOR): true,
	})
	for _, ct := range []string{"application/json", pbType, cborType} {
		cfg := env.Config.RESTConfig()
		cfg.ContentType, cfg.AcceptContentTypes = ct, ct
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("client-go/"+ct, func(b *testing.B) {
			for b.Loop() {
				l, err := cs.CoreV1().ConfigMaps("default").List(b.Context(), metav1.ListOptions{})
				if err != nil || len(l.Items) != n {
					b.Fatalf("list: %d items, %v", len(l.Items), err)
				}
			}
		})
	}
}

// createPaddedConfigMaps creates n ConfigMaps of ~1 KiB (cm-000000 on) in
// env's default namespace, 16 at a time.
func createPaddedConfigMaps(tb testing.TB, env *testenv.Env, n int) {
	c, host := env.HTTPClient(), env.Config.Host
	pad := strings.Repeat("x", 900)
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%06d"},"data":{"pad":%q}}`, i, pad)
			if code, out := servertest.RawJSON(tb, c, host+servertest.CMs, "POST", body); code != http.StatusCreated {
				return fmt.Errorf("create %d = %d %s", i, code, out)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		tb.Fatal(err)
	}
}
