package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/servertest"
	"github.com/objwatch/objwatch/testenv"
)

// cutProxy is a TCP proxy to etcd that can be cut (listener and every
// connection closed, as when the network to etcd fails) and restored on
// the same address.
type cutProxy struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	p := &cutProxy{t: t, target: target, conns: map[net.Conn]struct{}{}}
	p.listen("127.0.0.1:0")
	t.Cleanup(func() { p.cut(); p.wg.Wait() })
	return p
}

func (p *cutProxy) listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln { // cut meanwhile
				p.mu.Unlock()
				c.Close()
				u.Close()
				return
			}
			p.conns[c], p.conns[u] = struct{}{}, struct{}{}
			p.mu.Unlock()
			p.wg.Go(func() { io.Copy(u, c); u.Close(); c.Close() })
			p.wg.Go(func() { io.Copy(c, u); c.Close(); u.Close() })
		}
	})
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *cutProxy) restore() { p.listen(p.addr) }

// watchEvent is one decoded watch line.
type watchLine struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// TestLosingEtcd: a server whose etcd goes away says so. /readyz answers
// 503 within the probe bound, its open watches end with an ERROR event
// (503 ServiceUnavailable naming etcd), new watches and consistent reads
// get 503, while lists at resourceVersion=0 are still served from the
// watch cache. Once etcd is back the server is ready again, and a watch
// resumed from the last resourceVersion it sent sees every change made
// meanwhile through another server.
func TestLosingEtcd(t *testing.T) {
	for _, cached := range []bool{true, false} {
		t.Run(fmt.Sprintf("cache=%v", cached), func(t *testing.T) {
			t.Parallel()
			etcd := testenv.StartEtcd(t)
			u, err := url.Parse(etcd)
			if err != nil {
				t.Fatal(err)
			}
			proxy := newCutProxy(t, u.Host)
			envA := testenv.Start(t, testenv.WithEtcd("http://"+proxy.addr), testenv.WithServerConfig(func(c *server.Config) {
				c.StorageProbeInterval, c.StorageUnhealthyAfter = 200*time.Millisecond, time.Second
				c.DisableWatchCache = !cached
			}))
			envB := testenv.Start(t, testenv.WithEtcd(etcd))
			a, b := servertest.NewAPI(t, envA), servertest.NewAPI(t, envB)
			if r := a.JSON("GET", "/readyz", ""); r.Code != 200 {
				t.Fatalf("/readyz = %d %s before the cut", r.Code, r.Body)
			}
			start := servertest.RVOf(t, b.JSON("GET", servertest.CMs, ""))
			resp, err := a.C.Get(a.Host + servertest.CMs + "?watch=true&allowWatchBookmarks=true&resourceVersion=" + start)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			lines := bufio.NewScanner(resp.Body)
			next := func() watchLine {
				t.Helper()
				if !lines.Scan() {
					t.Fatalf("watch on A ended: %v", lines.Err())
				}
				var l watchLine
				if err := json.Unmarshal(lines.Bytes(), &l); err != nil {
					t.Fatal(err)
				}
				return l
			}
			last := servertest.RVOf(t, b.JSON("POST", servertest.CMs, servertest.CM("before", "")))
			if l := next(); l.Type != "ADDED" {
				t.Fatalf("watch on A: %s %s, want ADDED before", l.Type, l.Object)
			}

			proxy.cut()
			cutAt := time.Now()
			for {
				r := a.JSON("GET", "/readyz", "")
				if r.Code == 503 {
					if !strings.Contains(string(r.Body), "storage unavailable") {
						t.Errorf("/readyz body %q, want the reason", r.Body)
					}
					break
				}
				if time.Since(cutAt) > 3*time.Second {
					t.Fatalf("/readyz still %d %s 3 s after etcd was cut", r.Code, r.Body)
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("/readyz not ready %v after the cut", time.Since(cutAt).Round(time.Millisecond))
			for {
				l := next()
				if l.Type == "BOOKMARK" {
					continue
				}
				var st metav1.Status
				json.Unmarshal(l.Object, &st)
				if l.Type != "ERROR" || st.Code != 503 || st.Reason != metav1.StatusReasonServiceUnavailable || !strings.Contains(st.Message, "etcd unavailable") {
					t.Fatalf("open watch on A after the cut: %s %s, want ERROR 503 ServiceUnavailable naming etcd", l.Type, l.Object)
				}
				break
			}
			if lines.Scan() {
				t.Errorf("watch went on after its ERROR event: %s", lines.Text())
			}
			for _, q := range []string{"?watch=true&resourceVersion=" + last, "?watch=true", ""} {
				r := a.JSON("GET", servertest.CMs+q, "")
				if s := r.Status(); r.Code != 503 || s.Reason != metav1.StatusReasonServiceUnavailable || r.Header.Get("Retry-After") == "" {
					t.Errorf("GET %s on A without etcd = %d %s, want 503 ServiceUnavailable with Retry-After", q, r.Code, r.Body)
				}
			}
			if r := a.JSON("POST", servertest.CMs, servertest.CM("refused", "")); r.Code != 503 {
				t.Errorf("POST on A without etcd = %d %s, want 503", r.Code, r.Body)
			}
			if cached {
				if r := a.JSON("GET", servertest.CMs+"?resourceVersion=0", ""); r.Code != 200 {
					t.Errorf("list at resourceVersion=0 on A without etcd = %d %s, want 200 from the watch cache", r.Code, r.Body)
				}
			}

			// Changes through B while A is cut off.
			var want []string
			for i := range 5 {
				r := b.JSON("POST", servertest.CMs, servertest.CM(fmt.Sprintf("during-%d", i), ""))
				want = append(want, "ADDED during-"+fmt.Sprint(i)+" "+servertest.RVOf(t, r))
			}
			r := b.JSON("DELETE", servertest.CMs+"/before", "")
			if r.Code != 200 {
				t.Fatalf("DELETE on B = %d %s", r.Code, r.Body)
			}

			proxy.restore()
			backAt := time.Now()
			for a.JSON("GET", "/readyz", "").Code != 200 {
				if time.Since(backAt) > 10*time.Second {
					t.Fatalf("/readyz not 200 10 s after etcd came back")
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("/readyz ready %v after etcd came back", time.Since(backAt).Round(time.Millisecond))
			want = append(want, "DELETED before")

			// A watch resumed on A from the last event it sent.
			var got []string
			for time.Since(backAt) < 10*time.Second && len(got) < len(want) {
				got = got[:0]
				resp, err := a.C.Get(a.Host + servertest.CMs + "?watch=true&timeoutSeconds=1&resourceVersion=" + last)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != 200 {
					resp.Body.Close()
					time.Sleep(50 * time.Millisecond)
					continue
				}
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					var l struct {
						Type   string
						Object metav1.PartialObjectMetadata
					}
					json.Unmarshal(sc.Bytes(), &l)
					if l.Type == "ERROR" {
						break
					}
					s := l.Type + " " + l.Object.Name
					if l.Type == "ADDED" {
						s += " " + l.Object.ResourceVersion
					}
					got = append(got, s)
					if len(got) == len(want) {
						break
					}
				}
				resp.Body.Close()
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("watch on A resumed from %s after etcd came back:\n got %v\nwant %v", last, got, want)
			}
		})
	}
}
