package objects_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/objwatch/objwatch/server/fieldmanager"
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
		m, err := fieldmanager.New(fieldmanager.Config{Registry: reg, BuiltinModels: func() (map[string]*spec.Schema, error) { return openapi.BuiltinModels(reg) }})
		if err != nil {
			b.Fatal(err)
		}
		fm = m
	}
	s, err := objects.New(objects.Config{Storage: etcdtest.Start(b), Registry: reg, FieldManager: fm})
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

// BenchmarkPatchOneObject updates one ConfigMap sequentially through the
// service, with the update starting from the watch cache (guess) or from
// an etcd read (etcd), and with watchers of the ConfigMaps draining
// events.
func BenchmarkPatchOneObject(b *testing.B) {
	s, res := guessService(b, etcdtest.Start(b))
	ctx := context.Background()
	if _, err := s.Create(ctx, objReq(res, "create", ""), configMap("bench", nil), objects.WriteOptions{}); err != nil {
		b.Fatal(err)
	}
	for _, watchers := range []int{0, 100} {
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range watchers {
			list := &internalversion.ListOptions{Watch: true}
			src, err := s.Watch(wctx, &objects.Request{Verb: "watch", Resource: res}, objects.WatchOptions{List: list, Timeout: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			wg.Go(func() {
				defer src.Stop()
				for {
					if _, ok := src.TryNext(); !ok {
						if src.Wait(wctx, nil) != nil {
							return
						}
					}
				}
			})
		}
		for _, mode := range []string{"guess", "etcd"} {
			b.Run(fmt.Sprintf("watchers=%d/%s", watchers, mode), func(b *testing.B) {
				defer objects.SetUpdateGuesses(s, mode == "guess")()
				before := guessesOf(s)
				i := 0
				for b.Loop() {
					i++
					if _, err := s.Update(ctx, objReq(res, "patch", "bench"), objects.WriteOptions{}, setData("k", strconv.Itoa(i))); err != nil {
						b.Fatal(err)
					}
				}
				g := guessesOf(s).since(before)
				b.ReportMetric(float64(g.used)/float64(i), "guesses/op")
				b.ReportMetric(float64(g.stale)/float64(i), "stale/op")
			})
		}
		cancel()
		wg.Wait()
	}
}
