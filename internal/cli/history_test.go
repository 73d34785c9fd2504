package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/objwatch/objwatch/testenv"
)

// TestHistoryCompacted: revisions etcd has compacted away are reported,
// with the compaction revision, and the oldest kept is shown whole; none
// is silently skipped.
func TestHistoryCompacted(t *testing.T) {
	etcdURL := testenv.StartEtcd(t)
	env := testenv.Start(t, testenv.WithEtcd(etcdURL))
	e := &whyEnv{t: t, env: env, c: env.HTTPClient()}
	cms := "/api/v1/namespaces/default/configmaps"
	e.do("POST", cms, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"old"},"data":{"n":"0"}}`)
	for i := 1; i <= 3; i++ {
		e.do("PATCH", cms+"/old", "application/merge-patch+json", fmt.Sprintf(`{"data":{"n":"%d"}}`, i))
	}
	out, err := runCommand(t, newHistoryCommand(), "configmaps", "old", "--kubeconfig", env.Kubeconfig, "-n", "default")
	if err != nil || !strings.Contains(out, "4 revisions") || strings.Contains(out, "compacted") {
		t.Fatalf("history before compaction = %v\n%s", err, out)
	}

	c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	// Compact away all but the last two states.
	e.do("PATCH", cms+"/old", "application/merge-patch+json", `{"data":{"n":"4"}}`)
	all, err := c.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var rev int64
	for _, kv := range all.Kvs {
		if strings.HasSuffix(string(kv.Key), "configmaps/default/old") {
			rev = kv.ModRevision - 1 // the state before the last is still readable at rev
		}
	}
	if rev == 0 {
		t.Fatal("the ConfigMap's key is not in etcd")
	}
	if _, err := c.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	out, err = runCommand(t, newHistoryCommand(), "configmaps", "old", "--kubeconfig", env.Kubeconfig, "-n", "default")
	if err != nil {
		t.Fatalf("history after compaction: %v\n%s", err, out)
	}
	for _, want := range []string{"2 revisions", fmt.Sprintf("# revisions before %d were compacted; the oldest one kept is shown whole", rev), "~ data.n: 3 → 4"} {
		if !strings.Contains(out, want) {
			t.Errorf("history after compaction lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "data.n: 2 → 3") {
		t.Errorf("history after compaction shows a compacted change:\n%s", out)
	}
}
