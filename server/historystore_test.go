package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/endpoints"
	"github.com/objwatch/objwatch/server/history"
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
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := st.List(context.Background(), "/registry/configmaps/", storage.ListOptions{Revision: rev, Limit: 1})
		if errors.Is(err, storage.ErrCompacted) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not compact past %d in 20 s: %v", rev, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
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

	// A watch resumed from before the gap cannot be served without
	// papering over it: 410, naming the gap; one from a revision before
	// the gap but after it on the other server is served.
	evs := watchToEnd(t, a3, servertest.CMs+"?watch=1&timeoutSeconds=1&resourceVersion="+strconv.FormatInt(last, 10))
	if len(evs) != 1 || evs[0].raw["type"] != "ERROR" {
		t.Fatalf("watch from %d, before the gap: %v, want one ERROR event", last, evs)
	}
	st, _ := evs[0].raw["object"].(map[string]any)
	if code, _ := st["code"].(float64); code != http.StatusGone || !strings.Contains(fmt.Sprint(st["message"]), "could not be recorded") {
		t.Errorf("watch across the gap ended with %v, want 410 naming the gap", st)
	}
	evs = watchToEnd(t, a2, servertest.CMs+"?watch=1&timeoutSeconds=1&resourceVersion="+strconv.FormatInt(last, 10))
	if len(evs) < 3 || evs[0].raw["type"] == "ERROR" {
		t.Errorf("watch from %d on the server without a gap: %d events (first %v), want the create, deletion and patch", last, len(evs), evs)
	}
}

// One server stopped and started again on its data directory, with etcd
// compacted several times before and after: the history of an object
// spans all of it, without a gap, and a past read at its first revision
// is answered from the store.
func TestHistoryStoreAcrossARestart(t *testing.T) {
	ep := testenv.StartEtcd(t)
	dir := filepath.Join(t.TempDir(), "history")
	opts := []testenv.Option{testenv.WithEtcd(ep), testenv.WithCompaction(100 * time.Millisecond),
		testenv.WithServerConfig(func(c *server.Config) { c.History.Dir = dir })}
	env := testenv.Start(t, opts...)
	a := servertest.NewAPI(t, env)
	created := a.JSON("POST", servertest.CMs, servertest.CM("app", ""))
	servertest.MustCode(t, "create", created, http.StatusCreated)
	first := servertest.RVOf(t, created)
	patch := func(a *servertest.API, v string) int64 {
		t.Helper()
		r := a.Do("PATCH", servertest.CMs+"/app", "application/merge-patch+json", []byte(`{"data":{"k":"`+v+`"}}`))
		servertest.MustCode(t, "patch", r, http.StatusOK)
		rv, _ := strconv.ParseInt(servertest.RVOf(t, r), 10, 64)
		return rv
	}
	for i := range 2 { // a compaction after each
		rv := patch(a, fmt.Sprint("before-", i))
		servertest.MustCode(t, "tick", a.JSON("POST", servertest.CMs, servertest.CM(fmt.Sprint("tick-", i), "")), http.StatusCreated)
		waitCompacted(t, servertest.RawStore(t, env), rv+1)
	}
	env.Stop()

	env = testenv.Start(t, opts...)
	a = servertest.NewAPI(t, env)
	for i := range 2 {
		rv := patch(a, fmt.Sprint("after-", i))
		servertest.MustCode(t, "tick", a.JSON("POST", servertest.CMs, servertest.CM(fmt.Sprint("tock-", i), "")), http.StatusCreated)
		waitCompacted(t, servertest.RawStore(t, env), rv+1)
	}
	h := objectHistory(t, a, "app")
	var values []string
	for _, it := range h.Items {
		var obj struct {
			Data map[string]string `json:"data"`
		}
		json.Unmarshal(it.Object, &obj)
		values = append(values, obj.Data["k"])
	}
	want := []string{"v", "before-0", "before-1", "after-0", "after-1"}
	if !slices.Equal(values, want) || len(h.Gaps) != 0 || h.Source != "history" {
		t.Fatalf("history across a restart: %q (gaps %v, source %s), want %q and no gap", values, h.Gaps, h.Source, want)
	}
	g := a.JSON("GET", servertest.CMs+"/app?resourceVersionMatch=Exact&resourceVersion="+first, "")
	servertest.MustCode(t, "get at the first revision", g, http.StatusOK)
	if rv := servertest.RVOf(t, g); rv != first {
		t.Errorf("get at %s answered the object at %s", first, rv)
	}
}

