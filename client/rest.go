package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// REST is a connection to an API server, or to several servers of one
// cluster between which it fails over (Config.Hosts): base URLs, HTTP
// transport (with its pool of reused connections) and credentials. Create
// one per cluster with New and share it; typed clients made with NewClient use
// it.
//
// A REST is safe for concurrent use. It starts no goroutines; call
// CloseIdleConnections when done with it to release idle connections.
// Its requests share the rate limit of Config.QPS and Burst.
type REST struct {
	servers        *servers
	http           *http.Client
	creds          *credentials
	certFiles      *certFiles    // nil: no client certificate files
	limiter        *rate.Limiter // nil: no limit
	userAgent      string
	timeout        time.Duration
	attemptTimeout time.Duration // 0: none
	stallTimeout   time.Duration // 0: none
	preferCBOR     bool          // Config.PreferCBOR
	preferProtobuf bool          // Config.PreferProtobuf

	discoveryMu sync.Mutex
	discovery   map[schema.GroupVersion][]apiResource // cache of resource lists

	extMu sync.Mutex
	ext   *Extensions // the server's watch extensions, nil until known
}

// New returns a REST for cfg.
func New(cfg *Config) (*REST, error) {
	bases, err := cfg.baseURLs()
	if err != nil {
		return nil, err
	}
	creds, err := newCredentials(cfg)
	if err != nil {
		return nil, err
	}
	var certs *certSource
	var files *certFiles
	switch {
	case cfg.Transport != nil:
	case creds.exec != nil:
		certs = creds.exec.certs
	case cfg.certFromFiles():
		if files, err = newCertFiles(cfg); err != nil {
			return nil, err
		}
		certs = files.certs
	}
	rt, err := newTransport(cfg, certs)
	if err != nil {
		return nil, err
	}
	if cfg.WrapTransport != nil {
		rt = cfg.WrapTransport(rt)
	}
	ua := cfg.UserAgent
	if ua == "" {
		ua = "objwatch"
	}
	return &REST{
		servers:        newServers(bases),
		http:           &http.Client{Transport: rt},
		creds:          creds,
		certFiles:      files,
		limiter:        newLimiter(cfg.QPS, cfg.Burst),
		userAgent:      ua,
		timeout:        cfg.Timeout,
		attemptTimeout: orDefault(cfg.AttemptTimeout, defaultAttemptTimeout),
		stallTimeout:   orDefault(cfg.StallTimeout, defaultStallTimeout),
		preferCBOR:     cfg.PreferCBOR,
		preferProtobuf: cfg.PreferProtobuf,
		discovery:      map[schema.GroupVersion][]apiResource{},
	}, nil
}

// orDefault is d, or def for 0, or 0 (none) for a negative d.
func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// CloseIdleConnections closes the transport's idle connections.
func (r *REST) CloseIdleConnections() { r.http.CloseIdleConnections() }

// request is one API call.
type request struct {
	method      string
	path        string // absolute path below the base URL, e.g. /api/v1/namespaces/x/pods
	query       url.Values
	body        []byte
	contentType string
	accept      string // the Accept header (default application/json)
	watch       bool   // long-running: no Config.Timeout
}

// maxRetries bounds retries of requests the server refused with 429 or 503
// and a Retry-After (it did not process them, so any verb may be retried).
const maxRetries = 5

