// Package etcdtest starts an embedded etcd and a Store on it for tests of
// the storage layer and what sits on it. Everything stops when the test ends.
package etcdtest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/objwatch/objwatch/storage"
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

// Rewrite changes the JSON object stored at key with f, as a writer
// other than the one under test would (behind its back), and returns the
// new revision.
func Rewrite(t testing.TB, st storage.Interface, key string, f func(map[string]any)) int64 {
	t.Helper()
	ctx := context.Background()
	kv, err := st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(kv.Value, &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	b, _ := json.Marshal(m)
	nkv, err := st.Update(ctx, key, b, kv.ModRevision)
	if err != nil {
		t.Fatal(err)
	}
	return nkv.ModRevision
}
