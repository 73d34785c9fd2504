// Package etcdtest starts an embedded etcd and a Store on it for tests of
// the storage layer and what sits on it. Everything stops when the test ends.
package etcdtest

import (
	"context"
	"testing"
	"time"

	"github.com/objwatch/objwatch/storage/etcd"
)

// Start returns a Store on a new embedded etcd in a temporary directory.
func Start(t testing.TB) *etcd.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := etcd.StartEmbedded(ctx, etcd.EmbeddedConfig{Dir: t.TempDir(), NoFsync: true})
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(e.Close)
	cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: []string{e.Endpoint}})
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	s, err := etcd.New(cli, nil)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return s
}
