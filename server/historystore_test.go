package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/endpoints"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/testenv"
)

// objectHistory reads the history subresource of ConfigMap name.
func objectHistory(t *testing.T, a *servertest.API, name string) endpoints.ObjectHistory {
	t.Helper()
	r := a.JSON("GET", servertest.CMs+"/"+name+"/history", "")
	servertest.MustCode(t, "history of "+name, r, http.StatusOK)
	var h endpoints.ObjectHistory
	if err := json.Unmarshal(r.Body, &h); err != nil {
		t.Fatal(err)
	}
	return h
}

// waitCompacted waits until etcd has compacted rev away (the server's
// compactor runs every few hundred milliseconds in these tests).
func waitCompacted(t *testing.T, st storage.Interface, rev int64) {
	t.Helper()
	servertest.Eventually(t, fmt.Sprintf("etcd compacted past %d", rev), func() bool {
		_, err := st.List(context.Background(), "/registry/configmaps/", storage.ListOptions{Revision: rev, Limit: 1})
		return errors.Is(err, storage.ErrCompacted)
	})
}

// summary is an item of a history as "verb by user" (or "deleted by
// user"), for comparisons.
func summary(h endpoints.ObjectHistory) []string {
	var out []string
	for _, it := range h.Items {
		who := "?"
		if it.Author != nil {
			who = it.Author.Verb + " by " + it.Author.User
		}
		if it.Deleted {
			who = "deleted: " + who
		}
		out = append(out, who)
	}
	return out
}

// The history store keeps every change past etcd's compaction, with its
// author (users, the garbage collector), a deleted object's past and the
// next object of the same name.
func TestHistoryStoreAuthorsPastCompaction(t *testing.T) {
	env := testenv.Start(t, testenv.WithHistoryStore(), testenv.WithCompaction(100*time.Millisecond))
	admin := servertest.NewAPI(t, env)
	users := servertest.Writers(t, env, admin, "alice", "bob")
	alice, bob := users[0], users[1]
	created := admin.JSON("POST", servertest.CMs, servertest.CM("app", ""))
	servertest.MustCode(t, "create", created, http.StatusCreated)
	first, _ := strconv.ParseInt(servertest.RVOf(t, created), 10, 64)
	patch := func(a *servertest.API, v string) {
		t.Helper()
		r := a.Do("PATCH", servertest.CMs+"/app", "application/merge-patch+json", []byte(`{"data":{"k":"`+v+`"}}`))
		servertest.MustCode(t, "patch", r, http.StatusOK)
	}
	patch(alice, "2")
	patch(bob, "3")
	servertest.MustCode(t, "delete", admin.JSON("DELETE", servertest.CMs+"/app", ""), http.StatusOK)
	servertest.MustCode(t, "create again", alice.JSON("POST", servertest.CMs, servertest.CM("app", "")), http.StatusCreated)

	// A dependent the collector deletes.
	g := &servertest.GCAPI{API: admin, T: t}
	owner := g.CM("owner", nil)
	g.CM("dep", nil, servertest.OwnerRef(t, owner, false))
	servertest.MustCode(t, "delete owner", admin.JSON("DELETE", servertest.CMs+"/owner", ""), http.StatusOK)
	g.Gone(servertest.CMs + "/dep")

	waitCompacted(t, servertest.RawStore(t, env), first+3)
	h := objectHistory(t, admin, "app")
	want := []string{"create by admin", "patch by alice", "patch by bob", "deleted: delete by admin", "create by alice"}
	if got := summary(h); !slices.Equal(got, want) || h.Source != "history" || !h.Complete {
		t.Fatalf("history of app (source %s, complete %v):\n got %v\nwant %v", h.Source, h.Complete, got, want)
	}
	if h.Items[0].ResourceVersion != strconv.FormatInt(first, 10) {
		t.Errorf("first item at %s, want %d", h.Items[0].ResourceVersion, first)
	}
	if string(h.Items[2].ChangedPaths) != `["data.k"]` {
		t.Errorf("bob's change: paths %s patch %s, want data.k", h.Items[2].ChangedPaths, h.Items[2].Patch)
	}
	if len(h.Items[4].Patch) == 0 || h.Items[4].Author.Groups == nil || h.Items[4].Time == nil {
		t.Errorf("the new object's item: %+v, want a patch from nothing, groups and a time", h.Items[4])
	}
	dep := objectHistory(t, admin, "dep")
	if got := summary(dep); len(got) != 2 || got[1] != "deleted: delete by system:serviceaccount:kube-system:generic-garbage-collector" {
		t.Errorf("history of the dependent: %v, want its deletion by the garbage collector", got)
	}
	// A name that never existed.
	servertest.MustCode(t, "history of a name never used", admin.JSON("GET", servertest.CMs+"/never/history", ""), http.StatusNotFound)
}

