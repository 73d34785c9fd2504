package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/objwatch/objwatch/storage/etcd"
)

// EtcdPuts measures raw etcd: o.Objects puts of o.ObjectSize bytes with
// o.Clients concurrent clients, the ceiling for any server on that etcd.
func EtcdPuts(ctx context.Context, endpoint string, o *Options) ([]Result, error) {
	// Plain puts through the etcd client (no transaction): the ceiling.
	cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: []string{endpoint}})
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	defer cli.Close()
	value := strings.Repeat("x", o.ObjectSize)
	lat := make([]latencies, o.Clients)
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for c := range o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(o.Objects) || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				if _, err := cli.Put(ctx, fmt.Sprintf("/objwatch-bench/%08d", i), value); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	store, err := etcd.New(cli, nil)
	if err == nil {
		store.DeletePrefix(ctx, "/objwatch-bench/")
	}
	if err, ok := firstErr.Load().(error); ok {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	var all latencies
	for _, l := range lat {
		all = append(all, l...)
	}
	return []Result{
		{"etcd", "puts/s", float64(len(all)) / elapsed.Seconds(), "ops/s"},
		{"etcd", "put p99", ms(all.pct(0.99)), "ms"},
	}, nil
}
