// Package server is objwatch's Kubernetes-compatible API server: the
// facade that builds its layers from one Config and routes requests to
// them. It serves the built-in resources of server/registry and the custom
// resources of every CustomResourceDefinition stored in it.
//
// # Layers
//
// Imports point down this list, never up (a test in test/layout checks):
//
//   - server (this package): Config, New, Run, Handler and the routes;
//     health, readiness, version and metrics.
//   - server/endpoints and server/openapi: HTTP. endpoints parses resource
//     requests, applies limits, calls the object service and writes JSON,
//     Tables and watch frames (server/watchstream writes the wire).
//   - server/lifecycle: resource-specific behaviour (namespaces, custom
//     resource definitions, Service cluster IPs, service-account keys),
//     plugged into the object service's hooks; server/gc/runner: the
//     garbage collector's backend and election.
//   - server/objects: the object service, free of HTTP: create, get, list,
//     update, delete and watch over storage and the watch caches, with one
//     authorization point, one admission point and one post-write point.
//   - server/registry, server/apistatus, server/auth, server/gc: what the
//     resources are, the errors, the users, the collector.
//
// docs/ARCHITECTURE.md walks through a create and a watch.
//
// # Semantics
//
// resourceVersion is the etcd revision. get, list and watch follow
// Kubernetes' resourceVersion and resourceVersionMatch rules; writes are
// conditional etcd transactions, so a stale update gets 409 Conflict and
// nothing is ever half-written. Errors are metav1.Status objects.
//
// # Concurrency
//
// A Server is safe for concurrent use by any number of requests. Run owns
// the background loops (CRD registration, bootstrap, the feeds of RBAC and
// admission, the collector): it starts them in the order components
// declares and stops them in reverse (package rungroup); cancelling its
// context also ends every open watch, so an http.Server's Shutdown can
// complete. The admission chain is declared in admissionChain.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/objwatch/objwatch/server/access"
	"github.com/objwatch/objwatch/server/admission/policy"
	admissionwebhook "github.com/objwatch/objwatch/server/admission/webhook"
	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/endpoints"
	"github.com/objwatch/objwatch/server/fieldmanager"
	"github.com/objwatch/objwatch/server/gc/runner"
	"github.com/objwatch/objwatch/server/history"
	"github.com/objwatch/objwatch/server/lifecycle"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/openapi"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/server/registry/kube"
	"github.com/objwatch/objwatch/server/rungroup"
	"github.com/objwatch/objwatch/server/watchstream"
	"github.com/objwatch/objwatch/server/webhookclient"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/health"
)

