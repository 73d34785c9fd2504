package server_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/storage/etcd"
	"github.com/objwatch/objwatch/testenv"
)

// etcd reaching its space quota (the NOSPACE alarm): writes get
// Kubernetes' answer (500, etcd's words), deletions still go, reads and
// an open watch go on, /readyz and objwatch_etcd_alarms say why; after
// the operator deletes half the objects, compacts, defragments and
// disarms the alarm, writes work again, and every acknowledged create
// not deleted is there.
func TestEtcdNoSpace(t *testing.T) {
	e, err := etcd.StartEmbedded(t.Context(), etcd.EmbeddedConfig{Dir: t.TempDir(), NoFsync: true, QuotaBytes: 6 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	env := testenv.Start(t, testenv.WithEtcd(e.Endpoint), testenv.WithServerConfig(func(c *server.Config) {
		c.StorageProbeInterval = 100 * time.Millisecond
	}))
	a := servertest.NewAPI(t, env)
	// A watch opened before the quota is reached, read in the background.
	wctx, stopWatch := context.WithCancel(t.Context())
	defer stopWatch()
	req, _ := http.NewRequestWithContext(wctx, "GET", a.Host+servertest.CMs+"?watch=1", nil)
	resp, err := a.C.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan string, 1000)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	value := strings.Repeat("x", 200_000)
	var created []string
	refused := false
	for i := 0; i < 200 && !refused; i++ {
		name := fmt.Sprintf("cm-%03d", i)
		r := a.JSON("POST", servertest.CMs, fmt.Sprintf(`{"metadata":{"name":%q},"data":{"v":%q}}`, name, value))
		switch {
		case r.Code == http.StatusCreated:
			created = append(created, name)
		case r.Code == http.StatusInternalServerError && strings.Contains(string(r.Body), "etcdserver: mvcc: database space exceeded"):
			refused = true
		default:
			t.Fatalf("create %s: %d %s", name, r.Code, r.Body)
		}
	}
	if !refused {
		t.Fatalf("%d creates of 200 KB under a 6 MiB quota, none refused", len(created))
	}
	// Reads go on; the watch opened before still delivers (a deletion,
	// which etcd takes at its quota).
	servertest.MustCode(t, "get", a.JSON("GET", servertest.CMs+"/"+created[0], ""), http.StatusOK)
	servertest.MustCode(t, "list", a.JSON("GET", servertest.CMs, ""), http.StatusOK)
	servertest.MustCode(t, "delete at the quota", a.JSON("DELETE", servertest.CMs+"/"+created[0], ""), http.StatusOK)
	for deleted := false; !deleted; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the watch ended at the quota")
			}
			deleted = strings.Contains(l, `"type":"DELETED"`) && strings.Contains(l, `"name":"`+created[0]+`"`)
		case <-time.After(10 * time.Second):
			t.Fatal("the watch did not deliver the deletion")
		}
	}
	created = created[1:]
	servertest.Eventually(t, "/readyz names the alarm", func() bool {
		r := a.JSON("GET", "/readyz?verbose", "")
		return r.Code == http.StatusServiceUnavailable && strings.Contains(string(r.Body), "[-]etcd-alarms failed: etcd alarm NOSPACE")
	})
	if v := servertest.MetricValue(a, `objwatch_etcd_alarms{alarm="NOSPACE"} `); v != 1 {
		t.Errorf("objwatch_etcd_alarms NOSPACE = %v, want 1", v)
	}

	// The operator's recovery: delete what grew (etcd takes deletions at
	// its quota), compact, defragment, disarm.
	half := len(created) / 2
	for _, name := range created[:half] {
		servertest.MustCode(t, "delete "+name, a.JSON("DELETE", servertest.CMs+"/"+name, ""), http.StatusOK)
	}
	created = created[half:]
	cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: []string{e.Endpoint}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, e.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, st.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Defragment(ctx, e.Endpoint); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil { // the zero member: every alarm raised
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r := a.JSON("POST", servertest.CMs, `{"metadata":{"name":"after"},"data":{"v":"small"}}`)
		if r.Code == http.StatusCreated {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a write after the recovery: %d %s", r.Code, r.Body)
		}
	}
	servertest.EventuallyWithin(t, 15*time.Second, func() bool { return a.JSON("GET", "/readyz", "").Code == http.StatusOK })
	for _, name := range created {
		servertest.MustCode(t, "acknowledged "+name, a.JSON("GET", servertest.CMs+"/"+name, ""), http.StatusOK)
	}
}
