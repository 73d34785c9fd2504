package objects_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/objwatch/objwatch/server/fields"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/openapi"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
)

// BenchmarkUpdate updates one ~1 KiB ConfigMap sequentially through the
// object service (no HTTP), each update changing one key, with
// managedFields tracked (as the server runs) unless OBJWATCH_BENCH_FIELDS=off.
func BenchmarkUpdate(b *testing.B) {
	reg := registry.New()
	var fm objects.FieldManager
	if os.Getenv("OBJWATCH_BENCH_FIELDS") != "off" {
		m, err := fields.New(fields.Config{Registry: reg, BuiltinModels: func() (map[string]*spec.Schema, error) { return openapi.BuiltinModels(reg) }})
		if err != nil {
			b.Fatal(err)
		}
		fm = m
	}
	s, err := objects.New(objects.Config{Storage: etcdtest.Start(b), Registry: reg, Fields: fm})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	res, _ := reg.Get(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	ctx := context.Background()
	data := map[string]any{"k": "0"}
	for i := range 16 {
		data["key"+strconv.Itoa(i)] = strings.Repeat("x", 56)
	}
	req := func(verb string) *objects.Request {
		return &objects.Request{Verb: verb, Resource: res, Namespace: "ns", Name: "bench"}
	}
	if _, err := s.Create(ctx, req("create"), configMap("bench", data), objects.WriteOptions{FieldManager: "bench"}); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		if _, err := s.Update(ctx, req("update"), objects.WriteOptions{FieldManager: "bench"}, setData("k", strconv.Itoa(i))); err != nil {
			b.Fatal(err)
		}
	}
}