// Config configures a Server. Zero values take the documented defaults.
type Config struct {
	// Storage holds the objects. Required.
	Storage storage.Interface
	// StorageOverrides put resources on etcd clusters of their own
	// (--etcd-servers-overrides); see StorageOverride. A resource may be
	// named once. The history store records the main cluster (Storage)
	// only: past reads of an overridden resource are 400, and reads
	// before its etcd's compaction 410.
	StorageOverrides []StorageOverride
	// Authenticator authenticates requests; nil allows anonymous access
	// (only for tests that exercise handlers directly). Its service
	// accounts are looked up in this server's objects.
	Authenticator *auth.Authenticator
	// TokenIssuer issues service-account tokens (a service account's
	// token subresource); nil answers TokenRequests with 405.
	TokenIssuer *auth.TokenIssuer
	// Log receives server logs; default slog.Default().
	Log *slog.Logger
	// Metrics is where request metrics are registered; nil disables them.
	Metrics prometheus.Registerer
	// Gatherer serves /metrics; nil serves prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer
	// MaxRequestBytes limits request bodies (default 3 MiB, as Kubernetes).
	MaxRequestBytes int64
	// MaxReadInFlight and MaxMutatingInFlight bound concurrent requests
	// (default 400 and 200, as Kubernetes); beyond them requests get 429.
	// Watches do not count.
	MaxReadInFlight, MaxMutatingInFlight int
	// UserInFlightShare is the share of each of those limits that one
	// user may hold (default 0.5, rounded up; 1: no per-user share); a
	// user beyond it gets 429 while others are still served. Members of
	// system:masters are never refused. See package endpoints.
	UserInFlightShare float64
	// ExecutionSeats bounds how many admitted requests execute at once
	// (default endpoints.DefaultExecutionSeatsPerCPU per CPU); the others
	// wait in per-user queues served in turn, at most a quarter of
	// RequestTimeout (then 429). system:masters takes no seat, a watch
	// one only while it starts.
	ExecutionSeats int
	// WatchEventCPU is the server CPU a watch event is taken to cost per
	// watch it is delivered to: a write by a user who takes a seat keeps
	// it that long per watch of the resource after it returns (plus a
	// nanosecond per byte; at most 1 s), as kube-apiserver's mutating
	// work estimator (default endpoints.DefaultWatchEventCPU; negative:
	// none). See package endpoints, "Delivery".
	WatchEventCPU time.Duration
	// WatchWriters is how many watches write their events at once; the
	// others wait parked, so that requests are not queued behind every
	// watch's write in Go's scheduler (default
	// endpoints.DefaultWatchWriters: one per CPU, one fewer while more
	// than one user is active; negative: no limit).
	WatchWriters int
	// RequestTimeout bounds non-watch requests (default 60 s).
	RequestTimeout time.Duration
	// MinWatchTimeout: watches without timeoutSeconds end after a random
	// duration in [MinWatchTimeout, 2*MinWatchTimeout) (default 1800 s).
	MinWatchTimeout time.Duration
	// WithoutWatchExtensions makes the server answer as one without
	// objwatch's watch extensions (fieldMask, projection, watchDeltas),
	// as kube-apiserver does: /version does not list them and their
	// parameters are ignored. For tests of clients that fall back.
	WithoutWatchExtensions bool
	// WatchFlushInterval bounds how long watch output may wait to be
	// batched with later events when a watch receives events faster than
	// this (default 10 ms); a quiet watch's first event is sent at once.
	WatchFlushInterval time.Duration
	// WatchFlushIntervalMax is the longest the flush window grows to while
	// the machine's CPUs are saturated (default 80 ms; at most
	// WatchFlushInterval: fixed; only on Linux). See flushPacer.
	WatchFlushIntervalMax time.Duration
	// WatchBufferEvents bounds the events queued for one watch served from
	// the watch cache (default 10,000). A watch that falls further behind
	// is ended: its queue is dropped, and after the events already taken
	// from it the client gets an ERROR event with a 410 Expired Status, to
	// resume from the last resourceVersion it received or relist.
	WatchBufferEvents int
	// WatchQueueLimit bounds the events queued for all watches of one
	// resource together (default 1,000,000; negative: no bound beyond
	// WatchBufferEvents each). Past it, a watch offered an event while it
	// holds more than its share (the limit over the resource's watches,
	// at least 100) is ended as a watch past WatchBufferEvents is: many
	// clients that stop reading cost this many queued events, not
	// WatchBufferEvents each (docs/OPERATIONS.md, "Overload").
	WatchQueueLimit int
	// WatchWriteTimeout bounds how long a write of watch output may block
	// (default 1 min; negative: no bound). A watch whose client accepts no
	// data for that long (up to a second less) is ended: on HTTP/1.1 its
	// connection is closed (crypto/tls first tries for up to 5 s to send a
	// close_notify), on HTTP/2 its stream is reset. Kubernetes has no such
	// bound on HTTP/1.1 watches, whose writes can block until the TCP
	// connection dies.
	WatchWriteTimeout time.Duration
	// BookmarkInterval between bookmarks on watches that allow them
	// (default 1 min, as Kubernetes).
	BookmarkInterval time.Duration
	// FutureRVWait is how long a request for a resourceVersion newer than
	// the store waits before 504 "Too large resource version" (default 3 s).
	FutureRVWait time.Duration
	// ContinueTTL is how long a continue token stays valid (default 5 min).
	ContinueTTL time.Duration
	// Version is reported by /version.
	Version string
	// DisableProfiling turns off /debug/pprof.
	DisableProfiling bool
	// DisableWatchCache serves every list and watch from etcd directly.
	DisableWatchCache bool
	// NoSharedWatch gives every watch cache (and the history recorder)
	// an etcd watch of its own instead of one shared watch per etcd
	// cluster (storage.WatchSharer).
	NoSharedWatch bool
	// WatchCacheWindow is the minimum history a watch cache keeps for
	// watches to resume from (default 75 s, as Kubernetes).
	WatchCacheWindow time.Duration
	// WatchCacheCompactionPoll is how often a watch cache asks etcd
	// whether it has compacted the revisions of its snapshots, which it
	// then no longer serves pages or exact lists at (default 15 s, as
	// Kubernetes).
	WatchCacheCompactionPoll time.Duration
	// GCWorkers is how many objects the garbage collector processes at
	// once (default 4; see package gc).
	GCWorkers int
	// ServiceClusterIPRange is the IPv4 CIDR that Services' cluster IPs
	// are allocated from (default 10.0.0.0/24); every server sharing an
	// etcd must use the same. Its first address is default/kubernetes'.
	ServiceClusterIPRange string
	// APIServerPort is the target port of the default/kubernetes service:
	// the port the server listens on (default 6443).
	APIServerPort int
	// Verify makes the server check its shortcuts and panic where one
	// differs from what etcd has: every watch-cache event built from a
	// write hint against decoding the etcd event, every update guess
	// against a quorum read of its revision. For tests (testenv turns it
	// on); it costs a read per update.
	Verify bool
	// AlwaysAllow turns authorization off: every authenticated user may
	// do everything, as before objwatch had RBAC. By default requests are
	// authorized by RBAC (members of system:masters, such as the generated
	// admin, may do everything).
	AlwaysAllow bool
	// GCLeaseDuration is the duration of the lease that elects the one
	// server, among those sharing an etcd, that runs the garbage collector
	// (default 15 s, as kube-controller-manager's; negative: every server
	// runs it). See elector.
	GCLeaseDuration time.Duration
	// NamespaceDeletionDelay is how long after a namespace's deletion
	// starts the garbage collector deletes its content and removes its
	// "kubernetes" finalizer (kube-controller-manager's namespace
	// controller waits 5 s; objwatch serve's default). 0: at once, as
	// testenv's servers do. Meanwhile a client may finalize the namespace
	// itself (a test suite written for envtest, which runs no namespace
	// controller, does).
	NamespaceDeletionDelay time.Duration
	// Audit configures the audit log (kube-apiserver's --audit-log-*
	// flags); an empty Path records nothing. Storage and Log are filled
	// in. See package audit.
	Audit audit.Config
	// StorageProbeInterval is how often the server probes its etcd with a
	// linearizable read (default 1 s); StorageUnhealthyAfter how long the
	// probes must fail before the server counts etcd as lost (default
	// 3 s; it also bounds each probe). While it is lost /readyz
	// answers 503, open watches end with an ERROR event (503
	// ServiceUnavailable), and requests that need etcd are refused with
	// 503 without being sent to it; see package storage/health and
	// docs/ARCHITECTURE.md, "Losing etcd".
	StorageProbeInterval, StorageUnhealthyAfter time.Duration
	// EncryptionProviderConfig is the path of an apiserver.config.k8s.io/v1
	// EncryptionConfiguration (kube-apiserver's
	// --encryption-provider-config): which resources Storage keeps
	// encrypted at rest, with which providers and keys. Empty: nothing is
	// encrypted, and encrypted values fail to read. Every server of an
	// etcd needs the same. See package encryption.
	EncryptionProviderConfig string
	// StorageInitializationTimeout bounds how long the server counts as
	// not ready while the watch caches of the resources it serves at
	// start load their first list (kube-apiserver's
	// --storage-initialization-timeout, default 1 minute; negative: do
	// not wait). Meanwhile gets and lists of a loading resource are served
	// from etcd and its watches answered 429; see package objects and
	// docs/OPERATIONS.md, "Restarting".
	StorageInitializationTimeout time.Duration
	// WatchCacheStartDelay, for tests, makes every watch cache wait this
	// long before its first list, as on a large store;
	// WatchCacheStartDelayCustom only those of custom resources.
	WatchCacheStartDelay       time.Duration
	WatchCacheStartDelayCustom time.Duration
	// WatchCacheSnapshots is the directory where the watch caches keep
	// their states across restarts (objects.Config's): at start each loads
	// its state and catches up from its revision with a watch instead of
	// listing etcd. "" keeps none; so does an EncryptionProviderConfig
	// (the states hold objects in plaintext). WatchCacheSnapshotInterval
	// is how often they are written while they change (default 5 min);
	// they are also written as the server stops. See docs/OPERATIONS.md,
	// "Restarting".
	WatchCacheSnapshots        string
	WatchCacheSnapshotInterval time.Duration
	// ListEncodingsMaxSize bounds the bytes of the protobuf and CBOR
	// encodings kept with the watch caches' objects for lists, over every
	// watch cache (objects.Config's: 0 is 1 GiB; negative keeps none,
	// and each binary list encodes its items anew); past it, items are
	// encoded anew for each list.
	ListEncodingsMaxSize int64
	// History keeps every revision of every object past etcd's
	// compaction, with who made it (package history). An empty Dir keeps
	// none; the servers of one etcd should all keep one, or all write
	// author notes (WriteAuthorNotes).
	History HistoryConfig
	// DebugFault names a test fault that breaks the server on purpose, so
	// that a test can show its checks find the break (objects.Fault*,
	// `objwatch serve --debug-fault`); empty, always, in production.
	DebugFault string
}

