package servertest

import (
	"strconv"

	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
	"github.com/objwatch/objwatch/testenv"
)

var CMGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// RawStore is a storage client on the server's etcd, for writes behind the
// server's back.
func RawStore(t *testing.T, env *testenv.Env) *etcd.Store {
	t.Helper()
	cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: []string{env.EtcdEndpoint}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	st, err := etcd.New(cli, nil)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// RewriteKey changes the object stored at key with f behind the server's
// back and returns the new resourceVersion.
func RewriteKey(t *testing.T, st storage.Interface, key string, f func(map[string]any)) string {
	t.Helper()
	return strconv.FormatInt(etcdtest.Rewrite(t, st, key, f), 10)
}

func DataOf(r Response) map[string]any {
	d, _ := r.Object()["data"].(map[string]any)
	return d
}

func MustCode(t *testing.T, what string, r Response, code int) {
	t.Helper()
	if r.Code != code {
		t.Fatalf("%s = %d %s, want %d", what, r.Code, Truncate(r.Body), code)
	}
}
