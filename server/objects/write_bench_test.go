package objects_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
)

// BenchmarkUpdate updates one ~1 KiB ConfigMap sequentially through the
// object service (no HTTP), each update changing one key.
func BenchmarkUpdate(b *testing.B) {
	reg := registry.New()
	s, err := objects.New(objects.Config{Storage: etcdtest.Start(b), Registry: reg})
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