// HistoryConfig configures the history store.
type HistoryConfig struct {
	// Dir is the store's directory (objwatch serve: DATA-DIR/history).
	Dir string
	// Retention is how long a revision is kept (default 7 days); MaxSize
	// bounds the store on disk (default 4 GiB): past it the oldest
	// revisions go first.
	Retention time.Duration
	MaxSize   int64
	// ValueCache bounds the memory for recently written keys' last values
	// (history.Options.ValueCache, whose default it takes; negative: none).
	ValueCache int64
	// ServerName names this server in the authors of its writes (default
	// the host name).
	ServerName string
	// WriteAuthorNotes makes a server without a store write author notes
	// all the same, for the servers of its etcd that keep one.
	WriteAuthorNotes bool
	// LocalAuthors makes a server with a store hand the authors of its
	// writes to its own recorder in process (history.Authors) instead of
	// writing author notes into etcd: each write costs etcd one key less,
	// but the stores of other servers on the etcd see no authors for its
	// writes, and a server killed between a write and its record loses
	// the authors of those few revisions. For a server alone on its etcd
	// (objwatch serve's embedded one). WriteAuthorNotes overrides it, and
	// so do StorageOverrides (the notes of writes to other clusters must
	// not meet the main cluster's revisions).
	LocalAuthors bool
}

