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
	"github.com/objwatch/objwatch/testenv"
)

// listPage is what a page of a list says, tokens decoded: two servers
// give the same page when these are equal (the token's issue time aside).
type listPage struct {
	RV        string
	Items     []string // name@resourceVersion
	ContRV    int64
	ContStart string
	Remaining int64 // -1: none
	cont      string
}

func (a *api) page(path string) listPage {
	a.t.Helper()
	r := a.json("GET", path, "")
	if r.code != 200 {
		a.t.Fatalf("GET %s = %d %s", path, r.code, truncate(r.body))
	}
	var l struct {
		Metadata metav1.ListMeta `json:"metadata"`
		Items    []struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(r.body, &l); err != nil {
		a.t.Fatalf("GET %s: %v", path, err)
	}
	p := listPage{RV: l.Metadata.ResourceVersion, Remaining: -1, cont: l.Metadata.Continue}
	for _, it := range l.Items {
		p.Items = append(p.Items, it.Metadata.Namespace+"/"+it.Metadata.Name+"@"+it.Metadata.ResourceVersion)
	}
	if l.Metadata.RemainingItemCount != nil {
		p.Remaining = *l.Metadata.RemainingItemCount
	}
	if p.cont != "" {
		b, err := base64.RawURLEncoding.DecodeString(p.cont)
		var tok struct {
			V     string `json:"v"`
			RV    int64  `json:"rv"`
			Start string `json:"start"`
		}
		if err != nil || json.Unmarshal(b, &tok) != nil || tok.V != "meta.k8s.io/v1" {
			a.t.Fatalf("GET %s: continue %q is not Kubernetes' token (%v)", path, p.cont, err)
		}
		p.ContRV, p.ContStart = tok.RV, tok.Start
	}
	return p
}

func (p listPage) String() string {
	return fmt.Sprintf("rv=%s continue=(%d %q) remaining=%d items=%v", p.RV, p.ContRV, p.ContStart, p.Remaining, p.Items)
}

func withQuery(path, q string) string {
	if strings.Contains(path, "?") {
		return path + "&" + q
	}
	return path + "?" + q
}

// walk lists path page by page, each page from the server whose turn it
// is (servers[i % len]), starting at first (a query to add, or "").
func walk(t *testing.T, servers []*api, path, first string) []listPage {
	t.Helper()
	var pages []listPage
	p := servers[0].page(withQuery(path, first))
	for i := 1; ; i++ {
		pages = append(pages, p)
		if p.cont == "" {
			return pages
		}
		if i > 100 {
			t.Fatalf("%s: walk does not end", path)
		}
		p = servers[i%len(servers)].page(withQuery(path, "continue="+url.QueryEscape(p.cont)))
	}
}

func samePages(t *testing.T, what string, got, want []listPage) {
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
func cacheAndEtcd(t *testing.T, opts ...testenv.Option) (cached, direct *api, cachedEnv *testenv.Env) {
	etcd := testenv.StartEtcd(t)
	cachedEnv = testenv.Start(t, append([]testenv.Option{testenv.WithEtcd(etcd)}, opts...)...)
	directEnv := testenv.Start(t, append([]testenv.Option{testenv.WithEtcd(etcd), testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = true })}, opts...)...)
	return newAPI(t, cachedEnv), newAPI(t, directEnv), cachedEnv
}

