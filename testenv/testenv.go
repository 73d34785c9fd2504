// Package testenv starts a complete objwatch server in-process for tests:
// embedded etcd in a temporary directory, generated credentials, HTTPS on a
// random loopback port. Use it in your own tests the same way objwatch's
// end-to-end tests do:
//
//	func TestMyController(t *testing.T) {
//		env := testenv.Start(t)
//		rc, err := client.New(env.Config.ClientConfig())
//		...
//	}
//
// env.Config.ClientConfig() is a client.Config for objwatch's client
// library, env.Config.RESTConfig() a rest.Config for client-go (and
// controller-runtime), env.Kubeconfig a kubeconfig file for kubectl and
// anything else; all three reach the server as admin, and env.User(t,
// name) gives a Config of another user.
//
// WithCRDs installs CustomResourceDefinitions from files and directories
// before Start returns, Established and served (envtest's
// CRDDirectoryPaths); WithConversion serves a Go function as a CRD's
// conversion webhook, as Env.Webhook serves admission functions.
//
// The server stops when the test ends (t.Cleanup). Servers started with
// WithEtcd share one etcd, like several `objwatch serve` processes on one
// cluster.
package testenv

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/internal/instance"
	"github.com/objwatch/objwatch/server"
	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/storage/etcd"
)

// Config is what a client needs to reach the server: as admin in
// Env.Config, as another user from Env.User.
type Config struct {
	Host        string // https://127.0.0.1:port
	CAData      []byte // PEM
	CertData    []byte // client certificate, PEM
	KeyData     []byte // client key, PEM
	BearerToken string // admin token (an alternative to the certificate)
}

// ClientConfig returns c as a configuration of objwatch's client library
// (client.New): the client certificate if c has one, else the token. It
// is a new value each time, which the caller may change (QPS, timeouts).
func (c Config) ClientConfig() *client.Config {
	cfg := &client.Config{Host: c.Host, CAData: c.CAData}
	if len(c.CertData) > 0 {
		cfg.CertData, cfg.KeyData = c.CertData, c.KeyData
	} else {
		cfg.BearerToken = c.BearerToken
	}
	return cfg
}

// RESTConfig returns c as a client-go configuration (for client-go's
// clients, informers and controller-runtime), with the same credentials as
// ClientConfig. It is a new value each time.
func (c Config) RESTConfig() *rest.Config {
	cfg := &rest.Config{Host: c.Host, TLSClientConfig: rest.TLSClientConfig{CAData: c.CAData}}
	if len(c.CertData) > 0 {
		cfg.CertData, cfg.KeyData = c.CertData, c.KeyData
	} else {
		cfg.BearerToken = c.BearerToken
	}
	return cfg
}

// Env is a running test server.
type Env struct {
	Config     Config
	Kubeconfig string
	// EtcdEndpoint is the etcd this server uses.
	EtcdEndpoint string
	// Server gives tests access to the registry and readiness.
	Server *server.Server
	// CRDs are the CustomResourceDefinitions WithCRDs, WithCRDObjects and
	// InstallCRDs installed, as the server returned them once Established.
	CRDs     []*apiextensionsv1.CustomResourceDefinition
	instance *instance.Instance
	dataDir  string
}

// Option changes how Start builds the server.
type Option func(*instance.Options)

// WithEtcd uses an existing etcd (see StartEtcd) instead of a new one.
func WithEtcd(endpoint string) Option {
	return func(o *instance.Options) { o.EtcdServers = []string{endpoint} }
}

// WithCompaction compacts etcd history every interval (default: never).
func WithCompaction(interval time.Duration) Option {
	return func(o *instance.Options) { o.CompactionInterval = interval }
}

// WithHistory makes the server forget history after about d: etcd is
// compacted every d and the watch cache keeps d of events, so watches and
// lists from older resourceVersions get 410 Gone. Use it to test relists.
func WithHistory(d time.Duration) Option {
	return func(o *instance.Options) {
		o.CompactionInterval = d
		o.Server.WatchCacheWindow = d
	}
}

// WithBookmarkInterval sets how often watches that allow bookmarks get one.
func WithBookmarkInterval(d time.Duration) Option {
	return func(o *instance.Options) { o.Server.BookmarkInterval = d }
}

// WithServerConfig adjusts the API server's settings (bookmark interval,
// limits, timeouts).
func WithServerConfig(f func(*server.Config)) Option {
	return func(o *instance.Options) { f(&o.Server) }
}