// setDefaults fills in the defaults the server owns; the object
// service's (BookmarkInterval, FutureRVWait, ContinueTTL) are
// objects.Config's, the collector's and the watch cache's theirs.
func (c *Config) setDefaults() {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = 3 << 20
	}
	if c.History.Retention == 0 {
		c.History.Retention = 7 * 24 * time.Hour
	}
	if c.History.MaxSize == 0 {
		c.History.MaxSize = 4 << 30
	}
	if c.History.ServerName == "" {
		c.History.ServerName, _ = os.Hostname()
	}
	if c.MaxReadInFlight == 0 {
		c.MaxReadInFlight = 400
	}
	if c.MaxMutatingInFlight == 0 {
		c.MaxMutatingInFlight = 200
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 60 * time.Second
	}
	if c.MinWatchTimeout == 0 {
		c.MinWatchTimeout = 1800 * time.Second
	}
	if c.WatchFlushInterval == 0 {
		c.WatchFlushInterval = 10 * time.Millisecond
	}
	if c.WatchFlushIntervalMax == 0 {
		c.WatchFlushIntervalMax = 80 * time.Millisecond
	}
	if c.WatchBufferEvents == 0 {
		c.WatchBufferEvents = 10000
	}
	if c.WatchQueueLimit == 0 {
		c.WatchQueueLimit = 1000000
	}
	if c.WatchWriteTimeout == 0 {
		c.WatchWriteTimeout = time.Minute
	}
	if c.StorageInitializationTimeout == 0 {
		c.StorageInitializationTimeout = time.Minute
	}
	if c.GCLeaseDuration == 0 {
		c.GCLeaseDuration = 15 * time.Second
	}
	if c.ServiceClusterIPRange == "" {
		c.ServiceClusterIPRange = "10.0.0.0/24"
	}
	if c.APIServerPort == 0 {
		c.APIServerPort = 6443
	}
	if c.Version == "" {
		c.Version = "v1.32.0-objwatch"
	}
}

// Server serves the Kubernetes API. Create it with New, serve Handler, and
// run Run until shutdown.
type Server struct {
	cfg       Config
	store     storage.Interface
	registry  *registry.Registry
	objects   *objects.Service
	lifecycle *lifecycle.Lifecycle
	gc        *runner.Runner
	access    *access.Access
	policies  *policy.Policies
	// admissionWebhooks enforces the webhook configurations.
	admissionWebhooks *admissionwebhook.Plugin
	// admission is the admission chain (see admissionChain).
	admission []admissionStep
	api       *endpoints.API
	openapi   *openapi.Docs
	pacer     *watchstream.Pacer
	audit     *audit.Log // nil: no audit log
	// webhooks calls admission and conversion webhooks.
	webhooks *webhookclient.Client
	mux      *http.ServeMux

	ready atomic.Bool
	// storageReady waits for the watch caches (readyz
	// poststarthook/storage-readiness).
	storageReady *lifecycle.StorageReadiness
	// clusters are the etcd clusters, the main one first, each with the
	// monitor that probes it; Run runs them.
	clusters []*cluster
	// alarms follows the main etcd cluster's alarms (NOSPACE); Run runs
	// it.
	alarms *health.Alarms
	// floorLifted: CompactionFloor logged that a stalled history store
	// no longer holds etcd's compaction back.
	floorLifted atomic.Bool
	// history is the history store (nil: none, or it could not be
	// opened: historyErr says why); rawStore the etcd store it records,
	// values as they are at rest.
	history    *history.Store
	historyErr error
	// authors takes this server's author notes in process for its
	// recorder (HistoryConfig.LocalAuthors); nil: notes go to etcd.
	authors  *history.Authors
	rawStore storage.Interface
	atRest   storage.RestReader
}

