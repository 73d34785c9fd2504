package objects

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
)

// An etcd-fed watch that has taken the first events of a revision of
// several keys and finds nothing more waiting (its consumer is ending
// the watch) gets the rest of that revision after Settle: the events
// come one at a time through the store's watcher, and a TryNext between
// two of them finds none.
func TestStorageSourceSettleFinishesARevision(t *testing.T) {
	st := etcdtest.Start(t)
	res, ok := registry.New().Get(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	if !ok {
		t.Fatal("configmaps not served")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start, err := st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := &storeReader{store: st, futureRVWait: time.Second}
	src, err := r.watch(ctx, &Request{Resource: res, Namespace: "ns"}, watchRequest{sel: matchAll, rv: start, timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Stop()

	const keys = 20
	var ops []clientv3.Op
	for i := range keys {
		name := fmt.Sprintf("k%02d", i)
		ops = append(ops, clientv3.OpPut(res.Key("ns", name), fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"ns","uid":"u-%s"}}`, name, name)))
	}
	resp, err := st.Client().Txn(ctx).Then(ops...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision

	first, ok := src.TryNext()
	for !ok {
		if err := src.Wait(ctx, nil); err != nil {
			t.Fatal(err)
		}
		first, ok = src.TryNext()
	}
	if first.Rev != rev {
		t.Fatalf("first event at rev %d, want %d", first.Rev, rev)
	}
	for n := 1; n < keys; n++ {
		it, ok := src.TryNext()
		if !ok {
			src.Settle()
			it, ok = src.TryNext()
		}
		if !ok || it.Rev != rev {
			t.Fatalf("after %d of the %d events of rev %d and a Settle: %v %+v", n, keys, rev, ok, it)
		}
	}
}
