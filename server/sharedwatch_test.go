package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// The watch caches and the history recorder follow etcd through one
// shared watch (storage.WatchSharer): every cache of a served resource
// and the recorder are its subscribers, and what they serve is right
// (a list, a watch through a deletion, the history); with
// NoSharedWatch, none is.
func TestSharedEtcdWatch(t *testing.T) {
	const subscribers = "objwatch_etcd_shared_watch_subscribers "
	env := testenv.Start(t, testenv.WithHistoryStore())
	a := servertest.NewAPI(t, env)
	// The caches started at once (about twenty) and the recorder.
	servertest.Eventually(t, "the watch caches and the recorder on the shared watch", func() bool {
		return servertest.MetricValue(a, subscribers) > 15
	})

	rv := servertest.RVOf(t, a.JSON("GET", servertest.CMs, ""))
	lines := make(chan []string, 1)
	go func() { lines <- servertest.WatchLines(t, a, servertest.CMs+"?watch=true&resourceVersion="+rv, 2) }()
	servertest.Eventually(t, "the watch open", func() bool { return servertest.OpenWatches(a) >= 1 })
	servertest.MustCode(t, "create", a.JSON("POST", servertest.CMs, servertest.CM("shared", "")), http.StatusCreated)
	servertest.MustCode(t, "delete", a.JSON("DELETE", servertest.CMs+"/shared", ""), http.StatusOK)
	got := <-lines
	if len(got) != 2 || !strings.Contains(got[0], `"ADDED"`) || !strings.Contains(got[1], `"DELETED"`) || !strings.Contains(got[1], `"name":"shared"`) {
		t.Errorf("watch through a create and a delete: %q", got)
	}
	servertest.Eventually(t, "the create and delete in the history", func() bool {
		return len(objectHistory(t, a, "shared").Items) == 2
	})

	own := testenv.Start(t, testenv.WithServerConfig(func(c *server.Config) { c.NoSharedWatch = true }))
	b := servertest.NewAPI(t, own)
	servertest.MustCode(t, "create without the shared watch", b.JSON("POST", servertest.CMs, servertest.CM("own", "")), http.StatusCreated)
	if n := servertest.MetricValue(b, subscribers); n != 0 {
		t.Errorf("with NoSharedWatch: %d subscribers, want 0", n)
	}
}