// TestCachedPagesMatchEtcd: walks with limit and continue served from the
// watch cache give etcd's pages (items, order, continue tokens,
// remainingItemCount, resourceVersion), with and without selectors, and
// either server continues the other's tokens.
func TestCachedPagesMatchEtcd(t *testing.T) {
	cached, direct, env := cacheAndEtcd(t)
	if r := cached.json("POST", "/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"other"}}`); r.code != 201 {
		t.Fatalf("create namespace: %d %s", r.code, r.body)
	}
	for i := range 23 {
		app := []string{"a", "b", "c"}[i%3]
		cached.json("POST", cms, cm(fmt.Sprintf("c%02d", i), fmt.Sprintf(`,"labels":{"app":%q}`, app)))
		if i%4 == 0 {
			cached.json("POST", "/api/v1/namespaces/other/configmaps", cm(fmt.Sprintf("o%02d", i), ""))
		}
	}
	for _, path := range []string{
		cms + "?limit=4",
		"/api/v1/configmaps?limit=5",
		cms + "?limit=3&labelSelector=app%3Da",
		cms + "?limit=4&labelSelector=app%21%3Db",
		cms + "?limit=7&labelSelector=app%3Dc",    // all seven at once: keys follow, an empty page ends the walk
		cms + "?limit=2&labelSelector=app%3Dnone", // one page, nothing selected
		cms + "?limit=4&fieldSelector=metadata.name%21%3Dc05",
		"/api/v1/configmaps?limit=6&fieldSelector=metadata.namespace%3Dother",
		cms + "?limit=500",
	} {
		t.Run(path, func(t *testing.T) {
			before := server.CachedPages(env.Server)
			fromCache := walk(t, []*api{cached}, path, "")
			if n := server.CachedPages(env.Server) - before; n != int64(len(fromCache)) {
				t.Fatalf("the cache served %d of %d pages", n, len(fromCache))
			}
			// etcd at the revision the cache's walk read.
			rv := "resourceVersion=" + fromCache[0].RV
			samePages(t, "etcd", walk(t, []*api{direct}, path, rv), fromCache)
			samePages(t, "cache at that revision", walk(t, []*api{cached}, path, rv), fromCache)
			// Tokens carry over, both ways.
			samePages(t, "cache then etcd", walk(t, []*api{cached, direct}, path, rv), fromCache)
			samePages(t, "etcd then cache", walk(t, []*api{direct, cached}, path, rv), fromCache)
		})
	}
}

