// Package objects is the object service: create, get, list, update,
// delete and watch on the served resources, over a storage.Interface and
// the resources' watch caches. It knows nothing of HTTP: requests are typed
// values (Request, WriteOptions, apimachinery's option types), results and
// warnings are returned as values, failures are *apierrors.StatusError
// values carrying the metav1.Status to send (package apistatus).
//
// Every writer goes through it: the HTTP endpoints, the garbage collector,
// namespace and custom-resource cleanup, the collector's election aside
// (which writes its lease directly, below any API).
//
// # Where the rest of the server plugs in
//
// Five named places, each a field of Hooks, run synchronously inside the
// request, in this order:
//
//   - Authorize: the one authorization point. Every method calls it first
//     with the Request, which carries the authenticated user.
//   - Mutate: mutating admission, on every create and update attempt
//     (an Attempt), after managedFields are recorded and before the
//     object is prepared, defaulted and validated. Admission policies and
//     webhooks plug in here.
//   - Admit: after defaulting and validation, before the write; it may
//     refuse the write, or take something the write needs (a Service's
//     cluster IP) and give back how to undo it. Namespace lifecycle, RBAC
//     escalation checks and cluster IP allocation plug in here.
//   - Validate: validating admission, after Admit, on every create,
//     update and delete attempt. Admission policies and webhooks plug in
//     here.
//   - Written: after every successful write, with the stored old and new
//     object (old nil for a create, new nil for a completed deletion).
//     Deletion-started bookkeeping and IP release plug in here; audit
//     diffs will. Dry runs never reach it.
//
// # Semantics
//
// resourceVersion is the etcd revision. Reads follow Kubernetes'
// resourceVersion and resourceVersionMatch rules, served from the watch
// cache where those rules allow, as Kubernetes' cacher with
// ListFromCacheSnapshot: resourceVersion "0" (the limit ignored),
// consistent and NotOlderThan lists with or without a limit, and exact
// revisions and continue tokens at a revision the cache still holds a
// snapshot of (see Caches.list; etcd serves older ones, or answers
// 410). A page has etcd's items, continue token, remainingItemCount and
// resourceVersion, so a walk may move between the cache and etcd, or
// between servers. Writes are conditional etcd transactions: a stale
// update gets 409 Conflict and nothing is ever half-written.
// Updates of one key through one service take turns (keyLocks) and start
// from the watch cache's copy when it can stand in for etcd's (see
// updatecache.go).
//
// # While a watch cache loads
//
// After a (re)start each cache loads its resource's objects (see package
// storage/watchcache, "Starting"); until it has, requests are not held,
// as in Kubernetes (KEP 4568): gets and pages of lists (a limit, no
// selector) are served from etcd, and watches of clients answered 429
// TooManyRequests "storage is (re)initializing" with a Retry-After
// growing with the time the cache has been loading (cacheNotReady). A
// client's list without a limit, or with a selector, waits for the cache
// (Kubernetes refuses it with 429): read from etcd, a large collection's
// full lists would take what the cache needs to load. The server's own
// lists go to etcd, and its followers (requests without a user) wait for
// the cache. Caches.Unready and Caches.Loading tell the server's readiness
// which caches started at start have not loaded.
//
// # Versions
//
// A resource served in several versions over one storage (a CRD's,
// registry.Resource.Versions) is written in its storage version and read
// in the version asked for: every stored object is converted on the way
// out (a list page in one conversion; a watch cache converts each event
// once for all its watchers) and every written object on the way in. A
// conversion webhook's failure on a write is a 500 before anything is
// written; on a read a 500 InternalError, with kube-apiserver's messages.
//
// # Concurrency
//
// A Service is safe for concurrent use. It owns one watch cache per served
// resource (Caches), started on first use (or by Caches.Start) and stopped by
// Caches.Prune and Close; Close must be called once the service is no
// longer used. A Source returned by Watch belongs to its caller, who must
// Stop it.
package objects

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/history"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// Config configures a Service. Zero durations take the documented
// defaults.
type Config struct {
	// Storage holds the objects. Required.
	Storage storage.Interface
	// Registry is the served resources. Required.
	Registry *registry.Registry
	// Log receives the service's logs; default slog.Default().
	Log *slog.Logger
	// FutureRVWait is how long a request for a resourceVersion newer than
	// the store waits before 504 "Too large resource version" (default 3 s).
	FutureRVWait time.Duration
	// ContinueTTL is how long a continue token stays valid (default 5 min).
	ContinueTTL time.Duration
	// BookmarkInterval between bookmarks on watches that allow them
	// (default 1 min).
	BookmarkInterval time.Duration
	// DisableWatchCache serves every list and watch from etcd directly.
	DisableWatchCache bool
	// WatchCacheWindow is the minimum history a watch cache keeps.
	WatchCacheWindow time.Duration
	// WatchCacheCompactionPoll is how often a watch cache asks the store
	// whether it compacted its snapshots' revisions (watchcache's
	// CompactionPoll).
	WatchCacheCompactionPoll time.Duration
	// WatchBufferEvents bounds the events queued for one cached watch.
	WatchBufferEvents int
	// WatchQueueLimit bounds the events queued for all cached watches of
	// one resource together (watchcache.Config.MaxQueued; 0: no bound).
	WatchQueueLimit int
	// WatchCacheSnapshots is the directory where each watch cache keeps
	// its state across restarts (a file per resource version, package
	// storage/watchcache/cachefile), written every
	// WatchCacheSnapshotInterval while it changes (default 5 min) and by
	// Close, and loaded at start (see Caches); "" keeps none.
	WatchCacheSnapshots        string
	WatchCacheSnapshotInterval time.Duration
	// ListEncodingsMaxSize bounds the bytes of the binary encodings of
	// cached objects kept for protobuf and CBOR lists (List.Encoded),
	// over every watch cache of the service (a watchcache.Budget): past
	// it, items are encoded anew for each list until kept ones leave
	// their caches (0: DefaultListEncodingsMaxSize; negative: none kept,
	// every such list encodes its items anew and the caches hold no
	// second copy of any object).
	ListEncodingsMaxSize int64
	// encodings is the budget of ListEncodingsMaxSize (New makes it).
	encodings *watchcache.Budget
	// Verify checks the service's shortcuts against etcd and panics where
	// one differs: write hints against decoding the etcd event, update
	// guesses against a quorum read. For tests.
	Verify bool
	// Hooks are where the rest of the server plugs in.
	Hooks Hooks
	// FieldManager keeps metadata.managedFields on every write and merges
	// applies (package fieldmanager). nil: managedFields are stored as
	// clients send them and Apply is refused with 415.
	FieldManager FieldManager
	// DebugFault names a test fault that breaks the service on purpose
	// (debugfault.go); empty in production.
	DebugFault string
	// CacheStartDelay, for tests, makes every watch cache wait this long
	// before its first list, as a cache on a large store takes to load.
	CacheStartDelay time.Duration
	// CustomCacheStartDelay, for tests, delays only the caches of custom
	// resources (after CacheStartDelay).
	CustomCacheStartDelay time.Duration
	// AuthorNotes makes every write carry an author note (see noted and
	// package history), naming ServerName as the server that made it.
	AuthorNotes bool
	ServerName  string
	// Authors, with AuthorNotes, takes the notes in process for this
	// server's history recorder instead of etcd (history.Authors).
	Authors *history.Authors
	// History is the history store past reads are answered from when
	// etcd has compacted them (nil: none); AtRest transforms its values,
	// kept as they are at rest, back (nil: they are kept as written).
	History *history.Store
	AtRest  storage.RestReader
}

