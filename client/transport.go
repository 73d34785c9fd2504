package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Connection health. HTTP/2 connections are pinged after pingAfter without
// a frame and closed if the ping is not answered within pingTimeout, so a
// watch on a dead connection fails within pingAfter+pingTimeout and is
// resumed; TCP keepalives do the same for HTTP/1.1. Variables for tests.
var (
	pingAfter   = 30 * time.Second
	pingTimeout = 15 * time.Second
)

// certFileRefresh is how often Config.CertFile and KeyFile are re-read, as
// cert-manager and the kubelet rotate them in place. A variable for tests.
var certFileRefresh = time.Minute

const (
	keepAliveIdle    = 15 * time.Second
	keepAliveEvery   = 5 * time.Second
	keepAliveProbes  = 3
	tokenFileRefresh = time.Minute
	// streamWindow is the HTTP/2 receive window per stream: how much a
	// fast server may send ahead of the reader on one list or watch. Go's
	// default of 4 MiB per open stream is most of the transient memory of
	// a large relist; 1 MiB still fills a 10 ms link at 100 MB/s.
	streamWindow = 1 << 20
)

// newTransport builds the HTTP transport for cfg: TLS from the config,
// HTTP/2 with health-check pings, connection reuse (keep-alive pool), TCP
// keepalives. certs, if not nil, supplies the client certificate of each
// handshake and tracks connections so that a new certificate closes them.
func newTransport(cfg *Config, certs *certSource) (http.RoundTripper, error) {
	if cfg.Transport != nil {
		return cfg.Transport, nil
	}
	tc, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	proxy := http.ProxyFromEnvironment
	if cfg.ProxyURL != "" {
		u, err := url.Parse(cfg.ProxyURL)
		if err != nil {
			return nil, fmt.Errorf("config: proxy-url: %w", err)
		}
		proxy = http.ProxyURL(u)
	}
	d := &net.Dialer{
		Timeout: 30 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: keepAliveIdle, Interval: keepAliveEvery, Count: keepAliveProbes,
		},
	}
	dial := d.DialContext
	if certs != nil {
		tc.GetClientCertificate = certs.cert
		dial = certs.dialer(dial)
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	t := &http.Transport{
		Proxy:               proxy,
		DialContext:         dial,
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   true,
		Protocols:           &protos,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: pingAfter, PingTimeout: pingTimeout, MaxReceiveBufferPerStream: streamWindow,
		},
		MaxIdleConnsPerHost: 25,
		IdleConnTimeout:     90 * time.Second,
	}
	if certs != nil {
		certs.current.Store(t)
		return certs, nil
	}
	return t, nil
}

func tlsConfig(cfg *Config) (*tls.Config, error) {
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         cfg.ServerName,
		InsecureSkipVerify: cfg.Insecure,
	}
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("config: CA: %w", err)
		}
		ca = b
	}
	if len(ca) > 0 {
		if cfg.Insecure {
			return nil, errors.New("config: a CA and insecure-skip-tls-verify are mutually exclusive")
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, errors.New("config: CA: no PEM certificates")
		}
		tc.RootCAs = pool
	}
	hasCert := len(cfg.CertData) > 0 || cfg.CertFile != ""
	hasKey := len(cfg.KeyData) > 0 || cfg.KeyFile != ""
	switch {
	case hasCert != hasKey:
		return nil, errCertWithoutKey
	case cfg.certFromFiles():
		// certFiles reads them, and again when they change.
	case hasCert:
		pair, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
		if err != nil {
			return nil, fmt.Errorf("config: client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

var errCertWithoutKey = errors.New("config: client certificate and key must be given together")

// certSource gives TLS handshakes a client certificate that can change (an
// exec plugin's, or rotated files) and is the transport's RoundTripper. A
// connection keeps the certificate of its handshake, and HTTP/2 sends every
// request over one connection, so when the certificate changes closeConns
// moves requests to a fresh transport, whose pool is empty, and closes every
// connection the old one dialed (including those of running requests and
// watches, as client-go does). Closing the connections alone would race:
// until a closed HTTP/2 connection's reader notices, the pool still hands
// it to new requests, which then fail to write. It is safe for concurrent
// use.
type certSource struct {
	cert    func(*tls.CertificateRequestInfo) (*tls.Certificate, error) // tls.Config.GetClientCertificate
	current atomic.Pointer[http.Transport]

	mu    sync.Mutex // never held while calling cert
	conns map[*trackedConn]struct{}
}

// RoundTrip sends req over the current transport.
func (s *certSource) RoundTrip(req *http.Request) (*http.Response, error) {
	return s.current.Load().RoundTrip(req)
}

// CloseIdleConnections closes the current transport's idle connections.
func (s *certSource) CloseIdleConnections() { s.current.Load().CloseIdleConnections() }

func newCertSource(cert func(*tls.CertificateRequestInfo) (*tls.Certificate, error)) *certSource {
	return &certSource{cert: cert, conns: map[*trackedConn]struct{}{}}
}

// dialer wraps dial to track the connections it makes.
func (s *certSource) dialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, s: s}
		s.mu.Lock()
		s.conns[tc] = struct{}{}
		s.mu.Unlock()
		return tc, nil
	}
}

// closeConns moves new requests to a fresh transport and closes the
// connections dialed so far.
func (s *certSource) closeConns() {
	if old := s.current.Load(); old != nil && s.current.CompareAndSwap(old, old.Clone()) {
		old.CloseIdleConnections()
	}
	s.mu.Lock()
	conns := s.conns
	s.conns = map[*trackedConn]struct{}{}
	s.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
}