// do sends req and returns the response for a 2xx status; any other status
// is returned as a *StatusError. The caller closes the body.
//
// Each attempt first waits for a token of the rate limit, and re-reads
// rotated client certificate files when due.
//
// A 401 to an exec plugin's credential drops that credential and, once,
// sends req again with a new one: the server refused it before processing
// it, and the body is in memory, so any verb may be retried.
//
// With several servers, an attempt that fails on its server (no
// connection, a reset, no response within the attempt timeout, a 502, 503
// or 504) makes the next server current, and req is sent there at once if
// that is safe: always for reads, and for writes when the server surely
// did not process it (the request was never written, or the answer is
// 503). Each server is tried at most once per round; then Retry-After
// rules apply as with one server. After a failover away from the
// preferred server, an attempt may be a failback probe of it (see
// servers); its failure is handled as any other, so a write moves on to
// the next server only if the preferred one surely did not process it.
func (r *REST) do(ctx context.Context, req request) (*http.Response, error) {
	reauthed := false
	var tried []bool // servers that failed req, with several
	if len(r.servers.urls) > 1 {
		tried = make([]bool, len(r.servers.urls))
	}
	// another marks server i tried and reports whether one is left.
	another := func(i int) bool {
		if tried == nil {
			return false
		}
		tried[i] = true
		for _, t := range tried {
			if !t {
				return true
			}
		}
		return false
	}
	for attempt := 0; ; attempt++ {
		if err := r.wait(ctx); err != nil {
			return nil, err
		}
		if r.certFiles != nil {
			r.certFiles.refresh()
		}
		c := r.servers.pick(tried)
		i := c.server
		resp, a, cred, err := r.send(ctx, req, i)
		if err != nil {
			if a == nil || ctx.Err() != nil {
				if a != nil && c.probe {
					// A probe not answered before the caller gave up
					// does not bring requests back: the preferred
					// server backs off, else every probe could hang
					// on it until its caller's deadline.
					r.servers.failed(i)
				} else {
					r.servers.release(c)
				}
				return nil, err // not the server's failure
			}
			r.servers.failed(i)
			if (idempotent(req.method) || !a.wrote.Load()) && another(i) {
				continue
			}
			return nil, err
		}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			r.servers.succeeded(c)
			return resp, nil
		}
		if resp.StatusCode == http.StatusUnauthorized && cred != nil {
			r.creds.exec.refused(cred)
			if !reauthed {
				r.servers.release(c)
				reauthed = true
				drain(resp)
				continue
			}
		}
		if failover, unprocessed := failoverStatus(resp.StatusCode); failover {
			r.servers.failed(i)
			if (unprocessed || idempotent(req.method)) && another(i) {
				drain(resp)
				continue
			}
		} else {
			r.servers.succeeded(c) // it answered for itself
		}
		wait, retry := retryAfter(resp)
		if !retry || attempt >= maxRetries {
			err := responseError(resp)
			resp.Body.Close()
			return nil, err
		}
		drain(resp)
		clear(tried)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// send makes one attempt of req on server i. A nil attempt with the error
// means the request was not sent (a bad request or credential); a non-2xx
// response is returned as it is.
func (r *REST) send(ctx context.Context, req request, i int) (*http.Response, *attempt, *execCred, error) {
	base := r.servers.urls[i]
	u := *base
	u.Path = base.Path + req.path
	u.RawPath = ""
	if len(req.query) > 0 {
		u.RawQuery = req.query.Encode()
	}
	var body io.Reader
	if req.body != nil {
		body = bytes.NewReader(req.body)
	}
	a := &attempt{server: i, parent: ctx}
	actx, cancel := context.WithCancel(ctx)
	a.cancel = cancel
	actx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{WroteHeaders: func() { a.wrote.Store(true) }})
	hr, err := http.NewRequestWithContext(actx, req.method, u.String(), body)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	accept := req.accept
	if accept == "" {
		accept = "application/json"
	}
	hr.Header.Set("Accept", accept)
	hr.Header.Set("User-Agent", r.userAgent)
	if req.contentType != "" {
		hr.Header.Set("Content-Type", req.contentType)
	}
	cred, err := r.creds.apply(ctx, hr.Header)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	var timer *time.Timer
	if r.attemptTimeout > 0 {
		timer = time.AfterFunc(r.attemptTimeout, func() { a.expired.Store(true); cancel() })
	}
	resp, err := r.http.Do(hr)
	if timer != nil && !timer.Stop() && err == nil {
		resp.Body.Close() // the timeout fired as the headers came
		err = context.DeadlineExceeded
	}
	if err != nil {
		cancel()
		if a.expired.Load() {
			err = fmt.Errorf("%s %s: no response within %v: %w", req.method, u.Redacted(), r.attemptTimeout, context.DeadlineExceeded)
		}
		return nil, a, nil, err
	}
	var stall time.Duration
	if req.watch && req.query.Get("allowWatchBookmarks") == "true" {
		stall = r.stallTimeout
	}
	r.wrapBody(resp, a, stall)
	return resp, a, cred, nil
}

