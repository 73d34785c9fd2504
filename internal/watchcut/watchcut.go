// Package watchcut breaks watches on purpose, for tests and benchmarks of
// watch clients: a Cutter wraps a client's transport (a WrapTransport for
// objwatch's client and client-go alike), closes its open watches on
// demand, holds new ones back (so that the server's compaction overtakes
// them and they get 410 Gone), and pauses their reading (so that the
// server's sends back up). Other requests pass through untouched.
package watchcut

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Cutter is safe for concurrent use.
type Cutter struct {
	// RejectStreaming makes streaming-list watches (sendInitialEvents)
	// fail with 400, as from a server without the feature.
	RejectStreaming atomic.Bool
	// Watches counts watch requests, Streaming those that were streaming
	// lists, Cuts the calls to Cut.
	Watches, Streaming, Cuts atomic.Int64

	mu        sync.Mutex
	open      map[*body]struct{}
	hold      chan struct{} // non-nil while new watches wait for Release
	holdUntil time.Time     // new watches wait until then
	gate      chan struct{} // non-nil while reads of open watches are paused
}

// New returns a Cutter that lets everything through.
func New() *Cutter { return &Cutter{open: map[*body]struct{}{}} }

// Wrap is a WrapTransport.
func (c *Cutter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) { return c.roundTrip(rt, req) })
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (c *Cutter) roundTrip(next http.RoundTripper, req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	if w := q.Get("watch"); w != "true" && w != "1" {
		return next.RoundTrip(req)
	}
	c.Watches.Add(1)
	if q.Get("sendInitialEvents") == "true" {
		c.Streaming.Add(1)
		if c.RejectStreaming.Load() {
			body := `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400,` +
				`"message":"resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"}`
			return &http.Response{StatusCode: 400, Status: "400 Bad Request", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
		}
	}
	if err := c.wait(req); err != nil {
		return nil, err
	}
	resp, err := next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	b := &body{ReadCloser: resp.Body, c: c}
	c.mu.Lock()
	c.open[b] = struct{}{}
	c.mu.Unlock()
	resp.Body = b
	return resp, nil
}

// wait holds a new watch back while Cut says so.
func (c *Cutter) wait(req *http.Request) error {
	c.mu.Lock()
	hold, until := c.hold, time.Until(c.holdUntil)
	c.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-req.Context().Done():
			return req.Context().Err()
		}
	}
	if until > 0 {
		t := time.NewTimer(until)
		defer t.Stop()
		select {
		case <-t.C:
		case <-req.Context().Done():
			return req.Context().Err()
		}
	}
	return nil
}

// Cut closes every open watch and holds new ones back: for hold, or, if
// hold is negative, until Release.
func (c *Cutter) Cut(hold time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if hold < 0 {
		if c.hold == nil {
			c.hold = make(chan struct{})
		}
	} else {
		c.holdUntil = time.Now().Add(hold)
	}
	for b := range c.open {
		b.ReadCloser.Close()
	}
	clear(c.open)
	c.Cuts.Add(1)
}

// Release lets held-back watches through.
func (c *Cutter) Release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold != nil {
		close(c.hold)
		c.hold = nil
	}
	c.holdUntil = time.Time{}
}

// Pause stops the reading of open watches (the connections stay up, the
// server's sends back up) until Resume.
func (c *Cutter) Pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gate == nil {
		c.gate = make(chan struct{})
	}
}

// Resume lets paused watches read again.
func (c *Cutter) Resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gate != nil {
		close(c.gate)
		c.gate = nil
	}
}

type body struct {
	io.ReadCloser
	c *Cutter
}

func (b *body) Read(p []byte) (int, error) {
	b.c.mu.Lock()
	g := b.c.gate
	b.c.mu.Unlock()
	if g != nil {
		<-g
	}
	return b.ReadCloser.Read(p)
}

func (b *body) Close() error {
	b.c.mu.Lock()
	delete(b.c.open, b)
	b.c.mu.Unlock()
	return b.ReadCloser.Close()
}
