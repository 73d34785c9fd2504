package etcd

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// EmbeddedConfig configures an in-process etcd member.
type EmbeddedConfig struct {
	// Dir holds etcd's data; it survives restarts.
	Dir string
	// ClientURL to listen on; default http://127.0.0.1:0 (a free port).
	ClientURL string
	// NoFsync trades durability for speed, and shortens the single
	// member's election ticks so it starts faster; for tests only.
	NoFsync bool
	// QuotaBytes is the backend quota; 0 keeps etcd's default (2 GiB).
	QuotaBytes int64
}

// Embedded is a running single-member etcd. Its owner must call Close.
type Embedded struct {
	etcd    *embed.Etcd
	sockDir string
	// Endpoint is the client URL actually listened on.
	Endpoint string
}

// StartEmbedded starts a single-member etcd and waits until it serves.
func StartEmbedded(ctx context.Context, c EmbeddedConfig) (*Embedded, error) {
	cfg := embed.NewConfig()
	cfg.Dir = c.Dir
	cfg.Name = "objwatch"
	clientURL := c.ClientURL
	if clientURL == "" {
		clientURL = "http://127.0.0.1:0"
	}
	cu, err := url.Parse(clientURL)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: client url: %w", err)
	}
	// The member has no peers; a unix socket keeps it off the network and
	// needs no free port. It lives in a short temporary directory because
	// socket paths are limited to about 100 bytes.
	sockDir, err := os.MkdirTemp("", "objwatch-etcd-")
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	pu, _ := url.Parse(fmt.Sprintf("unix://%s/peer.sock", sockDir))
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = c.NoFsync
	if c.NoFsync {
		cfg.TickMs, cfg.ElectionMs = 10, 100
	}
	if c.QuotaBytes > 0 {
		cfg.QuotaBackendBytes = c.QuotaBytes
	}
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// Progress notifications let watch bookmarks and the watch cache learn the
	// current revision without writes.
	cfg.WatchProgressNotifyInterval = 5 * time.Second

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(sockDir)
		return nil, fmt.Errorf("embedded etcd: start: %w", err)
	}
	embedded := &Embedded{etcd: e, sockDir: sockDir}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		embedded.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-ctx.Done():
		embedded.Close()
		return nil, fmt.Errorf("embedded etcd: %w", ctx.Err())
	case <-time.After(60 * time.Second):
		embedded.Close()
		return nil, fmt.Errorf("embedded etcd: not ready after 60s")
	}
	embedded.Endpoint = "http://" + e.Clients[0].Addr().String()
	return embedded, nil
}

// Close stops the member and waits for it.
func (e *Embedded) Close() {
	e.etcd.Close()
	os.RemoveAll(e.sockDir)
}

// ClientConfig describes how to reach an etcd cluster.
type ClientConfig struct {
	Endpoints []string
	TLS       *tls.Config
}

// NewClient connects to etcd. The caller must Close the client.
//
// A lost connection is re-dialled with backoff from 1 s up to 5 s (gRPC's
// default grows to 2 min), so that a server finds its etcd again within
// seconds of its return, whatever the outage's length.
func NewClient(c ClientConfig) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: time.Second, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		})},
		Endpoints:          c.Endpoints,
		TLS:                c.TLS,
		DialTimeout:        10 * time.Second,
		DialKeepAliveTime:  30 * time.Second,
		MaxCallSendMsgSize: 2 << 20,
		MaxCallRecvMsgSize: 1 << 30,
		Logger:             zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cli, nil
}
