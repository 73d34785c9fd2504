package bench

import (
	"context"
	"fmt"
	"strings"

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
	all, elapsed, putErr := parallel(ctx, o.Clients, o.Objects, func(i int) error {
		_, err := cli.Put(ctx, fmt.Sprintf("/objwatch-bench/%08d", i), value)
		return err
	})
	store, err := etcd.New(cli, nil)
	if err == nil {
		store.DeletePrefix(ctx, "/objwatch-bench/")
	}
	if putErr != nil {
		return nil, fmt.Errorf("etcd: %w", putErr)
	}
	return []Result{
		{"etcd", "puts/s", float64(len(all)) / elapsed.Seconds(), "ops/s"},
		{"etcd", "put p99", ms(all.pct(0.99)), "ms"},
	}, nil
}
