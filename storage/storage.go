// Package storage defines objwatch's storage contract: a key-value store with
// MVCC revisions, optimistic concurrency and ordered watches, shaped after
// etcd's API because etcd is what objwatch stores objects in.
//
// Values are opaque bytes (the server stores JSON). Revisions are the store's
// global, monotonically increasing modification counter; the server exposes
// them to clients as resourceVersion.
//
// A store may keep values transformed at rest (encrypted, see Transforming):
// callers always see the values they wrote, never the stored form.
//
// The only implementation lives in storage/etcd; storage/storagetest holds the
// conformance suite any implementation (and the watch cache in front of it)
// must pass.
package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"k8s.io/apiserver/pkg/storage/value"
)

// Sentinel errors. Implementations wrap them; callers test with errors.Is.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: a create found the key already present.
	ErrExists = errors.New("already exists")
	// ErrConflict: the key's modification revision differs from the one the
	// caller expected (optimistic concurrency failure), or it was deleted.
	// Conditional writes report it as a *ConflictError with the current
	// value where the store has it.
	ErrConflict = errors.New("modification revision mismatch")
	// ErrCompacted: the requested revision is older than the store's history.
	ErrCompacted = errors.New("required revision has been compacted")
	// ErrFutureRevision: the requested revision is newer than the store's.
	ErrFutureRevision = errors.New("revision is newer than the current revision")
	// ErrUnavailable: the store cannot be reached (its etcd lost, or the
	// member lost its quorum). A request refused with it was not
	// processed; a watch ended with it missed nothing up to its last
	// event and may resume from there once the store is back.
	ErrUnavailable = errors.New("storage unavailable")
	// ErrOutcomeUnknown: a write was cut off (the store became
	// unavailable while it was in flight); it may or may not have been
	// applied. Its error wraps the reason too.
	ErrOutcomeUnknown = errors.New("the write's outcome is unknown")
)

// CompactedError reports a compacted revision together with the oldest one
// still available. It matches ErrCompacted with errors.Is.
type CompactedError struct {
	Requested, Compacted int64
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("revision %d has been compacted (compacted revision %d)", e.Requested, e.Compacted)
}

// Is makes errors.Is(err, ErrCompacted) true.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }

