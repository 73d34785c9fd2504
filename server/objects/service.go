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
// snapshot of (see listFromCache; etcd serves older ones, or answers
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
// the cache. UnreadyCaches and LoadingCaches tell the server's readiness
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
// resource, started on first use (or by StartCaches) and stopped by
// PruneCaches and Close; Close must be called once the service is no
// longer used. A Source returned by Watch belongs to its caller, who must
// Stop it.
package objects

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
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
	// Verify checks the service's shortcuts against etcd and panics where
	// one differs: write hints against decoding the etcd event, update
	// guesses against a quorum read. For tests.
	Verify bool
	// Hooks are where the rest of the server plugs in.
	Hooks Hooks
	// Fields keeps metadata.managedFields on every write and merges
	// applies (package fields). nil: managedFields are stored as clients
	// send them and Apply is refused with 415.
	Fields FieldManager
	// DebugFault names a test fault that breaks the service on purpose
	// (debugfault.go); empty in production.
	DebugFault string
	// CacheStartDelay, for tests, makes every watch cache wait this long
	// before its first list, as a cache on a large store takes to load.
	CacheStartDelay time.Duration
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

// Hooks are the named places where authorization, lifecycle, admission
// and audit plug into every request (see the package doc). Each runs
// synchronously in the request that calls it; nil fields do nothing.
type Hooks struct {
	// Authorize decides whether req may proceed; an error (a 403 Status)
	// refuses it. nil allows everything.
	Authorize func(ctx context.Context, req *Request) error
	// AuthorizationChanged, if set, returns a context that is done when
	// Authorize's decision on req may have changed (a role or binding
	// changed), or nil when it cannot change (the server itself, an
	// unrestricted user). An open watch then asks Authorize again, and a
	// refusal ends it with that error as an ERROR event: a revoked
	// permission does not keep streaming until the watch's timeout.
	AuthorizationChanged func(req *Request) context.Context
	// Admit run in order before a create or update (each attempt of it)
	// is written, with the object to write and, for an update, the
	// current one. An error refuses the write. undo, if not nil, is
	// called when a create's write then fails (an update's undo is not
	// called: no hook takes anything for one yet). Admit runs for dry
	// runs too (req.DryRun): it must take nothing then.
	Admit []func(ctx context.Context, req *Request, obj, old *unstructured.Unstructured) (undo func(), err error)
	// Mutate run in order on every create and update attempt, after the
	// change is recorded in managedFields and before the object is
	// prepared, defaulted and validated (mutating admission: policies,
	// then webhooks). They may change a.Object; an error refuses the
	// write. They run for dry runs too (a.Request.DryRun).
	Mutate []func(ctx context.Context, a *Attempt) error
	// Validate run in order after Admit on every create, update and
	// delete attempt (validating admission: policies, then webhooks);
	// they must not change the object. An error refuses the write.
	Validate []func(ctx context.Context, a *Attempt) error
	// Written run in order after every successful write.
	Written []func(ctx context.Context, w Write)
	// Review answers a create of a Review resource (req.Resource.Review)
	// or of a review subresource (req.Resource.Reviews[req.Subresource]):
	// obj is the decoded request, the result the answer. Nothing is
	// stored. nil answers every review with 405.
	Review func(ctx context.Context, req *Request, obj *unstructured.Unstructured) (*unstructured.Unstructured, error)
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

// Service serves objects. Create it with New; call Close when done.
type Service struct {
	cfg      Config
	store    storage.Interface
	registry *registry.Registry

	caches    caches
	keyLocks  *keyLocks    // see guaranteedUpdate
	guessKeys *guessKeyMap // see updatecache.go
	counts    counts
	hooks     testHooks
	fault     *debugFault // nil: none (the only case in production)

	// closed ends when Close is called: no cache starts after it.
	closed context.Context
	close  context.CancelFunc
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
	fault, err := newDebugFault(cfg.DebugFault)
	if err != nil {
		return nil, err
	}
	s := &Service{
		cfg: cfg, store: cfg.Storage, registry: cfg.Registry,
		keyLocks: newKeyLocks(), guessKeys: newGuessKeyMap(), fault: fault,
	}
	s.closed, s.close = context.WithCancel(context.Background())
	return s, nil
}

// Close stops every watch cache; watches served from them end. The
// service answers no more cached requests after it.
func (s *Service) Close() {
	s.close()
	s.pruneCaches(true)
}

// Registry returns the served resources.
func (s *Service) Registry() *registry.Registry { return s.registry }

// Storage returns the store the service writes to, for the parts of the
// server that keep records outside any resource (cluster IP claims).
func (s *Service) Storage() storage.Interface { return s.store }

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
}

// counts is Counts as it is kept: safe for concurrent use.
type counts struct {
	used, stale, rechecked, fromLastWrite, conflictReads, hintsUsed, cachedPages atomic.Int64
}

// Counts returns the shortcut counters.
func (s *Service) Counts() Counts {
	return Counts{
		GuessesUsed: s.counts.used.Load(), GuessesStale: s.counts.stale.Load(),
		GuessesRechecked: s.counts.rechecked.Load(), GuessesFromLastWrite: s.counts.fromLastWrite.Load(),
		ConflictReads: s.counts.conflictReads.Load(), HintsUsed: s.counts.hintsUsed.Load(),
		CachedPages: s.counts.cachedPages.Load(),
	}
}

func gr(res *registry.Resource) schema.GroupResource {
	return schema.GroupResource{Group: res.Group, Resource: res.Plural}
}

// authorize is the one authorization point (Hooks.Authorize).
func (s *Service) authorize(ctx context.Context, req *Request) error {
	if s.cfg.Hooks.Authorize == nil {
		return nil
	}
	return s.cfg.Hooks.Authorize(ctx, req)
}

// admit runs Hooks.Admit, then Hooks.Validate, on a's object; the undos
// release what the hooks took.
func (s *Service) admit(ctx context.Context, a *Attempt) (undos, error) {
	var us undos
	for _, h := range s.cfg.Hooks.Admit {
		u, err := h(ctx, a.Request, a.Object, a.Old)
		if err != nil {
			us.run()
			return nil, err
		}
		if u != nil {
			us = append(us, u)
		}
	}
	if err := s.validate(ctx, a); err != nil {
		us.run()
		return nil, err
	}
	return us, nil
}

// undos release what admission took for a write that then failed.
type undos []func()

func (us undos) run() {
	for _, u := range us {
		u()
	}
}

// written runs Hooks.Written: the one place that sees every successful
// write's stored old and new object.
func (s *Service) written(ctx context.Context, req *Request, old, new *unstructured.Unstructured, rev int64) {
	for _, h := range s.cfg.Hooks.Written {
		h(ctx, Write{Request: req, Old: old, New: new, Revision: rev})
	}
}
