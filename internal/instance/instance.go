// Package instance assembles a running objwatch server: etcd (embedded or
// external), credentials, the API server, HTTPS and compaction. Both
// `objwatch serve` and testenv use it, so tests run exactly what users run.
package instance

import (
	"cmp"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/net/http2"

	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/storage/etcd"
)

// Options configure an instance.
type Options struct {
	// DataDir holds credentials, the kubeconfig and (embedded) etcd data.
	DataDir string
	// Listen is the HTTPS address; ":0" style ports pick a free one.
	Listen string
	// EtcdServers selects an external etcd; empty starts an embedded one.
	EtcdServers []string
	// EtcdTLS is the client TLS for external etcd (nil: plain), the
	// main cluster's and every override's.
	EtcdTLS *tls.Config
	// EtcdOverrides put resources on external etcd clusters of their own
	// (--etcd-servers-overrides), each compacted on its own every
	// CompactionInterval.
	EtcdOverrides []EtcdOverride
	// EtcdNoFsync speeds embedded etcd up for tests, at the cost of durability.
	EtcdNoFsync bool
	// CompactionInterval between etcd compactions; 0 disables.
	CompactionInterval time.Duration
	// Hosts are extra names and IPs for the serving certificate.
	Hosts []string
	// HTTP2WriteByteTimeout closes an HTTP/2 connection whose client has
	// accepted no bytes for this long (default 2 min): it blocks every
	// stream's writes, which the per-watch write timeout cannot end.
	HTTP2WriteByteTimeout time.Duration
	// ReadHeaderTimeout bounds how long a client may take to send a
	// request's headers (and the TLS handshake before them) before its
	// connection is closed (default 32 s, as kube-apiserver). A request's
	// body is bounded by the request timeout instead (server.Config.
	// RequestTimeout; see package endpoints).
	ReadHeaderTimeout time.Duration
	// Auth configures authentication beyond the data dir's client
	// certificates and admin token.
	Auth AuthOptions
	// Server tunes the API server; Storage, Authenticator and metrics are
	// filled in.
	Server server.Config
	Log    *slog.Logger
}

// AuthOptions are kube-apiserver's authentication flags that objwatch has.
type AuthOptions struct {
	// TokenAuthFile is a static token file (--token-auth-file).
	TokenAuthFile string
	// Anonymous lets requests without credentials in as system:anonymous
	// (--anonymous-auth).
	Anonymous bool
	// ServiceAccountSigningKeyFile is the PEM private key that signs
	// service-account tokens (--service-account-signing-key-file);
	// default: pki/sa.key in the data dir, created on first start. All
	// servers of one etcd must share it (or list each other's keys in
	// ServiceAccountKeyFiles) to accept each other's tokens.
	ServiceAccountSigningKeyFile string
	// ServiceAccountKeyFiles hold more PEM keys (public or private) whose
	// tokens are accepted (--service-account-key-file).
	ServiceAccountKeyFiles []string
	// ServiceAccountIssuer is the tokens' iss and the API audience
	// (--service-account-issuer); default auth.DefaultIssuer.
	ServiceAccountIssuer string
	// ServiceAccountMaxTokenExpiration caps requested token lifetimes
	// (--service-account-max-token-expiration); 0: no cap.
	ServiceAccountMaxTokenExpiration time.Duration
}

// authenticator builds the Authenticator and token issuer for o, with
// the credentials in pki.
func (o AuthOptions) authenticator(pki string, c *auth.Credentials) (*auth.Authenticator, *auth.TokenIssuer, error) {
	var key crypto.Signer
	var err error
	if o.ServiceAccountSigningKeyFile != "" {
		key, err = auth.LoadPrivateKey(o.ServiceAccountSigningKeyFile)
	} else {
		key, err = auth.EnsureServiceAccountKey(pki)
	}
	if err != nil {
		return nil, nil, err
	}
	var verify []crypto.PublicKey
	for _, f := range o.ServiceAccountKeyFiles {
		keys, err := auth.LoadPublicKeys(f)
		if err != nil {
			return nil, nil, err
		}
		verify = append(verify, keys...)
	}
	issuer, err := auth.NewTokenIssuer(auth.TokenIssuerConfig{
		Key: key, Issuer: o.ServiceAccountIssuer, MaxExpiration: o.ServiceAccountMaxTokenExpiration, VerifyKeys: verify,
	})
	if err != nil {
		return nil, nil, err
	}
	var tokens map[string]auth.User
	if o.TokenAuthFile != "" {
		if tokens, err = auth.ReadTokenFile(o.TokenAuthFile); err != nil {
			return nil, nil, err
		}
	}
	a := auth.New(auth.Config{Credentials: c, Tokens: tokens, ServiceAccounts: issuer, Anonymous: o.Anonymous})
	return a, issuer, nil
}