// New returns a Server. It starts nothing; call Run.
func New(cfg Config) (*Server, error) {
	if cfg.Storage == nil {
		return nil, errors.New("server: no storage")
	}
	cfg.setDefaults()
	s := &Server{cfg: cfg, registry: registry.New(kube.Resources()...), rawStore: cfg.Storage,
		alarms: health.NewAlarms(cfg.Storage, cfg.StorageProbeInterval*5, cfg.Log)}
	// Every layer reads and writes through the transforming store of
	// each etcd cluster, behind the guard of its health monitor, which
	// refuses requests while that cluster is lost; with overrides, through
	// the router to the cluster of each key (openClusters). The history
	// store records the main cluster's raw values.
	store, atRest, err := s.openClusters(s.registry)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.cfg.Storage, s.store, s.atRest = store, store, atRest
	if err := s.openHistory(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if err := s.build(); err != nil {
		if s.history != nil {
			s.history.Close()
		}
		return nil, fmt.Errorf("server: %w", err)
	}
	return s, nil
}

// build builds the parts in three phases: those the object service's
// hooks come from, the object service with the admission chain, then
// (wire) what needs the object service, and the HTTP side on top.
func (s *Server) build() error {
	cfg := s.cfg
	var err error
	s.gc = runner.New(runner.Config{Registry: s.registry, Storage: cfg.Storage, Log: cfg.Log, Workers: cfg.GCWorkers, LeaseDuration: cfg.GCLeaseDuration, NamespaceDeletionDelay: cfg.NamespaceDeletionDelay})
	if s.lifecycle, err = lifecycle.New(lifecycle.Config{
		Registry: s.registry, Storage: cfg.Storage, Log: cfg.Log,
		ServiceClusterIPRange: cfg.ServiceClusterIPRange, APIServerPort: cfg.APIServerPort,
		KindsChanged: s.gc.KindsChanged,
	}); err != nil {
		return err
	}
	if s.access, err = access.New(access.Config{
		Registry: s.registry, Log: cfg.Log, AlwaysAllow: cfg.AlwaysAllow,
		Authenticator: cfg.Authenticator, TokenIssuer: cfg.TokenIssuer,
	}); err != nil {
		return err
	}
	// Admission and conversion webhooks' Services are resolved by the
	// lifecycle (ExternalName only).
	s.webhooks = webhookclient.New(s.lifecycle.ServiceIPs.ResolveService)
	if s.admissionWebhooks, err = admissionwebhook.New(admissionwebhook.Config{Registry: s.registry, Client: s.webhooks, Log: cfg.Log, Authorized: s.access.Authorized}); err != nil {
		return err
	}
	builtinModels := func() (map[string]*spec.Schema, error) { return openapi.BuiltinModels(s.registry) }
	fm, err := fieldmanager.New(fieldmanager.Config{Registry: s.registry, Verify: cfg.Verify, BuiltinModels: builtinModels})
	if err != nil {
		return err
	}
	if s.policies, err = policy.New(policy.Config{Registry: s.registry, Log: cfg.Log, Authorized: s.access.Authorized, TypeConverter: fm.TypeConverter, BuiltinModels: builtinModels}); err != nil {
		return err
	}
	if cfg.Audit.Path != "" {
		cfg.Audit.Storage, cfg.Audit.Log = cfg.Storage, cfg.Log
		if s.audit, err = audit.New(cfg.Audit); err != nil {
			return err
		}
	}
	s.admission = s.admissionChain()
	if s.objects, err = objects.New(objects.Config{
		Storage: cfg.Storage, Registry: s.registry, Log: cfg.Log,
		FutureRVWait: cfg.FutureRVWait, ContinueTTL: cfg.ContinueTTL, BookmarkInterval: cfg.BookmarkInterval,
		DisableWatchCache: cfg.DisableWatchCache, WatchCacheWindow: cfg.WatchCacheWindow,
		WatchCacheCompactionPoll: cfg.WatchCacheCompactionPoll, WatchBufferEvents: cfg.WatchBufferEvents, WatchQueueLimit: max(0, cfg.WatchQueueLimit), Verify: cfg.Verify,
		Hooks: chainHooks(s.admission), FieldManager: fm, DebugFault: cfg.DebugFault, CacheStartDelay: cfg.WatchCacheStartDelay, CustomCacheStartDelay: cfg.WatchCacheStartDelayCustom,
		WatchCacheSnapshots: snapshotDir(cfg), WatchCacheSnapshotInterval: cfg.WatchCacheSnapshotInterval, ListEncodingsMaxSize: cfg.ListEncodingsMaxSize,
		AuthorNotes: cfg.History.Dir != "" || cfg.History.WriteAuthorNotes, Authors: s.authors, ServerName: cfg.History.ServerName, History: s.history, AtRest: s.atRest,
	}); err != nil {
		return err
	}
	s.wire()
	s.pacer = watchstream.NewPacer(cfg.WatchFlushInterval, cfg.WatchFlushIntervalMax)
	if s.api, err = endpoints.New(endpoints.Config{
		Objects: s.objects, Registry: s.registry, Authenticator: cfg.Authenticator, Authorize: s.access.Authorize,
		Log: cfg.Log, Metrics: cfg.Metrics, Pacer: s.pacer, Audit: s.audit, FieldManager: fm,
		MaxRequestBytes: cfg.MaxRequestBytes, MaxReadInFlight: cfg.MaxReadInFlight, MaxMutatingInFlight: cfg.MaxMutatingInFlight,
		UserInFlightShare: cfg.UserInFlightShare, ExecutionSeats: cfg.ExecutionSeats, WatchEventCPU: cfg.WatchEventCPU, WatchWriters: cfg.WatchWriters,
		RequestTimeout: cfg.RequestTimeout, MinWatchTimeout: cfg.MinWatchTimeout, NoExtensions: cfg.WithoutWatchExtensions, WatchWriteTimeout: cfg.WatchWriteTimeout,
	}); err != nil {
		return err
	}
	if cfg.Metrics != nil {
		cs := append(s.gc.Metrics(), s.healthMetrics()...)
		cs = append(cs, s.watchCacheMetrics()...)
		if s.audit != nil {
			cs = append(cs, s.audit.Collectors()...)
		}
		if s.history != nil {
			cs = append(cs, s.history.Collectors()...)
		}
		for _, c := range cs {
			if err := cfg.Metrics.Register(c); err != nil {
				return err
			}
		}
	}
	s.openapi = openapi.New(s.registry, cfg.Log, cfg.Version)
	s.routes()
	return nil
}

// watchCacheMetrics are the watch caches' metrics: the bytes of the
// binary encodings kept with their objects for lists (bounded by
// ListEncodingsMaxSize), and the encodings not kept for lack of room.
func (s *Server) watchCacheMetrics() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "objwatch_watch_cache_kept_encoding_bytes",
			Help: "Bytes of the protobuf and CBOR encodings kept with the watch caches' objects for lists (at most --watch-cache-list-encodings-max-size).",
		}, func() float64 { return float64(s.objects.Counts().KeptEncodingBytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "objwatch_watch_cache_encodings_not_kept_total",
			Help: "List item encodings made but not kept with their watch cache object because --watch-cache-list-encodings-max-size was reached.",
		}, func() float64 { return float64(s.objects.Counts().EncodingsNotKept) }),
	}
}

