package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// ErrStalled is wrapped by the error of a watch that received nothing for
// Config.StallTimeout.
var ErrStalled = errors.New("watch stalled: no data from the server")

// Defaults of Config.StallTimeout and AttemptTimeout.
const (
	defaultStallTimeout   = 2 * time.Minute
	defaultAttemptTimeout = 70 * time.Second
)

// Backoff of a failed server: it is skipped for failedFor, doubling with
// each consecutive failure up to failedForMax, while another server is not
// skipped. Variables for tests.
var (
	failedFor    = time.Second
	failedForMax = 30 * time.Second
)

// servers is the list of a REST's servers and which one requests go to.
// Requests stick to the current server until it fails; a failure moves
// the current one to the next server in the list that is not backing off
// (after a failure, a server backs off for failedFor, doubled with each
// consecutive failure). It is safe for concurrent use.
type servers struct {
	urls      []*url.URL
	failovers atomic.Uint64

	mu    sync.Mutex
	cur   int
	fails []int       // consecutive failures, per server
	until []time.Time // end of the backoff, per server
}

func newServers(urls []*url.URL) *servers {
	return &servers{urls: urls, fails: make([]int, len(urls)), until: make([]time.Time, len(urls))}
}

// pick returns the server for the next attempt: the current one unless it
// is backing off and another is not, skipping those in tried.
func (s *servers) pick(tried []bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	best := -1
	for k := range s.urls {
		i := (s.cur + k) % len(s.urls)
		if tried != nil && tried[i] {
			continue
		}
		if !now.Before(s.until[i]) {
			return i
		}
		if best < 0 || s.until[i].Before(s.until[best]) {
			best = i
		}
	}
	if best < 0 {
		return s.cur
	}
	return best // every server is backing off: the one closest to its end
}

// failed records a failure of server i. If i is the current server, the
// next one that is not backing off becomes current (a failover).
func (s *servers) failed(i int) {
	if len(s.urls) == 1 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fails[i]++
	d := failedFor << min(s.fails[i]-1, 10)
	s.until[i] = time.Now().Add(min(d, failedForMax))
	if i != s.cur {
		return
	}
	now := time.Now()
	for k := 1; k < len(s.urls); k++ {
		if j := (i + k) % len(s.urls); !now.Before(s.until[j]) {
			s.cur = j
			s.failovers.Add(1)
			return
		}
	}
	s.cur = (i + 1) % len(s.urls)
	s.failovers.Add(1)
}

// succeeded records that server i answered: it stops backing off and,
// as the server that answered last, becomes current.
func (s *servers) succeeded(i int) {
	if len(s.urls) == 1 {
		return
	}
	s.mu.Lock()
	s.fails[i], s.until[i] = 0, time.Time{}
	s.cur = i
	s.mu.Unlock()
}

// Server returns the base URL requests go to now: the one that answered
// last, unless it has failed since.
func (r *REST) Server() string {
	r.servers.mu.Lock()
	defer r.servers.mu.Unlock()
	return r.servers.urls[r.servers.cur].String()
}

// Servers returns the base URLs of Config.Host and Hosts, in order.
func (r *REST) Servers() []string {
	out := make([]string, len(r.servers.urls))
	for i, u := range r.servers.urls {
		out[i] = u.String()
	}
	return out
}

// Failovers counts the times requests moved from a failed server to
// another.
func (r *REST) Failovers() uint64 { return r.servers.failovers.Load() }

// idempotent reports whether a request with this method may be sent again
// after it may have been processed.
func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return false
}

// failoverStatus reports whether an answer with this status code means its
// server cannot serve now (so the next request goes elsewhere), and
// whether the request surely was not processed (so any method may be sent
// to another server).
//
// 503 is a server refusing before it processes anything (not ready,
// storage unavailable, overloaded; a proxy with no backend); 502 and 504 a
// proxy or the server itself giving up, possibly after the request was
// processed. 500 is not a server's health: it is how API servers report a
// failure of the request itself (a webhook or conversion error, a bug),
// which another server would repeat; a server whose storage is lost
// answers 503 within its probe bound.
func failoverStatus(code int) (failover, unprocessed bool) {
	switch code {
	case http.StatusServiceUnavailable:
		return true, true
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return true, false
	}
	return false, false
}

// attempt is one try of a request on one server: its context, which the
// attempt timeout or the stall detector cancel, and what was written.
type attempt struct {
	server  int
	parent  context.Context // the request's: its end is not the server's failure
	cancel  context.CancelFunc
	timer   *time.Timer // the attempt or stall timeout
	expired atomic.Bool // the timer fired
	wrote   atomic.Bool // request headers were written
}

func (a *attempt) stop() {
	if a.timer != nil {
		a.timer.Stop()
	}
	a.cancel()
}

// body is a response body that reports its server's failures: a read
// error other than EOF (a reset, a stall) marks the server failed. For a
// watch with bookmarks it also detects stalls: no byte for stall cancels
// the attempt, and the read returns ErrStalled.
type body struct {
	io.ReadCloser
	r       *REST
	a       *attempt
	stall   time.Duration // 0: none
	last    atomic.Int64  // unix nanoseconds of the last byte
	closed  atomic.Bool
	reports sync.Once
}

func (r *REST) wrapBody(resp *http.Response, a *attempt, stall time.Duration) {
	b := &body{ReadCloser: resp.Body, r: r, a: a, stall: stall}
	if stall > 0 {
		b.last.Store(time.Now().UnixNano())
		a.timer = time.AfterFunc(stall, b.check)
	}
	resp.Body = b
}

// check runs when the stall timer fires: it cancels the attempt if nothing
// arrived for stall, else re-arms the timer for the rest.
func (b *body) check() {
	idle := time.Since(time.Unix(0, b.last.Load()))
	if idle < b.stall {
		b.a.timer.Reset(b.stall - idle)
		return
	}
	b.a.expired.Store(true)
	b.a.cancel()
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && b.stall > 0 {
		b.last.Store(time.Now().UnixNano())
	}
	if err != nil && err != io.EOF && !b.closed.Load() && b.a.parent.Err() == nil {
		if b.a.expired.Load() {
			err = fmt.Errorf("%w for %v (%s)", ErrStalled, b.stall, b.r.servers.urls[b.a.server].Redacted())
		}
		b.failed()
	}
	return n, err
}

// failed marks the body's server failed, once.
func (b *body) failed() { b.reports.Do(func() { b.r.servers.failed(b.a.server) }) }

func (b *body) Close() error {
	b.closed.Store(true)
	err := b.ReadCloser.Close()
	b.a.stop()
	return err
}

// serverFailed reports a failure the server announced inside a response
// (a watch's ERROR event with a 5xx Status) on resp's server.
func serverFailed(resp *http.Response) {
	if b, ok := resp.Body.(*body); ok {
		b.failed()
	}
}