// FieldManager keeps server-side apply's field ownership
// (metadata.managedFields). Implementations are safe for concurrent use.
type FieldManager interface {
	// Update returns obj with its managedFields recording manager's
	// change of live (nil for a create) to obj through subresource. It
	// never fails: what it cannot track keeps live's managedFields.
	Update(res *registry.Resource, subresource string, live, obj *unstructured.Unstructured, manager string) *unstructured.Unstructured
	// Apply merges patch, manager's applied configuration, into live (nil
	// when there is no object yet) and returns the object to write, or a
	// Status error: 409 for conflicts unless force.
	Apply(res *registry.Resource, subresource string, live, patch *unstructured.Unstructured, manager string, force bool) (*unstructured.Unstructured, error)
}

// Request is one operation on a served resource: who asks, what for, and
// which object (Name empty: the collection, or a create).
type Request struct {
	// User is the authenticated user; nil for the server's own writes
	// (garbage collection, namespace cleanup).
	User *auth.User
	// Actor names, for the server's own writes, the controller that
	// makes them (the garbage collector's service account), for audit
	// records; empty: the server itself.
	Actor string
	// Verb is Kubernetes' verb: get, list, watch, create, update, patch,
	// delete or deletecollection.
	Verb        string
	Resource    *registry.Resource
	Namespace   string
	Name        string
	Subresource string
	// SelectedName is, for a list, watch or deletecollection, the one
	// name its field selector requires (metadata.name=NAME), which RBAC's
	// resourceNames may allow; the service sets it before Authorize.
	SelectedName string
	// DryRun: nothing is stored (set by the write methods from their
	// options, for Admit).
	DryRun bool
}

