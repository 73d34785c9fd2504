package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

func withQuery(path, q string) string {
	if strings.Contains(path, "?") {
		return path + "&" + q
	}
	return path + "?" + q
}

// walk lists path page by page, each page from the server whose turn it
// is (servers[i % len]), starting at first (a query to add, or "").
func walk(t *testing.T, servers []*servertest.API, path, first string) []servertest.ListPage {
	t.Helper()
	var pages []servertest.ListPage
	p := servers[0].Page(withQuery(path, first))
	for i := 1; ; i++ {
		pages = append(pages, p)
		if p.Cont == "" {
			return pages
		}
		if i > 100 {
			t.Fatalf("%s: walk does not end", path)
		}
		p = servers[i%len(servers)].Page(withQuery(path, "continue="+url.QueryEscape(p.Cont)))
	}
}

func samePages(t *testing.T, what string, got, want []servertest.ListPage) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d pages, want %d:\n%v\n%v", what, len(got), len(want), got, want)
	}
	for i := range got {
		if got[i].String() != want[i].String() {
			t.Fatalf("%s: page %d\n got  %v\n want %v", what, i, got[i], want[i])
		}
	}
}

// cacheAndEtcd starts two servers on one etcd: one with its watch cache,
// one reading etcd only.
func cacheAndEtcd(t *testing.T, opts ...testenv.Option) (cached, direct *servertest.API, cachedEnv *testenv.Env) {
	etcd := testenv.StartEtcd(t)
	cachedEnv = testenv.Start(t, append([]testenv.Option{testenv.WithEtcd(etcd)}, opts...)...)
	directEnv := testenv.Start(t, append([]testenv.Option{testenv.WithEtcd(etcd), testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = true })}, opts...)...)
	return servertest.NewAPI(t, cachedEnv), servertest.NewAPI(t, directEnv), cachedEnv
}

// TestCachedPagesMatchEtcd: walks with limit and continue served from the
// watch cache give etcd's pages (items, order, continue tokens,
// remainingItemCount, resourceVersion), with and without selectors, and
// either server continues the other's tokens.
func TestCachedPagesMatchEtcd(t *testing.T) {
	cached, direct, env := cacheAndEtcd(t)
	if r := cached.JSON("POST", "/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"other"}}`); r.Code != 201 {
		t.Fatalf("create namespace: %d %s", r.Code, r.Body)
	}
	for i := range 23 {
		app := []string{"a", "b", "c"}[i%3]
		cached.JSON("POST", servertest.CMs, servertest.CM(fmt.Sprintf("c%02d", i), fmt.Sprintf(`,"labels":{"app":%q}`, app)))
		if i%4 == 0 {
			cached.JSON("POST", "/api/v1/namespaces/other/configmaps", servertest.CM(fmt.Sprintf("o%02d", i), ""))
		}
	}
	for _, path := range []string{
		servertest.CMs + "?limit=4",
		"/api/v1/configmaps?limit=5",
		servertest.CMs + "?limit=3&labelSelector=app%3Da",
		servertest.CMs + "?limit=4&labelSelector=app%21%3Db",
		servertest.CMs + "?limit=7&labelSelector=app%3Dc",    // all seven at once: keys follow, an empty page ends the walk
		servertest.CMs + "?limit=2&labelSelector=app%3Dnone", // one page, nothing selected
		servertest.CMs + "?limit=4&fieldSelector=metadata.name%21%3Dc05",
		"/api/v1/configmaps?limit=6&fieldSelector=metadata.namespace%3Dother",
		servertest.CMs + "?limit=500",
	} {
		t.Run(path, func(t *testing.T) {
			before := server.CachedPages(env.Server)
			fromCache := walk(t, []*servertest.API{cached}, path, "")
			if n := server.CachedPages(env.Server) - before; n != int64(len(fromCache)) {
				t.Fatalf("the cache served %d of %d pages", n, len(fromCache))
			}
			// etcd at the revision the cache's walk read.
			rv := "resourceVersion=" + fromCache[0].RV
			samePages(t, "etcd", walk(t, []*servertest.API{direct}, path, rv), fromCache)
			samePages(t, "cache at that revision", walk(t, []*servertest.API{cached}, path, rv), fromCache)
			// Tokens carry over, both ways.
			samePages(t, "cache then etcd", walk(t, []*servertest.API{cached, direct}, path, rv), fromCache)
			samePages(t, "etcd then cache", walk(t, []*servertest.API{direct, cached}, path, rv), fromCache)
		})
	}
}