// trackedConn is a connection certSource tracks until it is closed.
type trackedConn struct {
	net.Conn
	s *certSource
}

func (c *trackedConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// certFiles is the client certificate of Config.CertFile and KeyFile (a
// Data field replaces the file of its part). refresh re-reads the files at
// most every certFileRefresh and, if they hold a new pair that parses,
// uses it for new handshakes and closes the connections made with the old
// one. It compares contents rather than modification times and sizes:
// reading two small files a minute costs no more than stat, and a renewed
// certificate often has the old one's size and, on coarse file systems,
// mtime. A pair that does not parse (a rotation half written) keeps the old
// certificate until the next check. It is safe for concurrent use.
type certFiles struct {
	certFile, keyFile string // "" when that part is data
	certData, keyData []byte
	certs             *certSource

	mu        sync.Mutex // guards the fields below; held while reading the files
	cert      *tls.Certificate
	read      [2][]byte // the cert and key the current pair was read from
	checkedAt time.Time
}

// certFromFiles reports whether part of the client certificate comes from
// a file, which certFiles reloads.
func (c *Config) certFromFiles() bool {
	return len(c.CertData) == 0 && c.CertFile != "" || len(c.KeyData) == 0 && c.KeyFile != ""
}

// newCertFiles reads cfg's client certificate files; cfg.certFromFiles()
// must be true.
func newCertFiles(cfg *Config) (*certFiles, error) {
	f := &certFiles{certData: cfg.CertData, keyData: cfg.KeyData}
	if len(f.certData) == 0 {
		f.certFile = cfg.CertFile
	}
	if len(f.keyData) == 0 {
		f.keyFile = cfg.KeyFile
	}
	if f.certFile == "" && len(f.certData) == 0 || f.keyFile == "" && len(f.keyData) == 0 {
		return nil, errCertWithoutKey
	}
	cert, key, err := f.readFiles()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("config: client certificate: %w", err)
	}
	f.cert, f.read, f.checkedAt = &pair, [2][]byte{cert, key}, time.Now()
	f.certs = newCertSource(f.clientCertificate)
	return f, nil
}

func (f *certFiles) readFiles() (cert, key []byte, err error) {
	cert, key = f.certData, f.keyData
	if f.certFile != "" {
		if cert, err = os.ReadFile(f.certFile); err != nil {
			return nil, nil, fmt.Errorf("client certificate: %w", err)
		}
	}
	if f.keyFile != "" {
		if key, err = os.ReadFile(f.keyFile); err != nil {
			return nil, nil, fmt.Errorf("client key: %w", err)
		}
	}
	return cert, key, nil
}

// refresh re-reads the files if certFileRefresh has passed since the last
// check. Requests call it before they are sent, so that the first request
// after a rotation reconnects: a handshake cannot close the connections
// itself, as its own is among them.
func (f *certFiles) refresh() {
	f.mu.Lock()
	if now := time.Now(); now.Sub(f.checkedAt) >= certFileRefresh {
		f.checkedAt = now
	} else {
		f.mu.Unlock()
		return
	}
	cert, key, err := f.readFiles()
	changed := err == nil && (!bytes.Equal(cert, f.read[0]) || !bytes.Equal(key, f.read[1]))
	if changed {
		pair, err := tls.X509KeyPair(cert, key)
		if err == nil {
			f.cert, f.read = &pair, [2][]byte{cert, key}
		} else {
			changed = false // keep the old pair, try again next time
		}
	}
	f.mu.Unlock()
	if changed {
		f.certs.closeConns()
	}
}

// clientCertificate is tls.Config.GetClientCertificate.
func (f *certFiles) clientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cert, nil
}

// credentials sets the Authorization header of requests.
type credentials struct {
	token, file        string
	username, password string
	exec               *execAuth // if set, the only credential used

	mu     sync.Mutex
	cached string
	readAt time.Time
}

func newCredentials(cfg *Config) (*credentials, error) {
	c := &credentials{token: cfg.BearerToken, file: cfg.BearerTokenFile, username: cfg.Username, password: cfg.Password}
	if cfg.Exec != nil && !cfg.hasStaticAuth() {
		ea, err := newExecAuth(cfg)
		if err != nil {
			return nil, err
		}
		c.exec = ea
	}
	return c, nil
}

// apply sets h's Authorization header. With an exec plugin it may run the
// plugin, and returns the credential used so that a 401 can refuse it.
func (c *credentials) apply(ctx context.Context, h http.Header) (*execCred, error) {
	if c.exec != nil {
		cred, err := c.exec.get(ctx)
		if err != nil {
			return nil, err
		}
		if cred.token != "" {
			h.Set("Authorization", "Bearer "+cred.token)
		}
		return cred, nil
	}
	tok := c.token
	if c.file != "" {
		t, err := c.fileToken()
		if err != nil {
			return nil, err
		}
		tok = t
	}
	switch {
	case tok != "":
		h.Set("Authorization", "Bearer "+tok)
	case c.username != "" || c.password != "":
		r := http.Request{Header: h}
		r.SetBasicAuth(c.username, c.password)
	}
	return nil, nil
}

// fileToken returns the token file's content, re-read at most every
// tokenFileRefresh; a failed re-read keeps the last good token.
func (c *credentials) fileToken() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cached != "" && time.Since(c.readAt) < tokenFileRefresh {
		return c.cached, nil
	}
	b, err := os.ReadFile(c.file)
	if err != nil {
		if c.cached != "" {
			return c.cached, nil
		}
		return "", fmt.Errorf("bearer token file: %w", err)
	}
	c.cached, c.readAt = strings.TrimSpace(string(b)), time.Now()
	return c.cached, nil
}