// Write is what Hooks.Written sees of one successful write.
type Write struct {
	Request *Request
	// Old is the stored object before the write (nil for a create); New
	// the stored object after it (nil when the write deleted it). Both
	// carry their resourceVersion.
	Old, New *unstructured.Unstructured
	// Revision is the write's etcd revision.
	Revision int64
}

// WriteOptions are the options every create, update and patch has.
type WriteOptions struct {
	DryRun bool
	// FieldManager names the writer: the manager of its managedFields
	// entry (the caller falls back to the User-Agent's first segment, as
	// kube-apiserver does). An apply requires it.
	FieldManager string
	// Force: an apply takes the fields other managers own instead of
	// failing with a conflict.
	Force bool
	// FieldValidation is Strict, Warn (the default) or Ignore: what an
	// unknown field is.
	FieldValidation string
}

// Result is a write's outcome. Warnings are set even when the write
// failed: they are sent with the error.
type Result struct {
	Object *unstructured.Unstructured
	// Raw, when set, is Object encoded as JSON with its resourceVersion:
	// the stored bytes themselves, ready to send.
	Raw      []byte
	Warnings []string
	// Deleted: a delete removed the object (false: it is marked and kept
	// while finalizers run).
	Deleted bool
	// Created: an apply created the object.
	Created bool
}

// Service serves objects: the verbs, each running the hook points in
// order (hooks.go). Reads go to its watch caches where those may answer
// (Caches) and to etcd otherwise (storeReader); updates start from a
// guess where one is good (guesses) and take turns per key (keyLocks).
// Create it with New; call Close when done.
type Service struct {
	cfg      Config
	store    storage.Interface // where writes go
	registry *registry.Registry

	etcd     storeReader
	caches   Caches
	hooks    hookPoints
	guesses  guesses     // see updatecache.go
	keyLocks *keyLocks   // see guaranteedUpdate
	fault    *debugFault // nil: none (the only case in production)

	// conflictReads counts attempts that started from a conflict's state
	// (Counts.ConflictReads).
	conflictReads atomic.Int64
}