// wire gives the parts built before the object service that service and
// the other edges their constructors could not take (they would form a
// cycle): the one place a part is given something after it was built.
func (s *Server) wire() {
	s.lifecycle.Use(s.objects, s.webhooks) // the webhooks convert CRDs' versions
	s.gc.Use(s.objects, s.lifecycle)
	s.access.Use(s.objects)
	s.policies.Use(s.objects)
	s.admissionWebhooks.Use(s.objects)
	if s.cfg.Authenticator != nil {
		s.cfg.Authenticator.SetServiceAccountLookup(s.access.ServiceAccount)
	}
	s.storageReady = &lifecycle.StorageReadiness{Pending: s.objects.Caches().Unready, Timeout: max(0, s.cfg.StorageInitializationTimeout), Log: s.cfg.Log}
}

// snapshotDir is where the watch caches keep their states: none with
// encryption at rest, which they would write in plaintext; the states a
// start without it left there are removed.
func snapshotDir(cfg Config) string {
	if cfg.WatchCacheSnapshots != "" && cfg.EncryptionProviderConfig != "" {
		if err := os.RemoveAll(cfg.WatchCacheSnapshots); err != nil {
			cfg.Log.Warn("watch caches: remove the saved states (plaintext) of a start without encryption at rest", "dir", cfg.WatchCacheSnapshots, "err", err)
		}
		cfg.Log.Info("watch caches: no saved states with encryption at rest (they would be plaintext on disk)")
		return ""
	}
	return cfg.WatchCacheSnapshots
}