// Two servers on one etcd, each with its own store, answer the same
// history, naming the server that made each write; a store that was down
// while etcd was compacted past it reports the gap, and the state after it.
func TestHistoryStoreTwoServersAndAGap(t *testing.T) {
	ep := testenv.StartEtcd(t)
	dirOne := filepath.Join(t.TempDir(), "history-one")
	named := func(name, dir string) testenv.Option {
		return testenv.WithServerConfig(func(c *server.Config) { c.History.Dir, c.History.ServerName = dir, name })
	}
	one := testenv.Start(t, testenv.WithEtcd(ep), named("one", dirOne))
	two := testenv.Start(t, testenv.WithEtcd(ep), named("two", filepath.Join(t.TempDir(), "history-two")), testenv.WithCompaction(100*time.Millisecond))
	a1, a2 := servertest.NewAPI(t, one), servertest.NewAPI(t, two)
	servertest.MustCode(t, "create on one", a1.JSON("POST", servertest.CMs, servertest.CM("shared", "")), http.StatusCreated)
	r := a2.Do("PATCH", servertest.CMs+"/shared", "application/merge-patch+json", []byte(`{"data":{"k":"two"}}`))
	servertest.MustCode(t, "patch on two", r, http.StatusOK)
	last, _ := strconv.ParseInt(servertest.RVOf(t, r), 10, 64)
	servers := func(h endpoints.ObjectHistory) []string {
		var out []string
		for _, it := range h.Items {
			if it.Author != nil {
				out = append(out, it.Author.Server)
			}
		}
		return out
	}
	for _, a := range []*servertest.API{a1, a2} {
		servertest.Eventually(t, "both writes in the history", func() bool {
			return slices.Equal(servers(objectHistory(t, a, "shared")), []string{"one", "two"})
		})
	}

	// One stops; meanwhile a write, a deletion, and compactions past them.
	one.Stop()
	servertest.MustCode(t, "create while one is down", a2.JSON("POST", servertest.CMs, servertest.CM("later", "")), http.StatusCreated)
	del := a2.JSON("DELETE", servertest.CMs+"/shared", "")
	servertest.MustCode(t, "delete while one is down", del, http.StatusOK)
	r = a2.Do("PATCH", servertest.CMs+"/later", "application/merge-patch+json", []byte(`{"data":{"k":"2"}}`))
	servertest.MustCode(t, "patch while one is down", r, http.StatusOK)
	end, _ := strconv.ParseInt(servertest.RVOf(t, r), 10, 64)
	waitCompacted(t, servertest.RawStore(t, two), end-1)

	again := testenv.Start(t, testenv.WithEtcd(ep), named("one", dirOne))
	a3 := servertest.NewAPI(t, again)
	var h endpoints.ObjectHistory
	servertest.Eventually(t, "the gap recorded", func() bool {
		h = objectHistory(t, a3, "shared")
		return len(h.Gaps) == 1
	})
	if g := h.Gaps[0]; g.From != last+1 || g.To < end-1 {
		t.Errorf("gap %d-%d, want from %d to at least %d", g.From, g.To, last+1, end-1)
	}
	if n := len(h.Items); n != 3 || !h.Items[2].Deleted || !h.Items[2].InGap {
		t.Fatalf("history of shared after the gap: %v, want its two writes and a deletion within the gap", summary(h))
	}
	later := objectHistory(t, a3, "later")
	if len(later.Items) != 1 || !later.Items[0].Deleted && later.Items[0].Object == nil {
		t.Fatalf("history of later: %v, want its state after the gap", summary(later))
	}
	var obj map[string]any
	json.Unmarshal(later.Items[0].Object, &obj)
	if data, _ := obj["data"].(map[string]any); data["k"] != "2" {
		t.Errorf("later after the gap: %s, want data.k 2", later.Items[0].Object)
	}
}
