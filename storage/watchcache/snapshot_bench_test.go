package watchcache_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// BenchmarkListPage: pages of 500 objects from the cache's snapshots, at
// 1,000, 10,000 and 100,000 cached objects of ~1 KiB (10 namespaces):
// the first page of the whole collection and of a namespace, and a whole
// walk (every page, each from the previous page's continue key, at the
// walk's revision); and the same walk over etcd's range reads, which is
// what the store path pays before decoding. With -short, 100,000 is left
// out.
//
//	go test -run '^$' -bench ListPage -benchtime 2s ./storage/watchcache/
func BenchmarkListPage(b *testing.B) {
	sizes := []int{1000, 10000, 100000}
	if testing.Short() {
		sizes = sizes[:2]
	}
	for _, n := range sizes {
		e, c := filledEnv(b, n)
		rev := c.Revision()
		b.Run(fmt.Sprintf("objects=%d/first", n), func(b *testing.B) {
			for b.Loop() {
				p, err := c.ListAt(watchcache.Filter{}, 0, "", 500)
				if err != nil || len(p.Objects) != 500 || p.Remaining != int64(n-500) {
					b.Fatalf("ListAt = %d remaining %d, %v", len(p.Objects), p.Remaining, err)
				}
			}
		})
		b.Run(fmt.Sprintf("objects=%d/namespace-first", n), func(b *testing.B) {
			for b.Loop() {
				p, err := c.ListAt(watchcache.Filter{Namespace: "ns3"}, rev, "", 500)
				if err != nil || len(p.Objects) != min(500, n/10) {
					b.Fatalf("ListAt = %d, %v", len(p.Objects), err)
				}
			}
		})
		b.Run(fmt.Sprintf("objects=%d/walk", n), func(b *testing.B) {
			pages := 0
			for b.Loop() {
				start := ""
				for seen := 0; ; pages++ {
					p, err := c.ListAt(watchcache.Filter{}, rev, start, 500)
					if err != nil {
						b.Fatal(err)
					}
					if seen += len(p.Objects); !p.More {
						if seen != n {
							b.Fatalf("walk saw %d objects, want %d", seen, n)
						}
						pages++
						break
					}
					start = p.Objects[len(p.Objects)-1].Key + "\x00"
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(pages)/1e3, "µs/page")
		})
		b.Run(fmt.Sprintf("objects=%d/walk-etcd-range", n), func(b *testing.B) {
			pages := 0
			for b.Loop() {
				start := ""
				for {
					lr, err := e.store.List(context.Background(), prefix, storage.ListOptions{Revision: rev, Limit: 500, StartKey: start})
					if err != nil {
						b.Fatal(err)
					}
					pages++
					if !lr.More {
						break
					}
					start = lr.KVs[len(lr.KVs)-1].Key + "\x00"
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(pages)/1e3, "µs/page")
		})
	}
}
