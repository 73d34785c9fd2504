package watchcache

import (
	"context"
	"fmt"
	"testing"

	"github.com/objwatch/objwatch/storage"
)

// BenchmarkApplyFullHistory: the cost of applying one event once the
// history is full (every event trims one), at a small and the default
// MaxHistory; it must not grow with MaxHistory.
//
//	go test -run '^$' -bench ApplyFullHistory ./storage/watchcache/
func BenchmarkApplyFullHistory(b *testing.B) {
	for _, h := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("history=%d", h), func(b *testing.B) {
			c := New(Config{Prefix: "/p/", MaxHistory: h, MaxSnapshots: 1, Decode: func(kv storage.KeyValue) (*Object, error) {
				return &Object{Key: kv.Key, Rev: kv.ModRevision}, nil
			}})
			ctx := context.Background()
			rev := int64(0)
			put := func() {
				rev++
				ev := storage.Event{Type: storage.Put, Revision: rev, KV: storage.KeyValue{Key: fmt.Sprintf("/p/o%d", rev%1000), ModRevision: rev}}
				if err := c.apply(ctx, ev); err != nil {
					b.Fatal(err)
				}
			}
			for range h + 1 { // fill the history
				put()
			}
			b.ResetTimer()
			for b.Loop() {
				put()
			}
		})
	}
}