// WithHTTP2WriteByteTimeout closes an HTTP/2 connection whose client
// accepts no bytes for d (default 2 min).
func WithHTTP2WriteByteTimeout(d time.Duration) Option {
	return func(o *instance.Options) { o.HTTP2WriteByteTimeout = d }
}

// WithEncryptionProviderConfig keeps the resources the
// EncryptionConfiguration file at path lists encrypted in etcd (see
// server.Config.EncryptionProviderConfig).
func WithEncryptionProviderConfig(path string) Option {
	return func(o *instance.Options) { o.Server.EncryptionProviderConfig = path }
}

// WithHistoryStore makes the server keep a history store (package
// server/history) in its data directory, as objwatch serve does: every
// revision of every object past etcd's compaction, with its author.
func WithHistoryStore() Option {
	return func(o *instance.Options) { o.Server.History.Dir = filepath.Join(o.DataDir, "history") }
}

// WithLogger sends server logs to l (default: discarded).
func WithLogger(l *slog.Logger) Option {
	return func(o *instance.Options) { o.Log = l }
}

// Start starts a server for the test and stops it when the test ends. In
// a test (not a benchmark) the server checks its internal shortcuts
// against etcd and panics on a difference (server.Config.Verify).
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	o := instance.Options{
		DataDir:     t.TempDir(),
		Listen:      "127.0.0.1:0",
		EtcdNoFsync: true,
		Log:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	// A test's server checks its shortcuts against etcd (see
	// server.Config.Verify); a benchmark's measures the server as it runs
	// in production. WithServerConfig can change either.
	_, bench := t.(*testing.B)
	o.Server.Verify = !bench
	for _, f := range opts {
		f(&o)
	}
	crds := takeCRDPlan(t, &o)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	in, err := instance.Start(ctx, o)
	if err != nil {
		t.Fatalf("testenv: start server: %v", err)
	}
	t.Cleanup(in.Close)
	c := in.Credentials
	env := &Env{
		Config: Config{
			Host: in.URL, CAData: c.CACertPEM, CertData: c.AdminCertPEM, KeyData: c.AdminKeyPEM, BearerToken: c.AdminToken,
		},
		Kubeconfig:   in.Kubeconfig,
		EtcdEndpoint: in.EtcdEndpoint,
		Server:       in.Server,
		instance:     in,
		dataDir:      o.DataDir,
	}
	if crds != nil {
		crds.install(t, env)
	}
	return env
}

// User returns what a client needs to reach the server as user name in
// groups (every user is also in system:authenticated): a client
// certificate signed by the server's CA, as `objwatch user add` issues.
// The user may do only what RBAC allows; bind roles to it as admin.
func (e *Env) User(t testing.TB, name string, groups ...string) Config {
	t.Helper()
	cert, key, err := auth.IssueClientCert(filepath.Join(e.dataDir, "pki"), name, groups, time.Hour)
	if err != nil {
		t.Fatalf("testenv: user %s: %v", name, err)
	}
	return Config{Host: e.Config.Host, CAData: e.Config.CAData, CertData: cert, KeyData: key}
}

// UserKubeconfig writes a kubeconfig for User(name, groups...) and
// returns its path, for kubectl and client-go.
func (e *Env) UserKubeconfig(t testing.TB, name string, groups ...string) string {
	t.Helper()
	c := e.User(t, name, groups...)
	b, err := auth.Kubeconfig(c.Host, c.CAData, name, c.CertData, c.KeyData, "")
	if err != nil {
		t.Fatalf("testenv: kubeconfig of %s: %v", name, err)
	}
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return path
}

// DataDir is the server's data directory: credentials, embedded etcd's
// data, and with WithHistoryStore the history store (DataDir/history).
func (e *Env) DataDir() string { return e.dataDir }

// Stop stops the server before the test ends (Cleanup then does nothing).
func (e *Env) Stop() { e.instance.Close() }

// HTTPClient returns a client that trusts the server and authenticates as
// admin with the client certificate.
func (e *Env) HTTPClient() *http.Client {
	tc, err := e.instance.TLSClientConfig()
	if err != nil {
		panic(err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
}

// StartEtcd starts an embedded etcd for servers to share (WithEtcd); it
// stops when the test ends.
func StartEtcd(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, err := etcd.StartEmbedded(ctx, etcd.EmbeddedConfig{Dir: t.TempDir(), NoFsync: true})
	if err != nil {
		t.Fatalf("testenv: start etcd: %v", err)
	}
	t.Cleanup(e.Close)
	return e.Endpoint
}
