package watchcache_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
	"github.com/objwatch/objwatch/storage/watchcache/cachefile"
)

// paged hides the store's streaming (storage.Streamer): the cache pages
// its initial list with List, as on an etcd before 3.7.
type paged struct{ storage.Interface }

// fillFast writes n objects of ~1.3 KiB in transactions of 100 puts.
func fillFast(b *testing.B, e *env, n int) {
	b.Helper()
	pad := string(make([]byte, 1200))
	var g errgroup.Group
	g.SetLimit(8)
	for lo := 0; lo < n; lo += 100 {
		g.Go(func() error {
			var ops []clientv3.Op
			for j := lo; j < min(lo+100, n); j++ {
				v, _ := json.Marshal(value{Labels: map[string]string{"app": "bench", "shard": fmt.Sprint(j % 16)}, Data: pad})
				ops = append(ops, clientv3.OpPut(fmt.Sprintf("%sns%d/obj-%06d", prefix, j%10, j), string(v)))
			}
			_, err := e.store.Client().Txn(context.Background()).Then(ops...).Commit()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkInitialLoad: a cache's start (list, decode, index) over a
// store of 10,000 and 100,000 objects, streamed (etcd's RangeStream),
// paged (List pages of 10,000, which make etcd count the rest of the
// range for each), and from a saved state (a cachefile, nothing to catch
// up). It reports ms per 10k objects: a linear start keeps it flat from
// 10k to 100k.
func BenchmarkInitialLoad(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		e := setup(b)
		fillFast(b, e, n)
		file := &cachefile.File{Path: filepath.Join(b.TempDir(), "things.cache"), Prefix: prefix}
		for _, mode := range []string{"stream", "paged", "saved"} {
			b.Run(fmt.Sprintf("%s/%dk", mode, n/1000), func(b *testing.B) {
				var store storage.Interface = e.store
				var saved watchcache.SavedState
				switch mode {
				case "paged":
					store = paged{e.store}
				case "saved":
					c := watchcache.New(watchcache.Config{Store: store, Prefix: prefix, Decode: decode, Log: quietLog, Saved: file})
					c.Start()
					err := c.WaitFor(context.Background(), 1)
					c.Stop()
					if err == nil {
						err = c.Save()
					}
					if err != nil {
						b.Fatal(err)
					}
					saved = file
				}
				for b.Loop() {
					start := time.Now()
					c := watchcache.New(watchcache.Config{Store: store, Prefix: prefix, Decode: decode, Log: quietLog, Saved: saved})
					c.Start()
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
					err := c.WaitFor(ctx, 1)
					cancel()
					took := time.Since(start)
					got := c.Len()
					c.Stop()
					if err != nil || got != n {
						b.Fatalf("cache: %d objects, %v; want %d", got, err, n)
					}
					if _, _, ok := c.Resumed(); ok != (saved != nil) {
						b.Fatalf("started from the saved state: %v", ok)
					}
					b.ReportMetric(float64(took.Milliseconds())/float64(n/10000), "ms/10k-objects")
				}
			})
		}
	}
}

// BenchmarkInitialRead: only the read of a cache's initial list (no
// decoding) over 100,000 objects: a stream against pages of 10,000, each
// of which makes etcd count the keys after it.
func BenchmarkInitialRead(b *testing.B) {
	e := setup(b)
	const n = 100000
	fillFast(b, e, n)
	ctx := context.Background()
	b.Run("stream", func(b *testing.B) {
		for b.Loop() {
			got := 0
			if _, err := e.store.ListAll(ctx, prefix, func(kvs []storage.KeyValue) error { got += len(kvs); return nil }); err != nil || got != n {
				b.Fatalf("ListAll: %d, %v", got, err)
			}
		}
	})
	b.Run("paged", func(b *testing.B) {
		for b.Loop() {
			got, start, rev := 0, "", int64(0)
			for {
				lr, err := e.store.List(ctx, prefix, storage.ListOptions{Revision: rev, Limit: 10000, StartKey: start})
				if err != nil {
					b.Fatal(err)
				}
				got, rev = got+len(lr.KVs), lr.Revision
				if !lr.More {
					break
				}
				start = lr.KVs[len(lr.KVs)-1].Key + "\x00"
			}
			if got != n {
				b.Fatalf("paged: %d", got)
			}
		}
	})
}
