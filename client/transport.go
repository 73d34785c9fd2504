package client

import (
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
// keepalives. ea, if not nil, supplies the client certificate and tracks
// connections so that a new certificate closes them.
func newTransport(cfg *Config, ea *execAuth) (http.RoundTripper, error) {
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
	if ea != nil {
		tc.GetClientCertificate = ea.clientCertificate
		dial = ea.dialer(dial)
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	return &http.Transport{
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
	}, nil
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
	cert, key := cfg.CertData, cfg.KeyData
	if len(cert) == 0 && cfg.CertFile != "" {
		b, err := os.ReadFile(cfg.CertFile)
		if err != nil {
			return nil, fmt.Errorf("config: client certificate: %w", err)
		}
		cert = b
	}
	if len(key) == 0 && cfg.KeyFile != "" {
		b, err := os.ReadFile(cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("config: client key: %w", err)
		}
		key = b
	}
	switch {
	case len(cert) > 0 && len(key) > 0:
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("config: client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	case len(cert) > 0 || len(key) > 0:
		return nil, errors.New("config: client certificate and key must be given together")
	}
	return tc, nil
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