// TestCachedPagesSnapshotIsolation: writes between the pages of a walk
// served from the cache do not show in its later pages, as they do not in
// etcd's read at the walk's revision; a new walk sees them.
func TestCachedPagesSnapshotIsolation(t *testing.T) {
	cached, direct, env := cacheAndEtcd(t)
	for i := range 10 {
		cached.json("POST", cms, cm(fmt.Sprintf("s%d", i), ""))
	}
	before := server.CachedPages(env.Server)
	p := cached.page(cms + "?limit=3")
	rv := p.RV
	pages := []listPage{p}
	// Changes ahead of the walk: a new key, an update, a delete.
	cached.json("POST", cms, cm("s4a", ""))
	cached.do("PATCH", cms+"/s6", "application/merge-patch+json", []byte(`{"data":{"k":"changed"}}`))
	cached.do("DELETE", cms+"/s8", "", nil)
	for p.cont != "" {
		p = cached.page(cms + "?limit=3&continue=" + url.QueryEscape(p.cont))
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
	samePages(t, "etcd at the walk's revision", walk(t, []*api{direct}, cms+"?limit=3", "resourceVersion="+rv), pages)
	// A new consistent walk sees the writes.
	now := walk(t, []*api{cached}, cms+"?limit=3", "")
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
		rvs = append(rvs, rvOf(t, cached.json("POST", cms, cm(fmt.Sprintf("x%d", i), ""))))
	}
	cached.do("DELETE", cms+"/x1", "", nil)
	cached.do("PATCH", cms+"/x2", "application/merge-patch+json", []byte(`{"data":{"k":"changed"}}`))
	before := server.CachedPages(env.Server)
	served := 0
	for _, rv := range rvs {
		for _, q := range []string{"resourceVersion=" + rv + "&resourceVersionMatch=Exact", "resourceVersion=" + rv + "&limit=2"} {
			got := walk(t, []*api{cached}, cms, q)
			served += len(got)
			samePages(t, q, got, walk(t, []*api{direct}, cms, q))
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
	a := newAPI(t, env)
	for i := range 5 {
		a.json("POST", cms, cm(fmt.Sprintf("e%d", i), ""))
	}
	first := a.page(cms + "?limit=2")
	deadline := time.Now().Add(20 * time.Second)
	for {
		a.do("PATCH", cms+"/e4", "application/merge-patch+json", []byte(fmt.Sprintf(`{"data":{"t":%q}}`, time.Now())))
		r := a.json("GET", cms+"?limit=2&continue="+url.QueryEscape(first.cont), "")
		if r.code == 410 {
			s := r.status()
			if s.Reason != metav1.StatusReasonExpired || s.ListMeta.Continue == "" {
				t.Fatalf("expired continue = %s %q continue=%q", s.Reason, s.Message, s.ListMeta.Continue)
			}
			rest := walk(t, []*api{a}, cms+"?limit=2", "continue="+url.QueryEscape(s.ListMeta.Continue))
			if len(rest[0].Items) == 0 || !strings.HasPrefix(rest[0].Items[0], "default/e2@") {
				t.Fatalf("inconsistent continue = %v, want from e2 on", rest)
			}
			break
		}
		if r.code != 200 {
			t.Fatalf("continue = %d %s", r.code, truncate(r.body))
		}
		if time.Now().After(deadline) {
			t.Fatalf("continue at %s never expired", first.RV)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := a.json("GET", cms+"?resourceVersion="+first.RV+"&resourceVersionMatch=Exact", ""); r.code != 410 || r.status().Reason != metav1.StatusReasonExpired {
		t.Fatalf("exact list at %s = %d %s, want 410 Expired", first.RV, r.code, truncate(r.body))
	}
}

// expiredAnswer is what a 410 says: code, reason, message and the
// continue token it carries, decoded (its issue time aside).
func expiredAnswer(t *testing.T, r response) string {
	t.Helper()
	s := r.status()
	tok := ""
	if s.ListMeta.Continue != "" {
		b, err := base64.RawURLEncoding.DecodeString(s.ListMeta.Continue)
		var c struct {
			RV    int64  `json:"rv"`
			Start string `json:"start"`
		}
		if err != nil || json.Unmarshal(b, &c) != nil {
			t.Fatalf("continue %q in %s is not a token (%v)", s.ListMeta.Continue, r.body, err)
		}
		tok = fmt.Sprintf("%d %q", c.RV, c.Start)
	}
	return fmt.Sprintf("%d %s %s %q continue=%s", r.code, s.Kind, s.Reason, s.Message, tok)
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
		cached.json("POST", cms, cm(fmt.Sprintf("p%d", i), ""))
	}
	before := server.CachedPages(env.Server)
	first := cached.page(cms + "?limit=2")
	second := cached.page(cms + "?limit=2&continue=" + url.QueryEscape(first.cont))
	if second.RV != first.RV || second.cont == "" {
		t.Fatalf("second page %v after %v", second, first)
	}
	if n := server.CachedPages(env.Server) - before; n != 2 {
		t.Fatalf("the cache served %d of 2 pages", n)
	}
	cont := cms + "?limit=2&continue=" + url.QueryEscape(second.cont)
	exact := cms + "?resourceVersion=" + first.RV + "&resourceVersionMatch=Exact"
	// Served from the cache's snapshot, writes since or not.
	last := rvOf(t, cached.do("PATCH", cms+"/p5", "application/merge-patch+json", []byte(`{"data":{"k":"changed"}}`)))
	waitCache(t, env, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, last)
	if r := cached.json("GET", cont, ""); r.code != 200 {
		t.Fatalf("continue before compaction = %d %s", r.code, truncate(r.body))
	}

	rev, _ := strconv.ParseInt(last, 10, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rawStore(t, env).Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{cont, exact} {
		want := direct.json("GET", path, "")
		if want.code != 410 || want.status().Reason != metav1.StatusReasonExpired {
			t.Fatalf("etcd: GET %s = %d %s, want 410 Expired", path, want.code, truncate(want.body))
		}
		deadline := time.Now().Add(30 * poll)
		for {
			got := cached.json("GET", path, "")
			if got.code == 410 {
				if g, w := expiredAnswer(t, got), expiredAnswer(t, want); g != w {
					t.Fatalf("GET %s:\n cache %s\n etcd  %s", path, g, w)
				}
				break
			}
			if got.code != 200 {
				t.Fatalf("GET %s = %d %s", path, got.code, truncate(got.body))
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
		got := walk(t, []*api{cached}, cms, q)
		served += len(got)
		samePages(t, q, got, walk(t, []*api{direct}, cms, q))
	}
	now := walk(t, []*api{cached}, cms, "limit=2")
	served += len(now)
	samePages(t, "a new walk", now, walk(t, []*api{direct}, cms, "limit=2&resourceVersion="+now[0].RV))
	if n := server.CachedPages(env.Server) - before; n != int64(served) {
		t.Fatalf("after the compaction the cache served %d of %d pages", n, served)
	}
}