// TestCachedPagesSnapshotIsolation: writes between the pages of a walk
// served from the cache do not show in its later pages, as they do not in
// etcd's read at the walk's revision; a new walk sees them.
func TestCachedPagesSnapshotIsolation(t *testing.T) {
	cached, direct, env := cacheAndEtcd(t)
	for i := range 10 {
		cached.JSON("POST", servertest.CMs, servertest.CM(fmt.Sprintf("s%d", i), ""))
	}
	before := server.CachedPages(env.Server)
	p := cached.Page(servertest.CMs + "?limit=3")
	rv := p.RV
	pages := []servertest.ListPage{p}
	// Changes ahead of the walk: a new key, an update, a delete.
	cached.JSON("POST", servertest.CMs, servertest.CM("s4a", ""))
	cached.Do("PATCH", servertest.CMs+"/s6", "application/merge-patch+json", []byte(`{"data":{"k":"changed"}}`))
	cached.Do("DELETE", servertest.CMs+"/s8", "", nil)
	for p.Cont != "" {
		p = cached.Page(servertest.CMs + "?limit=3&continue=" + url.QueryEscape(p.Cont))
		if p.RV != rv {
			t.Fatalf("page at resourceVersion %s, the walk's is %s", p.RV, rv)
		}
		pages = append(pages, p)
	}
	var names []string
	for _, p := range pages {
		for _, it := range p.Items {
			names = append(names, strings.Split(strings.TrimPrefix(it, "default/"), "@")[0])
		}
	}
	if got := strings.Join(names, ","); got != "s0,s1,s2,s3,s4,s5,s6,s7,s8,s9" {
		t.Fatalf("walk = %s, want the objects as they were at %s", got, rv)
	}
	if n := server.CachedPages(env.Server) - before; n != int64(len(pages)) {
		t.Fatalf("the cache served %d of %d pages", n, len(pages))
	}
	samePages(t, "etcd at the walk's revision", walk(t, []*servertest.API{direct}, servertest.CMs+"?limit=3", "resourceVersion="+rv), pages)
	// A new consistent walk sees the writes.
	now := walk(t, []*servertest.API{cached}, servertest.CMs+"?limit=3", "")
	var items int
	for _, p := range now {
		items += len(p.Items)
	}
	if items != 10 || now[0].RV == rv {
		t.Fatalf("new walk: %d items at %s, want 10 at a newer revision than %s", items, now[0].RV, rv)
	}
}

// TestCachedExactRevisionLists: resourceVersionMatch=Exact and a
// resourceVersion with a limit read the cache's snapshot at that revision.
func TestCachedExactRevisionLists(t *testing.T) {
	cached, direct, env := cacheAndEtcd(t)
	var rvs []string
	for i := range 6 {
		rvs = append(rvs, servertest.RVOf(t, cached.JSON("POST", servertest.CMs, servertest.CM(fmt.Sprintf("x%d", i), ""))))
	}
	cached.Do("DELETE", servertest.CMs+"/x1", "", nil)
	cached.Do("PATCH", servertest.CMs+"/x2", "application/merge-patch+json", []byte(`{"data":{"k":"changed"}}`))
	before := server.CachedPages(env.Server)
	served := 0
	for _, rv := range rvs {
		for _, q := range []string{"resourceVersion=" + rv + "&resourceVersionMatch=Exact", "resourceVersion=" + rv + "&limit=2"} {
			got := walk(t, []*servertest.API{cached}, servertest.CMs, q)
			served += len(got)
			samePages(t, q, got, walk(t, []*servertest.API{direct}, servertest.CMs, q))
			if got[0].RV != rv {
				t.Fatalf("%s: resourceVersion %s", q, got[0].RV)
			}
		}
	}
	if n := server.CachedPages(env.Server) - before; n != int64(served) {
		t.Fatalf("the cache served %d of %d pages", n, served)
	}
}