// New returns a Service. It starts nothing.
func New(cfg Config) (*Service, error) {
	if cfg.Storage == nil || cfg.Registry == nil {
		return nil, errors.New("objects: no storage or registry")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.FutureRVWait == 0 {
		cfg.FutureRVWait = 3 * time.Second
	}
	if cfg.ContinueTTL == 0 {
		cfg.ContinueTTL = 5 * time.Minute
	}
	if cfg.BookmarkInterval == 0 {
		cfg.BookmarkInterval = time.Minute
	}
	if cfg.ListEncodingsMaxSize == 0 {
		cfg.ListEncodingsMaxSize = DefaultListEncodingsMaxSize
	}
	cfg.encodings = watchcache.NewBudget(cfg.ListEncodingsMaxSize) // negative: keeps nothing
	fault, err := newDebugFault(cfg.DebugFault)
	if err != nil {
		return nil, err
	}
	etcd := storeReader{store: cfg.Storage, futureRVWait: cfg.FutureRVWait, bookmarkEvery: cfg.BookmarkInterval}
	if cfg.History != nil {
		etcd.past = &pastReader{hs: cfg.History, atRest: cfg.AtRest, wait: cfg.FutureRVWait}
	}
	s := &Service{
		cfg: cfg, store: cfg.Storage, registry: cfg.Registry,
		etcd: etcd, hooks: hookPoints{cfg.Hooks},
		keyLocks: newKeyLocks(), fault: fault,
	}
	s.caches.cfg, s.caches.etcd = cfg, etcd
	s.guesses = guesses{caches: &s.caches, store: cfg.Storage, verify: cfg.Verify, noCache: cfg.DisableWatchCache, keys: newGuessKeyMap()}
	return s, nil
}

// Close stops every watch cache; watches served from them end. The
// service answers no more cached requests after it.
func (s *Service) Close() { s.caches.close() }

// Registry returns the served resources.
func (s *Service) Registry() *registry.Registry { return s.registry }

// Storage returns the store the service writes to, for the parts of the
// server that keep records outside any resource (cluster IP claims).
func (s *Service) Storage() storage.Interface { return s.store }

// Caches returns the service's watch caches.
func (s *Service) Caches() *Caches { return &s.caches }

// Counts are how the service's shortcuts fared since it started.
type Counts struct {
	// GuessesUsed counts the updates that started from the cache,
	// GuessesStale those whose guess was older than etcd, and
	// GuessesRechecked those whose answer without a write had to be
	// re-checked against etcd.
	GuessesUsed, GuessesStale, GuessesRechecked int64
	// GuessesFromLastWrite counts guesses that were this service's own
	// previous write of the key, not the cache's copy.
	GuessesFromLastWrite int64
	// ConflictReads counts update and delete attempts that started from
	// the state a conflicting write returned instead of reading etcd.
	ConflictReads int64
	// HintsUsed counts watch-cache events built from write hints.
	HintsUsed int64
	// CachedPages counts the lists with a limit, a continue token or an
	// exact resourceVersion that the watch cache served.
	CachedPages int64
	// DroppedFrames counts the watch frames without managedFields the
	// caches encoded (each shared by every watch that drops them).
	DroppedFrames int64
	// ShapedFrames counts the frames the caches made for watches with
	// extensions (projections and patches, each shared by every watch
	// with the same options).
	ShapedFrames int64
	// EncodedFrames counts the watch events the caches encoded in a
	// watch's binary encoding (WatchOptions.Encode, each shared by every
	// watch of that encoding).
	EncodedFrames int64
	// ListItemsEncoded counts the list items the caches' objects were
	// encoded in for binary lists (List.Encoded): once per object
	// revision and encoding, then reused by every list, as long as
	// ListEncodingsMaxSize has room for them.
	ListItemsEncoded int64
	// KeptEncodingBytes is the bytes of the encodings kept with the
	// caches' objects now (at most ListEncodingsMaxSize), and
	// EncodingsNotKept counts the encodings made for a list but not kept
	// for lack of room.
	KeptEncodingBytes, EncodingsNotKept int64
}

// DefaultListEncodingsMaxSize is ListEncodingsMaxSize's default: 1 GiB,
// the protobuf encodings of about 850,000 ConfigMaps of 1.2 KB.
const DefaultListEncodingsMaxSize = 1 << 30

// Counts returns the shortcut counters.
func (s *Service) Counts() Counts {
	g := &s.guesses
	return Counts{
		GuessesUsed: g.used.Load(), GuessesStale: g.stale.Load(),
		GuessesRechecked: g.rechecked.Load(), GuessesFromLastWrite: g.fromLastWrite.Load(),
		ConflictReads: s.conflictReads.Load(), HintsUsed: s.caches.hintsUsed.Load(),
		CachedPages: s.caches.cachedPages.Load(), DroppedFrames: s.caches.dropped.madeCount(),
		ShapedFrames: s.caches.shapes.made.Load(), EncodedFrames: s.caches.encoded.madeCount(),
		ListItemsEncoded:  s.caches.listItemsEncoded.Load(),
		KeptEncodingBytes: s.cfg.encodings.Used(), EncodingsNotKept: s.cfg.encodings.Refused(),
	}
}

func gr(res *registry.Resource) schema.GroupResource {
	return schema.GroupResource{Group: res.Group, Resource: res.Plural}
}
