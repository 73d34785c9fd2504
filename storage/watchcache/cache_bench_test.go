package watchcache_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/storage/watchcache"
)

// filled returns a cache over n stored objects of ~1 KiB, written to etcd
// in batches.
func filled(b *testing.B, n int) *watchcache.Cache {
	b.Helper()
	_, c := filledEnv(b, n)
	return c
}

// filledEnv is filled with its store.
func filledEnv(b *testing.B, n int) (*env, *watchcache.Cache) {
	b.Helper()
	e := setup(b)
	pad := string(make([]byte, 900))
	var g errgroup.Group
	g.SetLimit(32)
	for j := range n {
		g.Go(func() error {
			v, _ := json.Marshal(value{Labels: map[string]string{"app": "bench", "shard": fmt.Sprint(j % 16)}, Data: pad})
			_, err := e.store.Client().Put(context.Background(), fmt.Sprintf("%sns%d/obj-%06d", prefix, j%10, j), string(v))
			if err != nil {
				return fmt.Errorf("put %d: %w", j, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	c := e.cache(watchcache.Config{})
	if err := c.WaitFor(context.Background(), 1); err != nil {
		b.Fatal(err)
	}
	if c.Len() != n {
		b.Fatalf("cache has %d objects, want %d", c.Len(), n)
	}
	return e, c
}

// BenchmarkList100k: lists over 100,000 cached objects.
func BenchmarkList100k(b *testing.B) {
	c := filled(b, 100000)
	for _, bc := range []struct {
		name string
		f    watchcache.Filter
		want int
	}{
		{"selector-nothing", watchcache.Filter{Labels: labels.SelectorFromSet(labels.Set{"app": "nothing"})}, 0},
		{"selector-shard", watchcache.Filter{Labels: labels.SelectorFromSet(labels.Set{"shard": "3"})}, 6250},
		{"namespace", watchcache.Filter{Namespace: "ns3"}, 10000},
		{"all", watchcache.Filter{}, 100000},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				objs, _, _, err := c.List(bc.f, "", 0)
				if err != nil || len(objs) != bc.want {
					b.Fatalf("List = %d, %v; want %d", len(objs), err, bc.want)
				}
			}
		})
	}
}