// Instance is a running server. Its owner must call Close.
type Instance struct {
	// URL is the server's https URL; Kubeconfig the path of the admin
	// kubeconfig; Credentials the admin credentials.
	URL         string
	Kubeconfig  string
	Credentials *auth.Credentials
	// Authenticator is the server's; TokenIssuer signs and verifies its
	// service-account tokens.
	Authenticator *auth.Authenticator
	TokenIssuer   *auth.TokenIssuer
	Server        *server.Server
	Store         *etcd.Store
	// EtcdEndpoint is the etcd client URL (embedded or the first external).
	EtcdEndpoint string

	// Overrides are the stores of EtcdOverrides, in their order.
	Overrides []*etcd.Store

	embedded *etcd.Embedded
	cli      io.Closer   // the etcd client
	clis     []io.Closer // the overrides' etcd clients
	http     *http.Server
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	errc     chan error
	once     sync.Once
}

// Start starts an instance and returns once it serves requests.
func Start(ctx context.Context, o Options) (_ *Instance, err error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	in := &Instance{errc: make(chan error, 2)}
	defer func() {
		if err != nil {
			in.Close()
		}
	}()
	endpoints := o.EtcdServers
	if len(endpoints) == 0 {
		e, err := etcd.StartEmbedded(ctx, etcd.EmbeddedConfig{Dir: filepath.Join(o.DataDir, "etcd"), NoFsync: o.EtcdNoFsync})
		if err != nil {
			return nil, err
		}
		in.embedded = e
		endpoints = []string{e.Endpoint}
	}
	in.EtcdEndpoint = endpoints[0]
	mainTLS := o.EtcdTLS
	if in.embedded != nil {
		mainTLS = nil // (the TLS flags are the overrides')
	}
	cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: endpoints, TLS: mainTLS})
	if err != nil {
		return nil, err
	}
	in.cli = cli
	reg := prometheus.NewRegistry()
	// The scheduler's metrics too: go_sched_latencies_seconds is how long
	// runnable goroutines waited for a CPU, what a request waits behind
	// thousands of watches being delivered (docs/OPERATIONS.md, "Overload").
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler)), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if in.Store, err = etcd.New(cli, reg); err != nil {
		return nil, err
	}
	cfg := o.Server
	for _, ov := range o.EtcdOverrides {
		cli, err := etcd.NewClient(etcd.ClientConfig{Endpoints: ov.Servers, TLS: o.EtcdTLS})
		if err != nil {
			return nil, fmt.Errorf("etcd of %s: %w", ov.Resource, err)
		}
		in.clis = append(in.clis, cli)
		// (No request latency metrics: the main store registers them.)
		st, err := etcd.New(cli, nil)
		if err != nil {
			return nil, err
		}
		in.Overrides = append(in.Overrides, st)
		cfg.StorageOverrides = append(cfg.StorageOverrides, server.StorageOverride{Resource: ov.Resource, Storage: st})
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	hosts := append([]string{host}, o.Hosts...)
	pki := filepath.Join(o.DataDir, "pki")
	if in.Credentials, err = auth.EnsureCredentials(pki, hosts); err != nil {
		ln.Close()
		return nil, err
	}
	if in.Authenticator, in.TokenIssuer, err = o.Auth.authenticator(pki, in.Credentials); err != nil {
		ln.Close()
		return nil, err
	}
	in.URL = "https://" + ln.Addr().String()
	in.Kubeconfig = filepath.Join(o.DataDir, "kubeconfig")
	if err := auth.WriteKubeconfig(in.Kubeconfig, in.URL, in.Credentials); err != nil {
		ln.Close()
		return nil, err
	}
	cfg.Storage = in.Store
	cfg.Authenticator = in.Authenticator
	cfg.TokenIssuer = in.TokenIssuer
	cfg.Metrics, cfg.Gatherer, cfg.Log = reg, reg, o.Log
	if a, ok := ln.Addr().(*net.TCPAddr); ok && cfg.APIServerPort == 0 {
		cfg.APIServerPort = a.Port
	}
	if in.Server, err = server.New(cfg); err != nil {
		ln.Close()
		return nil, err
	}
	in.http = &http.Server{
		Handler:   in.Server.Handler(),
		TLSConfig: in.Credentials.ServerTLSConfig(),
		// Slow clients, as kube-apiserver bounds them: headers (and the
		// TLS handshake) within ReadHeaderTimeout, idle keep-alive
		// connections closed after 90 s, headers of at most 1 MiB. No
		// ReadTimeout: watches are long; a body that trickles in is cut
		// off at its request's deadline (endpoints).
		ReadHeaderTimeout: cmp.Or(o.ReadHeaderTimeout, 32*time.Second),
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(o.Log.Handler(), slog.LevelDebug),
		// An HTTP/2 client that stops reading the whole connection blocks
		// every stream's writes, which the per-watch write timeout cannot
		// end (its stream reset cannot be written either): close such a
		// connection after two minutes without progress.
		HTTP2: &http.HTTP2Config{WriteByteTimeout: cmp.Or(o.HTTP2WriteByteTimeout, 2*time.Minute)},
	}
	// HTTP/2 from golang.org/x/net (as kube-apiserver serves it), for its
	// write scheduler: net/http's round-robin scheduler walks every open
	// stream of a connection for each frame it sends and once more when
	// none is left, which at 250 watches a connection was 16% of the
	// server's CPU profile of 50,000 HTTP/2 watches; the random
	// scheduler visits only the streams with frames queued. Watches need
	// no priorities. The settings above (http.Server.HTTP2) still apply.
	if err := http2.ConfigureServer(in.http, &http2.Server{NewWriteScheduler: newWriteScheduler}); err != nil {
		ln.Close()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	for i, st := range in.Overrides {
		log := o.Log.With("etcd", o.EtcdOverrides[i].Resource.String())
		in.wg.Go(func() { st.RunCompactor(runCtx, o.CompactionInterval, log, nil) })
	}
	in.wg.Add(3)
	go func() {
		defer in.wg.Done()
		if err := in.Server.Run(runCtx); err != nil {
			in.errc <- err
		}
	}()
	go func() {
		defer in.wg.Done()
		in.Store.RunCompactor(runCtx, o.CompactionInterval, o.Log, in.Server.CompactionFloor)
	}()
	go func() {
		defer in.wg.Done()
		if err := in.http.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			in.errc <- err
		}
	}()
	for !in.Server.Ready() {
		select {
		case err := <-in.errc:
			return nil, err
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return in, nil
}

// newWriteScheduler is the HTTP/2 write scheduler of a connection.
func newWriteScheduler() http2.WriteScheduler { return http2.NewRandomWriteScheduler() }

// Err delivers a fatal error of the running instance.
func (in *Instance) Err() <-chan error { return in.errc }

// Close shuts down: watches end, in-flight requests finish (up to 10 s),
// background loops stop, then etcd's client and embedded member close.
func (in *Instance) Close() {
	in.once.Do(func() {
		if in.cancel != nil {
			in.cancel()
		}
		if in.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			in.http.Shutdown(ctx)
			cancel()
			in.http.Close()
		}
		in.wg.Wait()
		if in.cli != nil {
			in.cli.Close()
		}
		for _, c := range in.clis {
			c.Close()
		}
		if in.embedded != nil {
			in.embedded.Close()
		}
	})
}

// TLSClientConfig returns a TLS config trusting the instance's CA and
// presenting the admin certificate.
func (in *Instance) TLSClientConfig() (*tls.Config, error) {
	cert, err := tls.X509KeyPair(in.Credentials.AdminCertPEM, in.Credentials.AdminKeyPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(in.Credentials.CACertPEM)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