// snapshot is what the live server answered at one revision.
type snapshot struct {
	rev   int64
	at    time.Time
	list  []any          // the items of a list of configmaps in default
	gets  map[string]any // each object by a get
	label []any          // the items of a list selected by label
}

// items decodes a list's items.
func items(t *testing.T, r servertest.Response) []any {
	t.Helper()
	it, _ := r.Object()["items"].([]any)
	return it
}

// Past reads answered from the history store after etcd compacted them
// equal what the live server said at those revisions: gets at an exact
// revision, lists (whole, paginated, selected by label) and asOf.
func TestHistoryStorePastReads(t *testing.T) {
	env := testenv.Start(t, testenv.WithHistoryStore(), testenv.WithCompaction(100*time.Millisecond))
	a := servertest.NewAPI(t, env)
	var snaps []snapshot
	take := func(rv string) {
		t.Helper()
		rev, _ := strconv.ParseInt(rv, 10, 64)
		s := snapshot{rev: rev, gets: map[string]any{}}
		l := a.JSON("GET", servertest.CMs+"?resourceVersion="+rv+"&resourceVersionMatch=Exact", "")
		servertest.MustCode(t, "live list", l, http.StatusOK)
		s.list = items(t, l)
		ll := a.JSON("GET", servertest.CMs+"?labelSelector=tier%3Dweb&resourceVersion="+rv+"&resourceVersionMatch=Exact", "")
		servertest.MustCode(t, "live labelled list", ll, http.StatusOK)
		s.label = items(t, ll)
		for _, it := range s.list {
			name := it.(map[string]any)["metadata"].(map[string]any)["name"].(string)
			s.gets[name] = it
		}
		s.at = time.Now()
		time.Sleep(5 * time.Millisecond) // the next write is later than at
		snaps = append(snaps, s)
	}
	for i := range 6 {
		labels := `,"labels":{"tier":"db"}`
		if i%2 == 0 {
			labels = `,"labels":{"tier":"web"}`
		}
		r := a.JSON("POST", servertest.CMs, servertest.CM(fmt.Sprintf("cm-%d", i), labels))
		servertest.MustCode(t, "create", r, http.StatusCreated)
		take(servertest.RVOf(t, r))
	}
	for i := range 4 {
		r := a.Do("PATCH", servertest.CMs+"/cm-1", "application/merge-patch+json", []byte(fmt.Sprintf(`{"data":{"k":"v%d"},"metadata":{"labels":{"tier":"%s"}}}`, i, []string{"web", "db"}[i%2])))
		servertest.MustCode(t, "patch", r, http.StatusOK)
		take(servertest.RVOf(t, r))
	}
	servertest.MustCode(t, "delete", a.JSON("DELETE", servertest.CMs+"/cm-2", ""), http.StatusOK)
	l := a.JSON("GET", servertest.CMs, "")
	md, _ := l.Object()["metadata"].(map[string]any)
	take(md["resourceVersion"].(string))
	// What watches from the first revision said while etcd had it all.
	rv0 := strconv.FormatInt(snaps[0].rev, 10)
	liveAll := watchToEnd(t, a, servertest.CMs+"?watch=1&timeoutSeconds=1&resourceVersion="+rv0)
	liveWeb := watchToEnd(t, a, servertest.CMs+"?watch=1&timeoutSeconds=1&labelSelector=tier%3Dweb&resourceVersion="+rv0)
	if len(liveAll) != len(snaps)-1 {
		t.Fatalf("the live watch sent %d events, want %d", len(liveAll), len(snaps)-1)
	}
	// A later write elsewhere, so that etcd compacts past the last one.
	servertest.MustCode(t, "a later write", a.JSON("POST", "/api/v1/namespaces/kube-public/configmaps", servertest.CM("later", "")), http.StatusCreated)
	waitCompacted(t, servertest.RawStore(t, env), snaps[len(snaps)-1].rev)

	equal := func(what string, got, want any) {
		t.Helper()
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if string(g) != string(w) {
			t.Fatalf("%s:\n got %s\nwant %s", what, g, w)
		}
	}
	for _, s := range snaps {
		rv := strconv.FormatInt(s.rev, 10)
		l := a.JSON("GET", servertest.CMs+"?resourceVersion="+rv+"&resourceVersionMatch=Exact", "")
		servertest.MustCode(t, "past list at "+rv, l, http.StatusOK)
		equal("list at "+rv, items(t, l), s.list)
		ll := a.JSON("GET", servertest.CMs+"?labelSelector=tier%3Dweb&resourceVersion="+rv+"&resourceVersionMatch=Exact", "")
		servertest.MustCode(t, "past labelled list at "+rv, ll, http.StatusOK)
		equal("labelled list at "+rv, items(t, ll), s.label)
		// Pages of two.
		var paged []any
		path := servertest.CMs + "?limit=2&resourceVersion=" + rv + "&resourceVersionMatch=Exact"
		for {
			p := a.JSON("GET", path, "")
			servertest.MustCode(t, "past page at "+rv, p, http.StatusOK)
			paged = append(paged, items(t, p)...)
			md, _ := p.Object()["metadata"].(map[string]any)
			cont, _ := md["continue"].(string)
			if cont == "" {
				break
			}
			path = servertest.CMs + "?limit=2&continue=" + cont
		}
		equal("paginated list at "+rv, paged, s.list)
		// asOf: the moment after the write.
		al := a.JSON("GET", servertest.CMs+"?asOf="+s.at.UTC().Format(time.RFC3339Nano), "")
		servertest.MustCode(t, "list asOf", al, http.StatusOK)
		equal("list as of the moment after "+rv, items(t, al), s.list)
		for i := range 6 {
			name := fmt.Sprintf("cm-%d", i)
			g := a.JSON("GET", servertest.CMs+"/"+name+"?resourceVersion="+rv+"&resourceVersionMatch=Exact", "")
			want, existed := s.gets[name]
			if !existed {
				servertest.MustCode(t, name+" before it existed", g, http.StatusNotFound)
				continue
			}
			servertest.MustCode(t, "past get of "+name+" at "+rv, g, http.StatusOK)
			obj := g.Object()
			delete(obj, "apiVersion") // list items of built-in kinds have none
			delete(obj, "kind")
			equal("get of "+name+" at "+rv, obj, want)
		}
	}

	// Watches from each compacted revision: the same events, from the
	// history store, then etcd's.
	for _, s := range snaps[:len(snaps)-1] {
		rv := strconv.FormatInt(s.rev, 10)
		for _, w := range []struct {
			query string
			live  []watchEvent
		}{{"", liveAll}, {"&labelSelector=tier%3Dweb", liveWeb}} {
			var want []watchEvent
			for _, ev := range w.live {
				if ev.rev > s.rev {
					want = append(want, ev)
				}
			}
			lines := servertest.WatchLines(t, a, servertest.CMs+"?watch=1&resourceVersion="+rv+w.query, len(want))
			for i, l := range lines {
				got := parseWatchEvent(t, l)
				equal(fmt.Sprintf("event %d of a watch from %s%s", i, rv, w.query), got.raw, want[i].raw)
			}
		}
	}

	// Bad input.
	for _, c := range []struct {
		query string
		code  int
	}{
		{"asOf=yesterday", http.StatusBadRequest},
		{"asOf=" + time.Now().Add(time.Hour).UTC().Format(time.RFC3339), http.StatusBadRequest},
		{"asOf=2001-01-01T00:00:00Z", http.StatusGone},
		{"asOf=" + time.Now().UTC().Format(time.RFC3339) + "&resourceVersion=5", http.StatusBadRequest},
	} {
		r := a.JSON("GET", servertest.CMs+"?"+c.query, "")
		servertest.MustCode(t, c.query, r, c.code)
		if st := r.Status(); st.Message == "" {
			t.Errorf("%s: a Status without a message: %s", c.query, r.Body)
		}
	}
	g := a.JSON("GET", servertest.CMs+"/cm-1?resourceVersion=abc&resourceVersionMatch=Exact", "")
	servertest.MustCode(t, "get at a malformed revision", g, http.StatusBadRequest)
}

