package server_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// TestWriteHints: the watch cache builds what this server writes from the
// write (every server test checks each such object against decoding the
// etcd event, see hints_internal_test.go), and serves it like any other.
func TestWriteHints(t *testing.T) {
	env := testenv.Start(t)
	a := servertest.NewAPI(t, env)
	if r := a.Do("GET", servertest.CMs+"?resourceVersion=0", "", nil); r.Code != http.StatusOK { // starts the cache
		t.Fatalf("list: %d %s", r.Code, r.Body)
	}
	before := server.WriteHintsUsed(env.Server)
	var lastRV string
	for i := range 20 {
		r := a.JSON("POST", servertest.CMs, servertest.CM(fmt.Sprint("hinted-", i), `,"labels":{"n":"`+fmt.Sprint(i)+`"}`))
		if r.Code != http.StatusCreated {
			t.Fatalf("create: %d %s", r.Code, r.Body)
		}
		r = a.Do("PATCH", servertest.CMs+"/"+fmt.Sprint("hinted-", i), "application/merge-patch+json", []byte(`{"data":{"k":"patched"}}`))
		if r.Code != http.StatusOK {
			t.Fatalf("patch: %d %s", r.Code, r.Body)
		}
		lastRV = servertest.RVOf(t, r)
	}
	// A list at the last write's revision comes from the cache once it has
	// every event.
	r := a.Do("GET", servertest.CMs+"?labelSelector=n%3D7&resourceVersion="+lastRV+"&resourceVersionMatch=NotOlderThan", "", nil)
	if r.Code != http.StatusOK {
		t.Fatalf("list: %d %s", r.Code, r.Body)
	}
	items, _ := r.Object()["items"].([]any)
	if len(items) != 1 {
		t.Fatalf("list by label: %d items, want 1: %s", len(items), r.Body)
	}
	data := items[0].(map[string]any)["data"].(map[string]any)
	if data["k"] != "patched" {
		t.Errorf("listed object data = %v, want the patched value", data)
	}
	// A write's hint replaces the one before it on the same object, so a
	// create patched before the cache saw it is decoded instead.
	used := server.WriteHintsUsed(env.Server) - before
	if used == 0 {
		t.Errorf("no write built from its hint")
	}
	t.Logf("%d of 40 writes built from hints", used)
}