// TestCachedPagesExpire: once the cache's history (and with it the
// snapshot) is gone and etcd has compacted the revision, a continue token
// or an exact list at it is 410 Expired, as etcd answers; the 410 carries
// a token that continues at the latest revision.
func TestCachedPagesExpire(t *testing.T) {
	env := testenv.Start(t, testenv.WithHistory(100*time.Millisecond))
	a := servertest.NewAPI(t, env)
	for i := range 5 {
		a.JSON("POST", servertest.CMs, servertest.CM(fmt.Sprintf("e%d", i), ""))
	}
	first := a.Page(servertest.CMs + "?limit=2")
	deadline := time.Now().Add(20 * time.Second)
	for {
		a.Do("PATCH", servertest.CMs+"/e4", "application/merge-patch+json", []byte(fmt.Sprintf(`{"data":{"t":%q}}`, time.Now())))
		r := a.JSON("GET", servertest.CMs+"?limit=2&continue="+url.QueryEscape(first.Cont), "")
		if r.Code == 410 {
			s := r.Status()
			if s.Reason != metav1.StatusReasonExpired || s.ListMeta.Continue == "" {
				t.Fatalf("expired continue = %s %q continue=%q", s.Reason, s.Message, s.ListMeta.Continue)
			}
			rest := walk(t, []*servertest.API{a}, servertest.CMs+"?limit=2", "continue="+url.QueryEscape(s.ListMeta.Continue))
			if len(rest[0].Items) == 0 || !strings.HasPrefix(rest[0].Items[0], "default/e2@") {
				t.Fatalf("inconsistent continue = %v, want from e2 on", rest)
			}
			break
		}
		if r.Code != 200 {
			t.Fatalf("continue = %d %s", r.Code, servertest.Truncate(r.Body))
		}
		if time.Now().After(deadline) {
			t.Fatalf("continue at %s never expired", first.RV)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := a.JSON("GET", servertest.CMs+"?resourceVersion="+first.RV+"&resourceVersionMatch=Exact", ""); r.Code != 410 || r.Status().Reason != metav1.StatusReasonExpired {
		t.Fatalf("exact list at %s = %d %s, want 410 Expired", first.RV, r.Code, servertest.Truncate(r.Body))
	}
}

// expiredAnswer is what a 410 says: code, reason, message and the
// continue token it carries, decoded (its issue time aside).
func expiredAnswer(t *testing.T, r servertest.Response) string {
	t.Helper()
	s := r.Status()
	tok := ""
	if s.ListMeta.Continue != "" {
		b, err := base64.RawURLEncoding.DecodeString(s.ListMeta.Continue)
		var c struct {
			RV    int64  `json:"rv"`
			Start string `json:"start"`
		}
		if err != nil || json.Unmarshal(b, &c) != nil {
			t.Fatalf("continue %q in %s is not a token (%v)", s.ListMeta.Continue, r.Body, err)
		}
		tok = fmt.Sprintf("%d %q", c.RV, c.Start)
	}
	return fmt.Sprintf("%d %s %s %q continue=%s", r.Code, s.Kind, s.Reason, s.Message, tok)
}

// TestCachedPagesCompacted: once etcd is compacted past a walk's revision
// (here through another client, as another server's compactor would, so
// the server never sees the compaction itself), the server with a watch
// cache drops its snapshots of the compacted revisions within a few
// polls: the walk's continue token and an exact list at its revision get
// the 410 Expired Status that the server reading etcd gives, where they
// were served from the cache before; revisions not compacted are still
// served from the cache.
func TestCachedPagesCompacted(t *testing.T) {
	const poll = 100 * time.Millisecond
	cached, direct, env := cacheAndEtcd(t, testenv.WithServerConfig(func(c *server.Config) { c.WatchCacheCompactionPoll = poll }))
	for i := range 6 {
		cached.JSON("POST", servertest.CMs, servertest.CM(fmt.Sprintf("p%d", i), ""))
	}
	before := server.CachedPages(env.Server)
	first := cached.Page(servertest.CMs + "?limit=2")
	second := cached.Page(servertest.CMs + "?limit=2&continue=" + url.QueryEscape(first.Cont))
	if second.RV != first.RV || second.Cont == "" {
		t.Fatalf("second page %v after %v", second, first)
	}
	if n := server.CachedPages(env.Server) - before; n != 2 {
		t.Fatalf("the cache served %d of 2 pages", n)
	}
	cont := servertest.CMs + "?limit=2&continue=" + url.QueryEscape(second.Cont)
	exact := servertest.CMs + "?resourceVersion=" + first.RV + "&resourceVersionMatch=Exact"
	// Served from the cache's snapshot, writes since or not.
	last := servertest.RVOf(t, cached.Do("PATCH", servertest.CMs+"/p5", "application/merge-patch+json", []byte(`{"data":{"k":"changed"}}`)))
	waitCache(t, env, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, last)
	if r := cached.JSON("GET", cont, ""); r.Code != 200 {
		t.Fatalf("continue before compaction = %d %s", r.Code, servertest.Truncate(r.Body))
	}

	rev, _ := strconv.ParseInt(last, 10, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := servertest.RawStore(t, env).Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{cont, exact} {
		want := direct.JSON("GET", path, "")
		if want.Code != 410 || want.Status().Reason != metav1.StatusReasonExpired {
			t.Fatalf("etcd: GET %s = %d %s, want 410 Expired", path, want.Code, servertest.Truncate(want.Body))
		}
		deadline := time.Now().Add(30 * poll)
		for {
			got := cached.JSON("GET", path, "")
			if got.Code == 410 {
				if g, w := expiredAnswer(t, got), expiredAnswer(t, want); g != w {
					t.Fatalf("GET %s:\n cache %s\n etcd  %s", path, g, w)
				}
				break
			}
			if got.Code != 200 {
				t.Fatalf("GET %s = %d %s", path, got.Code, servertest.Truncate(got.Body))
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s still served from the cache %v after etcd compacted %s", path, 30*poll, first.RV)
			}
			time.Sleep(poll / 5)
		}
	}
	// From the compaction revision on the cache still serves, as etcd.
	before = server.CachedPages(env.Server)
	served := 0
	for _, q := range []string{"resourceVersion=" + last + "&resourceVersionMatch=Exact", "resourceVersion=" + last + "&limit=2"} {
		got := walk(t, []*servertest.API{cached}, servertest.CMs, q)
		served += len(got)
		samePages(t, q, got, walk(t, []*servertest.API{direct}, servertest.CMs, q))
	}
	now := walk(t, []*servertest.API{cached}, servertest.CMs, "limit=2")
	served += len(now)
	samePages(t, "a new walk", now, walk(t, []*servertest.API{direct}, servertest.CMs, "limit=2&resourceVersion="+now[0].RV))
	if n := server.CachedPages(env.Server) - before; n != int64(served) {
		t.Fatalf("after the compaction the cache served %d of %d pages", n, served)
	}
}
