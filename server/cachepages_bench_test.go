package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// BenchmarkPagedList: consistent lists of ConfigMaps with limit=500 over
// HTTP, served from the watch cache's snapshots ("cache") and by a second
// server on the same etcd with its cache off ("etcd"): one page, and a
// whole walk (continue after continue). The sizes are
// PAGED_BENCH_OBJECTS (default 1000,10000), ConfigMaps of ~1 KiB in one
// namespace.
//
//	PAGED_BENCH_OBJECTS=1000,10000 go test -run '^$' -bench PagedList -benchtime 3x ./server/
func BenchmarkPagedList(b *testing.B) {
	sizes := []int{1000, 10000}
	if s := os.Getenv("PAGED_BENCH_OBJECTS"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatalf("PAGED_BENCH_OBJECTS: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		etcd := testenv.StartEtcd(b)
		cached := testenv.Start(b, testenv.WithEtcd(etcd))
		direct := testenv.Start(b, testenv.WithEtcd(etcd), testenv.WithServerConfig(func(c *server.Config) { c.DisableWatchCache = true }))
		createPaddedConfigMaps(b, cached, n)
		// The cache has caught up with the load before anything is timed.
		for _, env := range []*testenv.Env{cached, direct} {
			listPage500(b, env.HTTPClient(), env.Config.Host+servertest.CMs+"?limit=500")
		}
		for _, t := range []struct {
			name string
			env  *testenv.Env
		}{{"cache", cached}, {"etcd", direct}} {
			hc, h := t.env.HTTPClient(), t.env.Config.Host
			b.Run(fmt.Sprintf("objects=%d/%s/page", n, t.name), func(b *testing.B) {
				for b.Loop() {
					if got, _ := listPage500(b, hc, h+servertest.CMs+"?limit=500"); got != 500 {
						b.Fatalf("page has %d items", got)
					}
				}
			})
			b.Run(fmt.Sprintf("objects=%d/%s/walk", n, t.name), func(b *testing.B) {
				before := server.CachedPages(cached.Server)
				pages := 0
				for b.Loop() {
					seen, cont := 0, ""
					for {
						q := h + servertest.CMs + "?limit=500"
						if cont != "" {
							q += "&continue=" + url.QueryEscape(cont)
						}
						got, next := listPage500(b, hc, q)
						seen, cont = seen+got, next
						pages++
						if cont == "" {
							break
						}
					}
					if seen != n {
						b.Fatalf("walk saw %d, want %d", seen, n)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(pages)/1e3, "ms/page")
				if served := server.CachedPages(cached.Server) - before; t.name == "cache" && served != int64(pages) {
					b.Fatalf("the cache served %d of %d pages", served, pages)
				}
			})
		}
		direct.Stop()
		cached.Stop()
	}
}

// listPage500 GETs one page: its item count and continue token.
func listPage500(b *testing.B, c *http.Client, u string) (int, string) {
	code, body := servertest.RawJSON(b, c, u, "GET", "")
	if code != http.StatusOK {
		b.Fatalf("GET %s = %d %s", u, code, servertest.Truncate(body))
	}
	var l struct {
		Metadata struct {
			Continue string `json:"continue"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		b.Fatal(err)
	}
	return len(l.Items), l.Metadata.Continue
}