// drain reads a little of a response to be dropped, so that its connection
// can be reused, and closes it.
func drain(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
}

// newLimiter returns the token bucket of Config.QPS and Burst, or nil for
// no limit.
func newLimiter(qps float32, burst int) *rate.Limiter {
	if !(qps > 0) { // also NaN
		return nil
	}
	if burst <= 0 {
		burst = max(1, int(qps))
	}
	return rate.NewLimiter(rate.Limit(qps), burst)
}

// wait takes a token from the rate limiter, waiting for one until ctx ends.
func (r *REST) wait(ctx context.Context) error {
	if r.limiter == nil {
		return nil
	}
	if err := r.limiter.Wait(ctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("client rate limit: %w", ctx.Err())
		}
		// Wait refuses at once to wait past ctx's deadline.
		return fmt.Errorf("client rate limit: token not available before the deadline: %w", context.DeadlineExceeded)
	}
	return nil
}

// retryAfter reports whether resp asks to be retried (429 or 503 with
// Retry-After) and after how long (capped at 10 s).
func retryAfter(resp *http.Response) (time.Duration, bool) {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return 0, false
	}
	s := resp.Header.Get("Retry-After")
	if s == "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, false
	}
	d := time.Duration(n) * time.Second
	if d == 0 {
		d = 100 * time.Millisecond
	}
	return min(d, 10*time.Second), true
}

// call sends req and returns the response body.
func (r *REST) call(ctx context.Context, req request) ([]byte, error) {
	b, _, err := r.callType(ctx, req)
	return b, err
}

// callType sends req and returns the response body and its Content-Type.
func (r *REST) callType(ctx context.Context, req request) ([]byte, string, error) {
	if r.timeout > 0 && !req.watch {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	resp, err := r.do(ctx, req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return b, resp.Header.Get("Content-Type"), err
}

// Raw sends a GET for path (e.g. "/version") and returns the body. Non-2xx
// answers are a *StatusError.
func (r *REST) Raw(ctx context.Context, path string) ([]byte, error) {
	return r.call(ctx, request{method: http.MethodGet, path: path})
}

// RawQuery is Raw with query parameters.
func (r *REST) RawQuery(ctx context.Context, path string, query url.Values) ([]byte, error) {
	return r.call(ctx, request{method: http.MethodGet, path: path, query: query})
}

// resourcePath builds /api/v1/... or /apis/<g>/<v>/... (unescaped; the URL
// escapes it).
func resourcePath(res Resource, namespace, name, subresource string) string {
	var b strings.Builder
	if res.GVR.Group == "" {
		b.WriteString("/api/")
	} else {
		b.WriteString("/apis/")
		b.WriteString(res.GVR.Group)
		b.WriteByte('/')
	}
	b.WriteString(res.GVR.Version)
	if res.Namespaced && namespace != "" {
		b.WriteString("/namespaces/")
		b.WriteString(namespace)
	}
	b.WriteByte('/')
	b.WriteString(res.GVR.Resource)
	if name != "" {
		b.WriteByte('/')
		b.WriteString(name)
	}
	if subresource != "" {
		b.WriteByte('/')
		b.WriteString(subresource)
	}
	return b.String()
}

func (r *REST) String() string { return fmt.Sprintf("REST(%s)", r.Server()) }
