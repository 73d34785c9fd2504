package client_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"golang.org/x/sync/errgroup"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/internal/testobj"
	"github.com/objwatch/objwatch/testenv"
)

// TestBenchServer is BenchmarkListCBOR's server process; it does nothing
// in a normal test run.
func TestBenchServer(t *testing.T) { testenv.ServeProcess(t) }

const (
	benchNamespace = "bench"
	benchObjects   = 10000
)

const widgetCRD = `{
  "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "widgets.bench.objwatch.io"},
  "spec": {
    "group": "bench.objwatch.io", "scope": "Namespaced",
    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]
  }
}`

// benchWidget is a ~1 KiB custom resource: strings, numbers, a list of
// maps.
func benchWidget(i int, rnd *rand.Rand) *unstructured.Unstructured {
	spec := map[string]any{"replicas": int64(i % 7), "ratio": float64(i) / 3, "enabled": i%2 == 0}
	for k := range 6 {
		v := make([]byte, 100)
		for j := range v {
			v[j] = byte('a' + rnd.IntN(26))
		}
		spec[fmt.Sprint("field-", k)] = string(v)
	}
	ports := make([]any, 4)
	for k := range ports {
		ports[k] = map[string]any{"name": fmt.Sprint("p", k), "port": int64(8000 + k), "protocol": "TCP"}
	}
	spec["ports"] = ports
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "bench.objwatch.io/v1", "kind": "Widget",
		"metadata": map[string]any{"namespace": benchNamespace, "name": fmt.Sprintf("w-%05d", i),
			"labels": map[string]any{"app": "bench", "shard": fmt.Sprint(i % 16)}},
		"spec": spec,
	}}
}

// BenchmarkListCBOR lists 10,000 ConfigMaps (typed) and 10,000 custom
// resources (unstructured) from a server in a child process, over JSON,
// CBOR and (ConfigMaps) protobuf, the client's decoding included. Population takes a while each time the benchmark function
// runs (once per -count).
func BenchmarkListCBOR(b *testing.B) {
	kc := testenv.StartProcess(b, "TestBenchServer")
	cfg, err := client.FromKubeconfig(kc, "")
	if err != nil {
		b.Fatal(err)
	}
	cfg.Timeout = 5 * time.Minute
	rc, err := client.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rc.CloseIdleConnections)
	ctx := context.Background()
	nsc := client.NewClient[*corev1.Namespace](rc, client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("namespaces"), Kind: "Namespace"})
	if _, err := nsc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}, metav1.CreateOptions{}); err != nil && !errors.Is(err, client.ErrAlreadyExists) {
		b.Fatal(err)
	}
	widgets := installCRD(b, rc, widgetCRD, schema.GroupVersionKind{Group: "bench.objwatch.io", Version: "v1", Kind: "Widget"})
	cms := client.NewClient[*corev1.ConfigMap](rc, configMaps)
	ws := client.NewUnstructured(rc, widgets)
	start := time.Now()
	var g errgroup.Group
	g.SetLimit(16)
	for i := range benchObjects {
		g.Go(func() error {
			rnd := rand.New(rand.NewPCG(uint64(i), 1))
			if _, err := cms.Create(ctx, testobj.ConfigMap(benchNamespace, i, rnd), metav1.CreateOptions{}); err != nil {
				return err
			}
			_, err := ws.Create(ctx, benchWidget(i, rnd), metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d ConfigMaps and %d widgets in %v", benchObjects, benchObjects, time.Since(start).Round(time.Millisecond))

	for _, path := range []string{"/api/v1/namespaces/bench/configmaps", "/apis/bench.objwatch.io/v1/namespaces/bench/widgets"} {
		j, err := rc.Get().AbsPath(path).Do(ctx).Raw()
		if err != nil {
			b.Fatal(err)
		}
		c, err := rc.Get().AbsPath(path).Accept("application/cbor").Do(ctx).Raw()
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: JSON %d bytes, CBOR %d bytes", path, len(j), len(c))
	}
	for _, kind := range []string{"configmaps", "widgets"} {
		for _, enc := range []string{"json", "cbor", "protobuf"} {
			cbor, pb := enc == "cbor", enc == "protobuf"
			if pb && kind == "widgets" {
				continue // protobuf is for built-in kinds
			}
			b.Run(kind+"/"+enc, func(b *testing.B) {
				list := func() (int, error) {
					if kind == "configmaps" {
						l, err := cms.WithCBOR(cbor).WithProtobuf(pb).List(ctx, benchNamespace, metav1.ListOptions{})
						if err != nil {
							return 0, err
						}
						return len(l.Items), nil
					}
					l, err := ws.WithCBOR(cbor).List(ctx, benchNamespace, metav1.ListOptions{})
					if err != nil {
						return 0, err
					}
					return len(l.Items), nil
				}
				b.ReportAllocs()
				for b.Loop() {
					n, err := list()
					if err != nil {
						b.Fatal(err)
					}
					if n != benchObjects {
						b.Fatalf("listed %d, want %d", n, benchObjects)
					}
				}
			})
		}
	}
}