// Registry returns the served resources.
func (s *Server) Registry() *registry.Registry { return s.registry }

// Run bootstraps the default namespaces, keeps the served custom resources
// in step with the stored CRDs, and blocks until ctx ends. Open watches end
// when it returns.
func (s *Server) Run(ctx context.Context) error {
	if err := rungroup.Run(ctx, s.components()...); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

// components are what Run starts, in order; it stops them in the
// reverse order, each once the one started after it has returned. Their
// contexts end with Run's, but for the detached ones, which end only when
// they are stopped.
func (s *Server) components() []rungroup.Component {
	// The storage probes run first and stop last: everything else may
	// wait on etcd, and the guard refuses at once what would wait in vain.
	var cs []rungroup.Component
	for _, c := range s.clusters {
		cs = append(cs, rungroup.Component{Name: "storage health" + c.suffix(), Run: c.monitor.Run, Detached: true})
	}
	cs = append(cs, rungroup.Component{Name: "etcd alarms", Run: s.alarms.Run, Detached: true})
	for _, c := range s.clusters {
		if c.shared != nil {
			// Stopped once the caches and the recorder it feeds have.
			cs = append(cs, rungroup.Component{Name: "shared etcd watch" + c.suffix(), Run: c.shared})
		}
	}
	if s.history != nil {
		// Closed once every reader stopped.
		cs = append(cs, rungroup.Component{Name: "history", Run: s.recordHistory, Stop: func() { s.history.Close() }})
	}
	if s.audit != nil {
		// Stopped last but one: records of requests still ending are
		// written.
		cs = append(cs, rungroup.Component{Name: "audit log", Run: s.audit.Run, Detached: true})
	}
	cs = append(cs,
		rungroup.Component{Name: "object service", Stop: s.objects.Close},
		rungroup.Component{Name: "webhook client", Stop: s.webhooks.Close},
		rungroup.Component{Name: "watches", Stop: s.api.StopWatches}, // open watches end
		rungroup.Component{Name: "watch pacer", Run: s.pacer.Run},
		rungroup.Component{Name: "garbage collector", Run: s.gc.Run},
		// Policies are enforced for the server's own writes too, the
		// bootstrap's included: their feeds start first.
		rungroup.Component{Name: "admission policies", Run: s.policies.Run},
		// The webhook configurations are followed before anything is
		// written: admission waits until they are known, the bootstrap's
		// writes included.
		rungroup.Component{Name: "admission webhooks", Run: s.admissionWebhooks.Run},
		rungroup.Component{Name: "bootstrap", Ready: s.lifecycle.Bootstrap},
		rungroup.Component{Name: "kubernetes service", Run: s.lifecycle.ServiceIPs.KeepKubernetesService},
		rungroup.Component{Name: "bootstrap RBAC policy", Ready: s.access.Bootstrap},
		// Like Kubernetes, fill every resource's watch cache at start
		// rather than on the first request.
		rungroup.Component{Name: "watch caches", Ready: func(context.Context) error {
			s.objects.Caches().Start()
			s.storageReady.Start()
			return nil
		}},
	)
	if s.cfg.TokenIssuer != nil {
		keys := &lifecycle.ServiceAccountKeys{Storage: s.store, Issuer: s.cfg.TokenIssuer, Log: s.cfg.Log}
		cs = append(cs, rungroup.Component{Name: "service-account keys", Run: keys.Run})
	}
	return append(cs,
		rungroup.Component{Name: "rbac", Run: s.access.Run},
		// Ready once requests can be authorized and admitted: every role
		// and binding is in the index, every webhook configuration and
		// admission policy known (after each list of the CRDs).
		rungroup.Component{Name: "custom resource definitions", Run: func(ctx context.Context) {
			var once sync.Once
			s.lifecycle.CRDs.Run(ctx, func() {
				once.Do(func() {
					// The caches of the CRDs served at start count for
					// storage readiness.
					s.objects.Caches().CountStarted()
					s.storageReady.Known()
				})
				if chainSynced(ctx, s.admission) {
					s.ready.Store(true)
				}
			})
		}},
	)
}

// AdmissionWebhookInstalled reports whether this server enforces the
// admission webhook configuration of kind (MutatingWebhookConfiguration
// or ValidatingWebhookConfiguration) named name at resourceVersion rv or
// later; testenv waits for it after registering a webhook.
func (s *Server) AdmissionWebhookInstalled(kind, name string, rv int64) bool {
	return s.admissionWebhooks.Installed(kind, name, rv)
}

// Ready reports whether Run has finished its initial work: bootstrapped,
// and the watch caches of the resources served at start no longer loading
// (loaded, or their list failed: their reads go to etcd, which reports
// why), or StorageInitializationTimeout passed. /readyz also waits for
// a failed cache (until the timeout), as kube-apiserver's does.
func (s *Server) Ready() bool {
	return s.ready.Load() && (s.storageReady.Check() == nil || len(s.objects.Caches().Loading()) == 0)
}

// Handler returns the HTTP handler for the whole API.
func (s *Server) Handler() http.Handler {
	return s.api.WithRecovery(s.api.WithAuthentication(s.api.WithAudit(s.mux)))
}

func (s *Server) routes() {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", s.healthz)
	mux.HandleFunc("/livez", s.healthz)
	mux.HandleFunc("/readyz", s.readyz)
	mux.HandleFunc("/healthz/", s.healthz)
	mux.HandleFunc("/livez/", s.healthz)
	mux.HandleFunc("/readyz/", s.readyz)
	mux.Handle("/metrics", s.metricsHandler())
	mux.HandleFunc("/version", s.version)
	mux.HandleFunc("/version/", s.version)
	mux.HandleFunc("/api", s.api.DiscoveryAPI)
	mux.HandleFunc("/api/", s.api.Resources)
	mux.HandleFunc("/apis", s.api.DiscoveryAPIs)
	mux.HandleFunc("/apis/", s.api.Resources)
	mux.HandleFunc(endpoints.ChangesPath, s.api.Changes)
	mux.HandleFunc("/openapi/", s.openapi.ServeV3)
	mux.HandleFunc(openapi.V2Path, s.openapi.ServeV2)
	if !s.cfg.DisableProfiling {
		// Like kube-apiserver's --profiling (on by default), for
		// authenticated users only.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			s.api.RootPaths(w, r)
			return
		}
		endpoints.WriteStatus(w, apierrors.NewNotFound(schema.GroupResource{}, ""))
	})
	s.mux = mux
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok"))
}

