package watchcache

import (
	"context"
	"fmt"
	"testing"

	"github.com/objwatch/objwatch/storage"
)

// BenchmarkPublishOtherNamespace: applying an event of one namespace
// while 10,000 watchers watch another, and while they watch every
// namespace (each then takes it). With the watchers indexed by
// namespace, the first costs as if nobody watched.
//
//	go test -run '^$' -bench PublishOtherNamespace ./storage/watchcache/
func BenchmarkPublishOtherNamespace(b *testing.B) {
	for _, watched := range []string{"default", ""} {
		b.Run(fmt.Sprintf("watchers-of=%q", watched), func(b *testing.B) {
			c := New(Config{Prefix: "/p/", MaxHistory: 1000, MaxSnapshots: 1, Buffer: 1 << 30, Decode: func(kv storage.KeyValue) (*Object, error) {
				return &Object{Key: kv.Key, Namespace: "calm", Rev: kv.ModRevision}, nil
			}})
			c.mu.Lock()
			c.ready, c.perNamespace = true, map[string]int{}
			c.mu.Unlock()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for range 10000 {
				if _, err := c.Watch(ctx, WatchOptions{Filter: Filter{Namespace: watched}}); err != nil {
					b.Fatal(err)
				}
			}
			rev := int64(0)
			b.ResetTimer()
			for b.Loop() {
				rev++
				ev := storage.Event{Type: storage.Put, Revision: rev, KV: storage.KeyValue{Key: fmt.Sprintf("/p/calm/o%d", rev%1000), ModRevision: rev}}
				if err := c.apply(ctx, ev); err != nil {
					b.Fatal(err)
				}
				if watched == "" && rev%100 == 0 { // keep the queues short
					c.mu.Lock()
					for w := range c.watchers {
						w.drop()
					}
					c.mu.Unlock()
				}
			}
		})
	}
}
