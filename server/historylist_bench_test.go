package server_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/objwatch/objwatch/testenv"
)

// BenchmarkListAsOf compares, on one server, a consistent list of a
// namespace of 10k ConfigMaps (~1 KiB, each updated 10 times) with a list
// of it as of a moment after the fifth of those updates: the past list is
// answered from the history store, every value rebuilt from a whole copy
// and its deltas. Not a test: run with
//
//	go test ./server -run XXX -bench BenchmarkListAsOf -benchtime 5x
func BenchmarkListAsOf(b *testing.B) {
	env := testenv.Start(b, testenv.WithHistoryStore())
	hc := env.HTTPClient()
	base := env.Config.Host
	do := func(method, path, ct string, body []byte) {
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			b.Fatalf("%s %s: %d", method, path, resp.StatusCode)
		}
	}
	do("POST", "/api/v1/namespaces", "application/json", []byte(`{"metadata":{"name":"bench"}}`))
	const objects = 10_000
	fill := bytes.Repeat([]byte("x"), 900)
	parallel := func(fn func(i int)) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range 16 {
			wg.Go(func() {
				for i := range next {
					fn(i)
				}
			})
		}
		for i := range objects {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	cms := "/api/v1/namespaces/bench/configmaps"
	parallel(func(i int) {
		do("POST", cms, "application/json", fmt.Appendf(nil, `{"metadata":{"name":"cm-%05d"},"data":{"fill":%q,"v":"0"}}`, i, fill))
	})
	var asOf time.Time
	for round := 1; round <= 10; round++ {
		parallel(func(i int) {
			do("PATCH", fmt.Sprintf("%s/cm-%05d", cms, i), "application/merge-patch+json", fmt.Appendf(nil, `{"data":{"v":"%d"}}`, round))
		})
		if round == 5 {
			time.Sleep(10 * time.Millisecond)
			asOf = time.Now()
			time.Sleep(10 * time.Millisecond)
		}
	}
	list := func(b *testing.B, query string) {
		for b.Loop() {
			resp, err := hc.Get(base + cms + query)
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || n < objects*900 {
				b.Fatalf("list%s: %d, %d bytes", query, resp.StatusCode, n)
			}
		}
	}
	b.Run("current", func(b *testing.B) { list(b, "") })
	b.Run("asOf", func(b *testing.B) { list(b, "?asOf="+url.QueryEscape(asOf.UTC().Format(time.RFC3339Nano))) })
}