// readyz answers /readyz as kube-apiserver does: each check a line with
// ?verbose ("[+]name ok", "[-]name failed: reason") and on any failure
// (503, with the reasons: objwatch does not withhold them), "ok" alone
// otherwise; /readyz/NAME runs one check.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	// The background monitors' verdicts: readyz costs nothing and says
	// the same as the refusals of requests.
	checks := append([]readyCheck{{"ping", func() error { return nil }}}, s.storageChecks()...)
	checks = append(checks, []readyCheck{
		// etcd at its quota (NOSPACE) refuses writes: not ready, though
		// reads and watches go on (docs/OPERATIONS.md).
		{"etcd-alarms", s.alarms.Err},
		{"poststarthook/objwatch-bootstrap", func() error {
			if !s.ready.Load() {
				return errors.New("bootstrap not finished")
			}
			return nil
		}},
		{"poststarthook/storage-readiness", s.storageReady.Check},
	}...)
	only := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/readyz"), "/")
	var out strings.Builder
	failed, found := false, only == ""
	for _, c := range checks {
		if only != "" && c.name != only {
			continue
		}
		found = true
		if err := c.check(); err != nil {
			failed = true
			fmt.Fprintf(&out, "[-]%s failed: %v\n", c.name, err)
		} else {
			fmt.Fprintf(&out, "[+]%s ok\n", c.name)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch {
	case !found:
		http.Error(w, "no such readiness check: "+only, http.StatusNotFound)
	case failed:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "%sreadyz check failed\n", out.String())
	case r.URL.Query().Has("verbose"):
		fmt.Fprintf(w, "%sreadyz check passed\n", out.String())
	default:
		w.Write([]byte("ok"))
	}
}

// readyCheck is one check of /readyz.
type readyCheck struct {
	name  string
	check func() error
}

func (s *Server) version(w http.ResponseWriter, r *http.Request) {
	v := map[string]string{
		"major": "1", "minor": "32", "gitVersion": s.cfg.Version,
		"platform": "objwatch", "goVersion": runtime.Version(),
	}
	if !s.cfg.WithoutWatchExtensions {
		// objwatch's extension: the watch extensions this server takes
		// (a flat string, as every field of Kubernetes' version.Info).
		v["watchExtensions"] = endpoints.WatchExtensions
	}
	if s.history != nil && !s.history.Damaged() {
		// objwatch's extension: past reads (asOf, exact revisions past
		// etcd's compaction, changes) are answered from a history store.
		v["history"] = "asOf,changes"
	}
	endpoints.WriteJSON(w, http.StatusOK, v)
}

func (s *Server) metricsHandler() http.Handler {
	g := s.cfg.Gatherer
	if g == nil {
		g = prometheus.DefaultGatherer
	}
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}