// watchEvent is one event of a watch: decoded, and its resourceVersion.
type watchEvent struct {
	raw map[string]any
	rev int64
}

func parseWatchEvent(t *testing.T, line string) watchEvent {
	t.Helper()
	var ev watchEvent
	if err := json.Unmarshal([]byte(line), &ev.raw); err != nil {
		t.Fatalf("watch event %q: %v", line, err)
	}
	obj, _ := ev.raw["object"].(map[string]any)
	md, _ := obj["metadata"].(map[string]any)
	rv, _ := md["resourceVersion"].(string)
	ev.rev, _ = strconv.ParseInt(rv, 10, 64)
	return ev
}

// watchToEnd reads a watch's events until the server ends it (path has a
// timeoutSeconds).
func watchToEnd(t *testing.T, a *servertest.API, path string) []watchEvent {
	t.Helper()
	r := a.JSON("GET", path, "")
	servertest.MustCode(t, "watch "+path, r, http.StatusOK)
	var out []watchEvent
	for _, l := range strings.Split(strings.TrimSpace(string(r.Body)), "\n") {
		if l != "" {
			out = append(out, parseWatchEvent(t, l))
		}
	}
	return out
}

// changeList reads the changes endpoint.
func changeList(t *testing.T, a *servertest.API, query string) endpoints.ChangeList {
	t.Helper()
	r := a.JSON("GET", endpoints.ChangesPath+"?"+query, "")
	servertest.MustCode(t, "changes "+query, r, http.StatusOK)
	var l endpoints.ChangeList
	if err := json.Unmarshal(r.Body, &l); err != nil {
		t.Fatal(err)
	}
	return l
}

