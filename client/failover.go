package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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
// skipped. Requests go back to the preferred server no sooner than
// failbackDelay after they left it. Variables for tests.
var (
	failedFor     = time.Second
	failedForMax  = 30 * time.Second
	failbackDelay = 30 * time.Second
)

// servers is the list of a REST's servers and which one requests go to.
// Requests stick to the current server until it fails; a failure moves
// the current one to the next server in the list that is not backing off
// (after a failure, a server backs off for failedFor, doubled with each
// consecutive failure up to failedForMax). It is safe for concurrent use.
//
// The first server is the preferred one (Config.Host: clients of one
// cluster spread their load by preferring different servers), and
// requests return to it after a failover away from it (a failback): once
// its backoff has ended and at least failbackDelay has passed since
// requests left it (plus up to half of it more, at random, drawn each
// time they leave: clients that a server's crash moved together do not
// all come back at the same moment), the next attempt goes to it as a
// probe, one at a time, while the others stay on the current server. A
// probe that is answered makes the preferred server current again; one
// that fails (unanswered, a 502, 503 or 504, or cut off by its caller's
// deadline before an answer) doubles its backoff, so a preferred server
// that stays down is tried at most once per backoff, and the
// request moves on as after any failure (see REST.do: a write only when it
// surely was not processed). The delay is a minimum time away, not the
// backoff alone, because a server back from a crash or restart is often
// unstable for a while (a restart loop, caches still loading), and each
// move away from a server costs its callers: writes whose answers are
// lost are errors, and watches end and resume. With the delay, a
// flapping preferred server draws a client back at most once per
// failbackDelay. Running requests and watches are never cut to move: only
// new attempts go to the preferred server.
//
// An answer moves requests only to the preferred server or away from a
// current one that failed, never from a working current one, so requests
// still running on the server they failed over to do not undo a
// failback; and an answer to an attempt sent before its server's latest
// failure is stale and changes nothing.
type servers struct {
	urls      []*url.URL
	failovers atomic.Uint64
	failbacks atomic.Uint64

	mu      sync.Mutex
	cur     int
	fails   []int       // consecutive failures, per server
	until   []time.Time // end of the backoff, per server
	gen     []uint64    // failures ever, per server: an answer to an attempt older than a failure is stale
	left    time.Time   // when requests last moved away from the preferred server
	spread  float64     // the failback delay's random part, a fraction of it in [0, 0.5)
	probing bool        // a failback probe is in flight
}

// choice is the server pick chose for one attempt.
type choice struct {
	server int
	gen    uint64 // the server's gen when chosen
	probe  bool   // a failback probe of the preferred server
}

func newServers(urls []*url.URL) *servers {
	return &servers{urls: urls, fails: make([]int, len(urls)), until: make([]time.Time, len(urls)), gen: make([]uint64, len(urls))}
}

// pick returns the server for the next attempt: the preferred one as a
// failback probe when one is due, else the current one unless it is
// backing off and another is not, skipping those in tried. The caller
// reports the outcome with succeeded, failed or release.
func (s *servers) pick(tried []bool) choice {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.cur != 0 && !s.probing && (tried == nil || !tried[0]) &&
		!now.Before(s.until[0]) && !now.Before(s.left.Add(failbackDelay+time.Duration(s.spread*float64(failbackDelay)))) {
		s.probing = true
		return choice{server: 0, gen: s.gen[0], probe: true}
	}
	best := -1
	for k := range s.urls {
		i := (s.cur + k) % len(s.urls)
		if tried != nil && tried[i] {
			continue
		}
		if !now.Before(s.until[i]) {
			return choice{server: i, gen: s.gen[i]}
		}
		if best < 0 || s.until[i].Before(s.until[best]) {
			best = i
		}
	}
	if best < 0 {
		best = s.cur
	}
	return choice{server: best, gen: s.gen[best]} // every server is backing off: the one closest to its end
}

// setCur makes server i current.
func (s *servers) setCur(i int, now time.Time) {
	if s.cur == 0 && i != 0 {
		s.left, s.spread = now, rand.Float64()/2
	}
	s.cur = i
}

// failed records a failure of server i. If i is the current server, the
// next one that is not backing off becomes current (a failover). A
// failure of the preferred server ends a failback probe of it.
func (s *servers) failed(i int) {
	if len(s.urls) == 1 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.fails[i]++
	s.gen[i]++
	d := failedFor << min(s.fails[i]-1, 10)
	s.until[i] = now.Add(min(d, failedForMax))
	if i == 0 {
		s.probing = false
	}
	if i != s.cur {
		return
	}
	for k := 1; k < len(s.urls); k++ {
		if j := (i + k) % len(s.urls); !now.Before(s.until[j]) {
			s.setCur(j, now)
			s.failovers.Add(1)
			return
		}
	}
	s.setCur((i+1)%len(s.urls), now)
	s.failovers.Add(1)
}

// succeeded records that the server of c answered: it stops backing off
// and becomes current if it is the preferred server (a failback, when
// another was current) or the current one has failed since. An answer to
// an attempt sent before the server's latest failure is stale and
// changes nothing (but ends c's probe).
func (s *servers) succeeded(c choice) {
	if len(s.urls) == 1 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.probe {
		s.probing = false
	}
	i := c.server
	if c.gen != s.gen[i] {
		return
	}
	s.fails[i], s.until[i] = 0, time.Time{}
	switch {
	case i == s.cur:
	case i == 0:
		s.setCur(0, time.Now())
		s.failbacks.Add(1)
	case time.Now().Before(s.until[s.cur]):
		s.setCur(i, time.Now())
	}
}

// release records that the attempt of c got no verdict on its server (it
// was not sent, or the server answered something that says nothing of
// its health), ending c's probe.
func (s *servers) release(c choice) {
	if !c.probe {
		return
	}
	s.mu.Lock()
	s.probing = false
	s.mu.Unlock()
}

// Server returns the base URL requests go to now: the preferred one
// (Config.Host) unless it failed and has not answered a failback probe
// since, else the one requests failed over to.
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

// Failbacks counts the times requests moved back to the preferred server
// (Config.Host) after a failover, when it answered again.
func (r *REST) Failbacks() uint64 { return r.servers.failbacks.Load() }

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