// ConflictError reports a conditional write that found another revision,
// with the key's current state read in the same transaction, so that the
// caller can retry without reading it again. It matches ErrConflict with
// errors.Is.
type ConflictError struct {
	Op      string // "update" or "delete"
	Current KeyValue
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s %s: %v (current revision %d)", e.Op, e.Current.Key, ErrConflict, e.Current.ModRevision)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// TransformError reports a stored value that could not be transformed
// from its form at rest (decrypted: its key is not configured, or it was
// tampered with), or a value that could not be transformed to it. Nothing
// of the value is returned with it.
type TransformError struct {
	Key string
	// Revision is the stored value's mod revision (0 for a write).
	Revision int64
	Err      error
}

// Error has kube-apiserver's wording for a value it cannot decrypt (its
// corrupt-object StorageError), with the full etcd key.
func (e *TransformError) Error() string {
	return fmt.Sprintf("StorageError: corrupt object, Code: 7, Key: %s, ResourceVersion: %d, AdditionalErrorMsg: data from the storage is not transformable revision=%d: %v",
		e.Key, e.Revision, e.Revision, e.Err)
}

func (e *TransformError) Unwrap() error { return e.Err }

// Transformers choose how each key's value is kept at rest: the
// transformer of key (Kubernetes' value.Transformer, authenticated with
// the key), or nil to store it as it is. It is called concurrently.
type Transformers func(key string) value.Transformer

// Transforming is a store that can keep values transformed at rest.
type Transforming interface {
	Interface
	// WithTransformers returns a store on the same data whose writes
	// store t(key)'s transformation of each value and whose reads (gets,
	// lists, watch events, conflicts' current values, deletions' last
	// values) transform it back. A value that cannot be transformed back
	// is a *TransformError, never returned as it is stored.
	WithTransformers(t Transformers) Interface
}

// KeyValue is one stored value and its revisions.
type KeyValue struct {
	Key   string
	Value []byte
	// Stale: Value was read through a transformer other than the one
	// writes use (encrypted with an older key, or not encrypted at all): a
	// write of the same value would store it differently, so an update
	// that changes nothing must still write it (as Kubernetes does) to
	// re-encrypt it.
	Stale bool
	// CreateRevision is the revision of the create that started this key's
	// current life; ModRevision the revision of its last change. For a
	// deleted key delivered in a watch event, ModRevision is the deletion's
	// revision and Value the last value before deletion.
	CreateRevision int64
	ModRevision    int64
}

// ListOptions selects a page of a prefix.
type ListOptions struct {
	// Revision to read at; 0 reads the latest state with a linearizable read.
	Revision int64
	// Limit caps the number of returned items; 0 means no limit.
	Limit int64
	// StartKey, when set, starts the range at that key (inclusive) instead of
	// the prefix itself; pagination passes the key after the last one seen.
	StartKey string
}

// Streamer is implemented by stores that can read every key under a
// prefix at one revision as a stream of chunks (etcd's RangeStream, 3.7
// and later). Unlike paging with List, whose every page makes the store
// count the keys after it (quadratic in the keys of the prefix), a stream
// counts nothing. A watch cache's initial list uses it.
type Streamer interface {
	// ListAll calls chunk with the keys under prefix in key order, a
	// chunk at a time, all read at one revision (the latest, as a
	// linearizable read), which it returns once the stream has ended.
	// It stops at the first error of chunk and returns it. A store (or
	// a server behind it) that cannot stream returns
	// ErrStreamUnsupported before calling chunk. Safe for concurrent use.
	ListAll(ctx context.Context, prefix string, chunk func(kvs []KeyValue) error) (rev int64, err error)
}

// ErrStreamUnsupported: the store cannot stream a list (Streamer); page
// with List instead.
var ErrStreamUnsupported = errors.New("streaming list not supported")

// ListResult is one page of a list.
type ListResult struct {
	KVs []KeyValue
	// Revision is the store revision the page was read at.
	Revision int64
	// More is true when keys past the page remain in the range.
	More bool
	// Remaining counts the keys after this page (valid when More is true).
	Remaining int64
}

// EventType tells what a watch event means.
type EventType int

const (
	// Put: the key was created (PrevKV nil) or updated.
	Put EventType = iota
	// Delete: the key was deleted; KV holds the last value.
	Delete
	// Progress: no event; every change up to Revision has been delivered.
	Progress
	// Error: the watch ended with Err (e.g. ErrCompacted); no more events follow.
	Error
)

func (t EventType) String() string {
	switch t {
	case Put:
		return "PUT"
	case Delete:
		return "DELETE"
	case Progress:
		return "PROGRESS"
	case Error:
		return "ERROR"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event is one change seen by a watch. Events of one revision are delivered
// together and in key order, revisions in increasing order.
type Event struct {
	Type     EventType
	KV       KeyValue
	PrevKV   *KeyValue
	Revision int64
	Err      error
	// More: more events of the same revision follow (a transaction of
	// several keys, a DeletePrefix). A consumer that must show a
	// revision whole (the watch cache) applies it at the event without.
	More bool
}

// Watcher is a running watch. Its owner must call Stop.
type Watcher interface {
	// Events delivers the watch's events until the watch ends (Stop, context
	// cancellation, or an Error event); then it is closed. The events of
	// one revision are delivered whole: a watch ended by its context or a
	// failure of the store ends between revisions, so its owner may
	// resume from the last revision it saw plus one. (Only Stop, and a
	// value that cannot be transformed back, may end it inside one.)
	Events() <-chan Event
	// RequestProgress asks for a Progress event at the store's current
	// revision, delivered after every earlier change.
	RequestProgress(ctx context.Context) error
	// Stop ends the watch and waits for its goroutines.
	Stop()
}

// Interface is a revisioned key-value store. Implementations are safe for
// concurrent use.
type Interface interface {
	Get(ctx context.Context, key string) (KeyValue, error)
	List(ctx context.Context, prefix string, opts ListOptions) (ListResult, error)
	// Count returns how many keys start with prefix.
	Count(ctx context.Context, prefix string) (int64, error)
	// Create stores value under key if the key does not exist (ErrExists).
	Create(ctx context.Context, key string, value []byte) (KeyValue, error)
	// Update replaces key's value if its ModRevision is expectedRevision
	// (ErrConflict otherwise, ErrNotFound if absent).
	Update(ctx context.Context, key string, value []byte, expectedRevision int64) (KeyValue, error)
	// Delete removes key if its ModRevision is expectedRevision, or
	// unconditionally when expectedRevision is 0. It returns the deleted
	// value with ModRevision set to the deletion's revision.
	Delete(ctx context.Context, key string, expectedRevision int64) (KeyValue, error)
	// DeletePrefix removes every key under prefix in one revision.
	DeletePrefix(ctx context.Context, prefix string) (int64, error)
	// Watch streams changes under prefix with revision >= fromRevision
	// (0 = changes after now). A compacted fromRevision yields an Error
	// event wrapping ErrCompacted.
	Watch(ctx context.Context, prefix string, fromRevision int64) (Watcher, error)
	// Revision returns the store's current revision (linearizable).
	Revision(ctx context.Context) (int64, error)
	// Compact discards history before revision.
	Compact(ctx context.Context, revision int64) error
	// Compacted reports whether the store has discarded the history at
	// rev, by this store's Compact or anyone else's (another server's
	// on the same etcd): 0 if it can still read at rev, else a revision
	// it has compacted to (> rev: reads before it are ErrCompacted). It
	// may answer from the compactions it has already seen (its own, and
	// the CompactedErrors of its reads and watches) without asking the
	// server; otherwise it costs one small request.
	Compacted(ctx context.Context, rev int64) (int64, error)
}

// Note is a key written together with a change, in the same transaction
// and revision, before it: who made the change, for the history's
// recorder (see WithNote). With a Taker, the note is handed over in
// process instead of written.
type Note struct {
	Key   string
	Value []byte
	// Taker, if set, takes the note instead of the store: the store
	// writes no note key, calls Taker.Writing(key) before the change and
	// Taker.Written(key, rev, Value) once it knows the outcome, with the
	// change's revision (0 if the write failed or its outcome is
	// unknown). A recorder in the same process (the history's) reads it
	// there, at no cost to the store.
	Taker NoteTaker
}

// NoteTaker takes notes in process (Note.Taker). Its methods are called
// concurrently by every writer.
type NoteTaker interface {
	Writing(key string)
	Written(key string, rev int64, value []byte)
}

type noteKey struct{}

// WithNote returns ctx carrying n: a store's Create, Update and Delete
// with it also put n.Value at n.Key in the same transaction, first (a
// watch sees it before the change), or hand it to n.Taker. A write that
// fails writes no note.
func WithNote(ctx context.Context, n Note) context.Context {
	return context.WithValue(ctx, noteKey{}, n)
}

// NoteFrom returns the note of ctx.
func NoteFrom(ctx context.Context) (Note, bool) {
	n, ok := ctx.Value(noteKey{}).(Note)
	return n, ok
}

type noPrevKey struct{}

// WithoutPrev returns ctx for a Watch whose events need not carry the
// value before each change (Event.PrevKV nil, and a Delete's KV holds
// only the key and revision): etcd then reads no old value for each event
// it sends. For a consumer that keeps the last values itself (the history
// store).
func WithoutPrev(ctx context.Context) context.Context {
	return context.WithValue(ctx, noPrevKey{}, true)
}

// WantsPrev reports whether a Watch with ctx sends the values before
// changes (see WithoutPrev).
func WantsPrev(ctx context.Context) bool {
	return ctx.Value(noPrevKey{}) == nil
}

// WatchSharer is a store whose watches can share one watch of the store:
// those without previous values (WithoutPrev) from a revision, under
// prefix. SharedWatch returns the shared watch's loop, which its caller
// runs until its context ends; until it runs, and after, every watch is
// its own. The store is storage/etcd's (its Feed).
type WatchSharer interface {
	SharedWatch(prefix string, log *slog.Logger) (run func(ctx context.Context))
}

// RestReader is a store that can transform back a value kept in its form
// at rest outside it (the history store records etcd's values as they are).
type RestReader interface {
	// FromRest is value, key's value at rest written at rev, as a read
	// of the store would return it; a value that cannot be transformed
	// back is a *TransformError.
	FromRest(ctx context.Context, key string, rev int64, value []byte) ([]byte, error)
}

// Partitioned is a store whose keys live in several stores (etcd clusters),
// each holding the keys under some prefixes: a key-value operation goes to
// the store of its key, a prefix operation to the store of its prefix.
// Revisions of two parts are not comparable; a caller that needs one
// revision for several keys asks Part for the store that holds them. A
// prefix operation whose prefix spans parts (List, Count, ListAll,
// DeletePrefix, Watch) is refused with ErrSpansParts: read each of Parts.
// Revision, Compact and Compacted without a key are the main part's.
type Partitioned interface {
	Interface
	// Part returns the store holding every key under prefix, and its
	// name ("" for the main part); a prefix spanning parts is the main
	// part's.
	Part(prefix string) (Interface, string)
	// Parts returns the parts holding keys under prefix, the main part
	// first.
	Parts(prefix string) []Part
}

// Part is one store of a Partitioned store, for the keys under a prefix.
type Part struct {
	// Name is "" for the main part, else the name the part was given.
	Name  string
	Store Interface
	// Skip are prefixes under the prefix asked for whose keys this part
	// does not hold (they are another part's): a stray key it has under
	// them (written before the partition) is none of the keys asked for.
	Skip []string
}

// Holds reports whether p holds key (it is under none of p.Skip).
func (p Part) Holds(key string) bool {
	for _, s := range p.Skip {
		if len(key) >= len(s) && key[:len(s)] == s {
			return false
		}
	}
	return true
}

// ErrSpansParts: a prefix operation's prefix spans the parts of a
// Partitioned store.
var ErrSpansParts = errors.New("prefix spans several storage clusters")

// PartOf is s.Part(prefix)'s store if s is Partitioned, else s.
func PartOf(s Interface, prefix string) Interface {
	if p, ok := s.(Partitioned); ok {
		st, _ := p.Part(prefix)
		return st
	}
	return s
}

// PartsOf is s.Parts(prefix) if s is Partitioned, else s as the one part.
func PartsOf(s Interface, prefix string) []Part {
	if p, ok := s.(Partitioned); ok {
		return p.Parts(prefix)
	}
	return []Part{{Store: s}}
}