func changeSummary(l endpoints.ChangeList) []string {
	var out []string
	for _, it := range l.Items {
		who := "?"
		if it.Author != nil {
			who = it.Author.User
		}
		out = append(out, fmt.Sprintf("%s %s %s/%s by %s %s", it.Type, it.Resource, it.Namespace, it.Name, who, it.ChangedPaths))
	}
	return out
}

// What changed in a window, across resources, with authors and diffs;
// only what the asker may list; selected by namespace, resource, labels;
// cut at a limit and continued.
func TestHistoryStoreChanges(t *testing.T) {
	env := testenv.Start(t, testenv.WithHistoryStore())
	admin := servertest.NewAPI(t, env)
	alice := servertest.Writers(t, env, admin, "alice")[0]
	// The window opens after the server's own start-up writes (the
	// default service) and the setup's are recorded: a change without an
	// author note is timed when the history store records it, which a
	// loaded machine may do after a since taken at once.
	servertest.Eventually(t, "the default service", func() bool {
		return admin.JSON("GET", "/api/v1/namespaces/default/services/kubernetes", "").Code == http.StatusOK
	})
	changeList(t, admin, "since=2001-01-01T00:00:00Z&limit=1") // answered once the history store has caught up
	since := time.Now().UTC().Format(time.RFC3339Nano)
	time.Sleep(5 * time.Millisecond)
	servertest.MustCode(t, "create", alice.JSON("POST", servertest.CMs, servertest.CM("a", `,"labels":{"app":"x"}`)), http.StatusCreated)
	servertest.MustCode(t, "patch", alice.Do("PATCH", servertest.CMs+"/a", "application/merge-patch+json", []byte(`{"data":{"k":"2"}}`)), http.StatusOK)
	servertest.MustCode(t, "secret", admin.JSON("POST", "/api/v1/namespaces/default/secrets", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}`), http.StatusCreated)
	servertest.MustCode(t, "other namespace", admin.JSON("POST", "/api/v1/namespaces/kube-public/configmaps", servertest.CM("b", "")), http.StatusCreated)
	servertest.MustCode(t, "delete", admin.JSON("DELETE", servertest.CMs+"/a", ""), http.StatusOK)

	all := changeList(t, admin, "since="+since+"&namespace=default")
	want := []string{
		`ADDED configmaps default/a by alice ["apiVersion","data","kind","metadata"]`,
		`MODIFIED configmaps default/a by alice ["data.k"]`,
		`ADDED secrets default/s by admin ["apiVersion","kind","metadata","type"]`,
		`DELETED configmaps default/a by admin `,
	}
	if got := changeSummary(all); !slices.Equal(got, want) {
		t.Fatalf("changes in default:\n got %q\nwant %q", got, want)
	}
	// Alice may not list secrets: left out.
	mine := changeList(t, alice, "since="+since+"&namespace=default")
	if got := changeSummary(mine); len(got) != 3 || slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "secrets") }) {
		t.Errorf("alice's changes: %q, want the three of the configmap", got)
	}
	if got := changeSummary(changeList(t, admin, "since="+since+"&resource=configmaps")); len(got) != 4 {
		t.Errorf("configmaps in every namespace: %q, want 4", got)
	}
	if got := changeSummary(changeList(t, admin, "since="+since+"&labelSelector=app%3Dx")); len(got) != 3 {
		t.Errorf("labelled changes: %q, want the configmap's 3", got)
	}
	// Cut at two and continued.
	first := changeList(t, admin, "since="+since+"&namespace=default&limit=2")
	if len(first.Items) != 2 || first.Continue == "" {
		t.Fatalf("a page of 2: %d items, continue %q", len(first.Items), first.Continue)
	}
	rest := changeList(t, admin, "fromResourceVersion="+first.Continue+"&namespace=default")
	if got := append(changeSummary(first), changeSummary(rest)...); !slices.Equal(got, want) {
		t.Errorf("two pages: %q, want %q", got, want)
	}
	// Since before the history: from its start, and said.
	if early := changeList(t, admin, "since=2001-01-01T00:00:00Z&namespace=default"); !early.HistoryStartsLater || len(early.Items) < len(want) {
		t.Errorf("changes since 2001: starts later %v, %d items", early.HistoryStartsLater, len(early.Items))
	}
	for _, c := range []struct {
		query string
		code  int
	}{
		{"namespace=default", http.StatusBadRequest},
		{"since=yesterday", http.StatusBadRequest},
		{"since=" + time.Now().Add(time.Hour).UTC().Format(time.RFC3339), http.StatusBadRequest},
		{"fromResourceVersion=-1", http.StatusBadRequest},
		{"since=" + since + "&resource=nosuchthings", http.StatusBadRequest},
		{"since=" + since + "&limit=0", http.StatusBadRequest},
		{"fromResourceVersion=5&toResourceVersion=3", http.StatusBadRequest},
	} {
		servertest.MustCode(t, c.query, admin.JSON("GET", endpoints.ChangesPath+"?"+c.query, ""), c.code)
	}
}

// A history store whose files are damaged is found when the server
// starts: the server serves the present without it (the history
// subresource answers from etcd and says so, /version lists no history)
// instead of failing or answering wrongly.
func TestHistoryStoreDamaged(t *testing.T) {
	ep := testenv.StartEtcd(t)
	dir := filepath.Join(t.TempDir(), "history")
	store := testenv.WithServerConfig(func(c *server.Config) { c.History.Dir = dir })
	one := testenv.Start(t, testenv.WithEtcd(ep), store)
	a := servertest.NewAPI(t, one)
	servertest.MustCode(t, "create", a.JSON("POST", servertest.CMs, servertest.CM("app", "")), http.StatusCreated)
	if h := objectHistory(t, a, "app"); h.Source != "history" {
		t.Fatalf("history source %q, want history", h.Source)
	}
	one.Stop()
	manifests, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	if len(manifests) == 0 {
		t.Fatal("no MANIFEST in the store")
	}
	for _, m := range manifests {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		for i := 8; i < len(b); i += 7 {
			b[i] ^= 0xa5
		}
		if err := os.WriteFile(m, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	two := testenv.Start(t, testenv.WithEtcd(ep), store)
	b := servertest.NewAPI(t, two)
	servertest.MustCode(t, "a write after the damage", b.Do("PATCH", servertest.CMs+"/app", "application/merge-patch+json", []byte(`{"data":{"k":"2"}}`)), http.StatusOK)
	h := objectHistory(t, b, "app")
	if h.Source != "etcd" || len(h.Items) != 2 {
		t.Errorf("history after the damage: source %q, %d items, want etcd's 2", h.Source, len(h.Items))
	}
	v := b.JSON("GET", "/version", "")
	if _, ok := v.Object()["history"]; ok {
		t.Errorf("/version lists history with a damaged store: %s", v.Body)
	}
}

// A server told to keep its authors in process (LocalAuthors) records its
// writes with their authors, and the etcd transaction of a write holds no
// note key; a write by a server without a store and without notes (as a
// write etcd gets from elsewhere) is recorded without an author.
func TestHistoryStoreLocalAuthors(t *testing.T) {
	ep := testenv.StartEtcd(t)
	env := testenv.Start(t, testenv.WithEtcd(ep), testenv.WithHistoryStore(), testenv.WithServerConfig(func(c *server.Config) { c.History.LocalAuthors = true }))
	a := servertest.NewAPI(t, env)
	servertest.MustCode(t, "create", a.JSON("POST", servertest.CMs, servertest.CM("plain", "")), http.StatusCreated)
	servertest.MustCode(t, "update", a.Do("PATCH", servertest.CMs+"/plain", "application/merge-patch+json", []byte(`{"data":{"k":"2"}}`)), http.StatusOK)
	servertest.MustCode(t, "delete", a.JSON("DELETE", servertest.CMs+"/plain", ""), http.StatusOK)
	var h endpoints.ObjectHistory
	servertest.Eventually(t, "the three writes in the history", func() bool {
		h = objectHistory(t, a, "plain")
		return len(h.Items) == 3
	})
	for i, verb := range []string{"create", "patch", "delete"} {
		au := h.Items[i].Author
		if au == nil || au.User == "" || au.Verb != verb {
			t.Errorf("revision %d: author %+v, want a user and verb %q", i, au, verb)
		}
	}
	kv, err := servertest.RawStore(t, env).Get(context.Background(), history.AuthorKey)
	if !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the author key: %+v, %v; want none written", kv, err)
	}

	other := testenv.Start(t, testenv.WithEtcd(ep))
	b := servertest.NewAPI(t, other)
	servertest.MustCode(t, "create by a server without notes", b.JSON("POST", servertest.CMs, servertest.CM("elsewhere", "")), http.StatusCreated)
	servertest.Eventually(t, "the other server's create in the history", func() bool {
		h = objectHistory(t, a, "elsewhere")
		return len(h.Items) == 1
	})
	if h.Items[0].Author != nil {
		t.Errorf("the other server's write: author %+v, want none", h.Items[0].Author)
	}
}

// The changes endpoint is a read under the same limits as a resource's:
// while a user's one read slot is held (a list waiting for a revision
// etcd has not reached), its changes request is refused with 429.
func TestHistoryStoreChangesInFlightLimit(t *testing.T) {
	env := testenv.Start(t, testenv.WithHistoryStore(), testenv.WithServerConfig(func(c *server.Config) {
		c.MaxReadInFlight, c.UserInFlightShare, c.FutureRVWait = 2, 0.5, 3*time.Second
	}))
	admin := servertest.NewAPI(t, env)
	reader := servertest.Writers(t, env, admin, "reader")[0]
	held := make(chan servertest.Response, 1)
	go func() { held <- reader.JSON("GET", servertest.CMs+"?resourceVersion=999999999", "") }()
	const inflight = `apiserver_current_inflight_requests{request_kind="readOnly"} `
	servertest.Eventually(t, "the waiting list holds a read slot", func() bool { return servertest.MetricValue(admin, inflight) >= 1 })
	r := reader.JSON("GET", endpoints.ChangesPath+"?since=2026-01-01T00:00:00Z", "")
	servertest.MustCode(t, "changes while the user's read slot is held", r, http.StatusTooManyRequests)
	servertest.MustCode(t, "the waiting list", <-held, http.StatusGatewayTimeout)
	servertest.MustCode(t, "changes once the slot is free", reader.JSON("GET", endpoints.ChangesPath+"?since=2026-01-01T00:00:00Z", ""), http.StatusOK)
}

// The store's metrics: how far it has recorded and synced, its oldest
// revision and size, and the lag of its records behind the writes.
func TestHistoryStoreMetrics(t *testing.T) {
	env := testenv.Start(t, testenv.WithHistoryStore())
	a := servertest.NewAPI(t, env)
	r := a.JSON("POST", servertest.CMs, servertest.CM("measured", ""))
	servertest.MustCode(t, "create", r, http.StatusCreated)
	rv, _ := strconv.Atoi(servertest.RVOf(t, r))
	servertest.Eventually(t, "the create recorded and synced", func() bool {
		return servertest.MetricValue(a, "objwatch_history_recorded_revision ") >= rv && servertest.MetricValue(a, "objwatch_history_durable_revision ") >= rv
	})
	if n := servertest.MetricValue(a, "objwatch_history_record_lag_seconds_count "); n < 1 {
		t.Errorf("record lag observations: %d, want the create's", n)
	}
	if servertest.MetricValue(a, "objwatch_history_size_bytes ") <= 0 || servertest.MetricValue(a, "objwatch_history_oldest_revision ") <= 0 {
		t.Error("the store's size and oldest revision are not reported")
	}
	if servertest.MetricValue(a, "objwatch_history_damaged ") != 0 {
		t.Error("a sound store reported damaged")
	}
}
