// Package etcd implements storage.Interface on etcd, the only package in
// objwatch that imports etcd. It also starts an embedded etcd for the
// default single-binary mode (embedded.go), runs periodic compaction
// (compactor.go) and can serve the watches that need no previous values
// from one shared etcd watch (feed.go).
//
// Every write is a single etcd transaction that compares the key's mod
// revision (or absence) before writing, so a write either fully happens at
// the expected state or not at all. Revisions are etcd's store revisions.
//
// # Values at rest
//
// A Store made by WithTransformers keeps values transformed at rest
// (transform.go): every value written (create, update) is stored as its
// key's transformer makes it, and every value read (get, list at any
// revision, watch events with their previous values, a conflict's current
// value, a deletion's last value) is transformed back before anyone sees
// it, as Kubernetes' etcd3 store does. The transformers are Kubernetes'
// own (k8s.io/apiserver/pkg/storage/value): encryption with the k8s:enc:
// prefixes, authenticated with the etcd key (value.DefaultContext). A value
// that cannot be transformed back is a *storage.TransformError; a watch
// meeting one ends with it (an Error event), as Kubernetes' etcd watch
// does. Callers never see a stored form.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	grpccodes "google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/objwatch/objwatch/storage"
)

// Store is a storage.Interface backed by an etcd client. It is safe for
// concurrent use. The caller owns the client and closes it after the Store
// is no longer used.
type Store struct {
	cli     *clientv3.Client
	latency *prometheus.HistogramVec
	// transform, if not nil, chooses each key's transformer at rest.
	transform storage.Transformers
	// compacted is the newest compaction revision the store has seen
	// (its Compact calls, compacted errors), shared with the stores
	// WithTransformers makes.
	compacted *atomic.Int64
	// feed, once ShareWatches sets it, serves the watches that do not
	// want previous values (see Watch), shared with the stores
	// WithTransformers makes.
	feed *atomic.Pointer[Feed]
}

var _ storage.Transforming = (*Store)(nil)

// New returns a Store on cli. If reg is not nil, etcd request latencies are
// registered there as objwatch_etcd_request_duration_seconds{operation},
// and the shared watch's (ShareWatches) subscribers and switches.
func New(cli *clientv3.Client, reg prometheus.Registerer) (*Store, error) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "objwatch_etcd_request_duration_seconds",
		Help:    "Latency of etcd requests made by the storage layer.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"operation"})
	s := &Store{cli: cli, latency: h, compacted: new(atomic.Int64), feed: new(atomic.Pointer[Feed])}
	if reg != nil {
		stat := func(v func(FeedStats) float64) func() float64 {
			return func() float64 {
				if f := s.feed.Load(); f != nil {
					return v(f.Stats())
				}
				return 0
			}
		}
		for _, c := range []prometheus.Collector{
			h,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "objwatch_etcd_shared_watch_subscribers",
				Help: "Watches served by the shared etcd watch (ShareWatches), those still catching up on their own included.",
			}, stat(func(st FeedStats) float64 { return float64(st.Subscribers + st.CatchingUp) })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "objwatch_etcd_shared_watch_switches_total",
				Help: "Watches that caught up on their own etcd watch and moved to the shared one.",
			}, stat(func(st FeedStats) float64 { return float64(st.Switches) })),
		} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("etcd store: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Client returns the underlying etcd client.
func (s *Store) Client() *clientv3.Client { return s.cli }

func (s *Store) observe(op string, start time.Time) {
	s.latency.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

// kv is k as etcd stores it; fromStorage transforms its value back.
func kv(k *mvccpb.KeyValue) storage.KeyValue {
	return storage.KeyValue{Key: string(k.Key), Value: k.Value, CreateRevision: k.CreateRevision, ModRevision: k.ModRevision}
}

// sawCompacted records that etcd has compacted to rev.
func (s *Store) sawCompacted(rev int64) {
	for {
		cur := s.compacted.Load()
		if rev <= cur || s.compacted.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// mapErr turns etcd errors into storage sentinels.
func mapErr(err error, rev int64, compacted int64) error {
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return &storage.CompactedError{Requested: rev, Compacted: compacted}
	case errors.Is(err, rpctypes.ErrFutureRev):
		return fmt.Errorf("revision %d: %w", rev, storage.ErrFutureRevision)
	}
	return err
}

// Get reads key with a linearizable read.
func (s *Store) Get(ctx context.Context, key string) (storage.KeyValue, error) {
	defer s.observe("get", time.Now())
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return storage.KeyValue{}, fmt.Errorf("get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return storage.KeyValue{}, fmt.Errorf("get %s: %w", key, storage.ErrNotFound)
	}
	return s.fromStorage(ctx, resp.Kvs[0])
}

// List reads a page of the keys under prefix.
func (s *Store) List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListResult, error) {
	defer s.observe("list", time.Now())
	start := prefix
	if opts.StartKey != "" {
		start = opts.StartKey
	}
	ops := []clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix))}
	if opts.Limit > 0 {
		ops = append(ops, clientv3.WithLimit(opts.Limit))
	}
	if opts.Revision > 0 {
		ops = append(ops, clientv3.WithRev(opts.Revision))
	}
	resp, err := s.cli.Get(ctx, start, ops...)
	if err != nil {
		return storage.ListResult{}, fmt.Errorf("list %s: %w", prefix, s.revErr(ctx, err, opts.Revision))
	}
	out := storage.ListResult{KVs: make([]storage.KeyValue, len(resp.Kvs)), Revision: resp.Header.Revision, More: resp.More}
	if opts.Revision > 0 {
		out.Revision = opts.Revision
	}
	for i, k := range resp.Kvs {
		if out.KVs[i], err = s.fromStorage(ctx, k); err != nil {
			return storage.ListResult{}, err
		}
	}
	if resp.More {
		out.Remaining = resp.Count - int64(len(resp.Kvs))
	}
	return out, nil
}

// ListAll streams every key under prefix with etcd's RangeStream, in
// chunks etcd sizes (about its request limit), all at the revision the
// stream started at, which it returns (see storage.Streamer). A paged List
// makes etcd count the rest of the range for every page; a stream counts
// nothing. An etcd older than 3.7 answers Unimplemented:
// storage.ErrStreamUnsupported.
func (s *Store) ListAll(ctx context.Context, prefix string, chunk func(kvs []storage.KeyValue) error) (int64, error) {
	defer s.observe("list", time.Now())
	ctx, cancel := context.WithCancel(ctx)
	stream, err := s.cli.GetStream(ctx, prefix, clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)))
	if err != nil {
		cancel()
		return 0, fmt.Errorf("list %s: %w", prefix, streamErr(err))
	}
	defer func() {
		cancel()
		for range stream { // the client's goroutine ends once it has delivered
		}
	}()
	var rev int64
	for resp := range stream {
		if err := resp.Err(); err != nil {
			return 0, fmt.Errorf("list %s: %w", prefix, streamErr(err))
		}
		if h := resp.RangeResponse.Header; h != nil && h.Revision > 0 {
			rev = h.Revision
		}
		kvs := make([]storage.KeyValue, len(resp.RangeResponse.Kvs))
		for i, k := range resp.RangeResponse.Kvs {
			if kvs[i], err = s.fromStorage(ctx, k); err != nil {
				return 0, err
			}
		}
		if err := chunk(kvs); err != nil {
			return 0, err
		}
	}
	if rev == 0 {
		return 0, fmt.Errorf("list %s: stream ended without a revision", prefix)
	}
	return rev, nil
}

// streamErr maps an error of RangeStream: Unimplemented (an etcd before
// 3.7) is storage.ErrStreamUnsupported.
func streamErr(err error) error {
	if grpcstatus.Code(err) == grpccodes.Unimplemented {
		return fmt.Errorf("%w: %w", storage.ErrStreamUnsupported, err)
	}
	return err
}

// revErr maps a revision error, looking up the compacted revision if needed.
func (s *Store) revErr(ctx context.Context, err error, rev int64) error {
	if !errors.Is(err, rpctypes.ErrCompacted) {
		return mapErr(err, rev, 0)
	}
	// etcd does not say which revision it compacted to; a watch does,
	// unless this store already saw a compaction past rev (a new watch
	// stream costs a round trip or more: reads of the history store's
	// revisions would all pay it).
	if seen := s.compacted.Load(); seen > rev {
		return mapErr(err, rev, seen)
	}
	compacted := s.compactRevision(ctx)
	s.sawCompacted(compacted)
	return mapErr(err, rev, compacted)
}

// compactRevision discovers the current compaction revision (best effort).
func (s *Store) compactRevision(ctx context.Context) int64 {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	w := clientv3.NewWatcher(s.cli)
	defer w.Close()
	for resp := range w.Watch(ctx, "\x00objwatch-compact-probe", clientv3.WithRev(1)) {
		return resp.CompactRevision
	}
	return 0
}

// Count returns the number of keys under prefix.
func (s *Store) Count(ctx context.Context, prefix string) (int64, error) {
	defer s.observe("count", time.Now())
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("count %s: %w", prefix, err)
	}
	return resp.Count, nil
}

// Create stores value under key if absent.
func (s *Store) Create(ctx context.Context, key string, value []byte) (storage.KeyValue, error) {
	defer s.observe("create", time.Now())
	stored, err := s.toStorage(ctx, key, value)
	if err != nil {
		return storage.KeyValue{}, err
	}
	ops, handed := withNote(ctx, key, clientv3.OpPut(key, stored))
	var rev int64
	defer func() { handed(rev) }()
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
		Then(ops...).
		Commit()
	if err != nil {
		return storage.KeyValue{}, writeErr("create", key, err)
	}
	if !resp.Succeeded {
		return storage.KeyValue{}, fmt.Errorf("create %s: %w", key, storage.ErrExists)
	}
	rev = resp.Header.Revision
	return storage.KeyValue{Key: key, Value: value, CreateRevision: rev, ModRevision: rev}, nil
}

// Update replaces key's value if its mod revision is expectedRevision.
func (s *Store) Update(ctx context.Context, key string, value []byte, expectedRevision int64) (storage.KeyValue, error) {
	defer s.observe("update", time.Now())
	stored, err := s.toStorage(ctx, key, value)
	if err != nil {
		return storage.KeyValue{}, err
	}
	ops, handed := withNote(ctx, key, clientv3.OpPut(key, stored, clientv3.WithPrevKV()))
	var rev int64
	defer func() { handed(rev) }()
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", expectedRevision)).
		Then(ops...).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return storage.KeyValue{}, writeErr("update", key, err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return storage.KeyValue{}, fmt.Errorf("update %s: %w", key, storage.ErrNotFound)
		}
		return storage.KeyValue{}, s.conflict(ctx, "update", kvs[0])
	}
	rev = resp.Header.Revision
	create := rev
	if prev := lastResponse(resp).GetResponsePut().PrevKv; prev != nil {
		create = prev.CreateRevision
	}
	return storage.KeyValue{Key: key, Value: value, CreateRevision: create, ModRevision: rev}, nil
}

// Delete removes key, conditionally on its mod revision when
// expectedRevision > 0. If the deleted value cannot be transformed back,
// the key is deleted all the same and the *storage.TransformError comes
// with a KeyValue without Value.
func (s *Store) Delete(ctx context.Context, key string, expectedRevision int64) (storage.KeyValue, error) {
	defer s.observe("delete", time.Now())
	cmp := clientv3.Compare(clientv3.ModRevision(key), ">", 0)
	if expectedRevision > 0 {
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", expectedRevision)
	}
	txn := func(ops []clientv3.Op) (*clientv3.TxnResponse, error) {
		return s.cli.Txn(ctx).If(cmp).Then(ops...).Else(clientv3.OpGet(key)).Commit()
	}
	del := clientv3.OpDelete(key, clientv3.WithPrevKV())
	ops, handed := withNote(ctx, key, del)
	var rev int64
	defer func() { handed(rev) }()
	resp, err := txn(ops)
	if err != nil && noSpace(err) && len(ops) > 1 {
		// etcd at its quota refuses every transaction that puts a key,
		// the note's too, but takes deletions (as it does
		// Kubernetes'): the deletion goes without its note.
		resp, err = txn([]clientv3.Op{del})
	}
	if err != nil {
		return storage.KeyValue{}, writeErr("delete", key, err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return storage.KeyValue{}, fmt.Errorf("delete %s: %w", key, storage.ErrNotFound)
		}
		return storage.KeyValue{}, s.conflict(ctx, "delete", kvs[0])
	}
	rev = resp.Header.Revision
	prev := lastResponse(resp).GetResponseDeleteRange().PrevKvs
	if len(prev) == 0 {
		return storage.KeyValue{}, fmt.Errorf("delete %s: %w", key, storage.ErrNotFound)
	}
	out, err := s.fromStorage(ctx, prev[0])
	if err != nil {
		// Deleted all the same; only its last value is unreadable.
		out = storage.KeyValue{Key: key, CreateRevision: prev[0].CreateRevision}
	}
	out.ModRevision = rev
	return out, err
}

// withNote is a write's operations: op, after the note of ctx if it has
// one (storage.WithNote), so that watchers see the note first; and what
// to call with the write's revision once it is known (0: none), which
// hands a note with a Taker over instead.
func withNote(ctx context.Context, key string, op clientv3.Op) ([]clientv3.Op, func(rev int64)) {
	n, ok := storage.NoteFrom(ctx)
	switch {
	case !ok:
		return []clientv3.Op{op}, noNote
	case n.Taker != nil:
		n.Taker.Writing(key)
		return []clientv3.Op{op}, func(rev int64) { n.Taker.Written(key, rev, n.Value) }
	}
	return []clientv3.Op{clientv3.OpPut(n.Key, string(n.Value)), op}, noNote
}

func noNote(int64) {}

// lastResponse is the response of a successful write's own operation
// (after its note's).
func lastResponse(resp *clientv3.TxnResponse) *etcdserverpb.ResponseOp {
	return resp.Responses[len(resp.Responses)-1]
}

// DeletePrefix removes every key under prefix in one revision.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) (int64, error) {
	defer s.observe("delete", time.Now())
	resp, err := s.cli.Delete(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("delete prefix %s: %w", prefix, err)
	}
	return resp.Header.Revision, nil
}

// Revision returns etcd's current revision with a linearizable read.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	// RequireLeader: a member without quorum answers at once that it has
	// no leader, instead of letting the read time out.
	resp, err := s.cli.Get(clientv3.WithRequireLeader(ctx), "\x00objwatch-revision-probe", clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// Compact discards history before revision. Compacting to an already
// compacted revision is not an error.
func (s *Store) Compact(ctx context.Context, revision int64) error {
	defer s.observe("compact", time.Now())
	_, err := s.cli.Compact(ctx, revision)
	if err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("compact %d: %w", revision, mapErr(err, revision, 0))
	}
	s.sawCompacted(revision) // compacted now, or to revision or later before
	return nil
}

// Compacted reports whether etcd has compacted rev (see
// storage.Interface): from the compactions the store has seen when one
// is past rev, else with a count-only read of a key no one writes at rev,
// which etcd refuses without reading anything once rev is compacted. The
// revision it compacted to is then learnt as revErr learns it (a watch
// from a compacted revision says); should that fail, rev+1 is answered,
// which the next call refines. Safe for concurrent use.
func (s *Store) Compacted(ctx context.Context, rev int64) (int64, error) {
	if c := s.compacted.Load(); rev < c {
		return c, nil
	}
	if rev <= 0 {
		return 0, nil
	}
	defer s.observe("compacted", time.Now())
	_, err := s.cli.Get(ctx, "\x00objwatch-compact-probe", clientv3.WithRev(rev), clientv3.WithCountOnly())
	switch {
	case err == nil, errors.Is(err, rpctypes.ErrFutureRev):
		return 0, nil
	case !errors.Is(err, rpctypes.ErrCompacted):
		return 0, fmt.Errorf("compacted %d: %w", rev, err)
	}
	compacted := max(s.compactRevision(ctx), rev+1)
	s.sawCompacted(compacted)
	return compacted, nil
}

// Watch streams the changes under prefix from fromRevision on. Each Watch
// uses its own etcd watch stream so RequestProgress concerns it alone,
// except a watch that a running Feed serves (see ShareWatches): one
// whose ctx says storage.WithoutPrev, with fromRevision > 0 and prefix
// under the feed's. Its events, errors and progress are as a dedicated
// watch's (see Feed).
//
// The watch ends with an Error event when etcd ends it (a compacted
// revision; the member lost its leader, wrapping storage.ErrUnavailable),
// and when ctx is cancelled with a cause (context.WithCancelCause) other
// than context.Canceled or DeadlineExceeded: the event wraps the cause, so
// an owner that knows why the watch must end (storage/health: etcd is
// unreachable) can say so to its consumer. A plain cancellation or Stop
// ends it without one.
func (s *Store) Watch(ctx context.Context, prefix string, fromRevision int64) (storage.Watcher, error) {
	if f := s.feed.Load(); f != nil && fromRevision > 0 && !storage.WantsPrev(ctx) && strings.HasPrefix(prefix, f.prefix) {
		if w := f.watch(ctx, s, prefix, fromRevision); w != nil {
			return w, nil
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	ew := clientv3.NewWatcher(s.cli)
	w := newWatcher(s, ew, cancel)
	ops := []clientv3.OpOption{clientv3.WithPrefix()}
	if storage.WantsPrev(ctx) {
		ops = append(ops, clientv3.WithPrevKV())
	}
	if fromRevision > 0 {
		ops = append(ops, clientv3.WithRev(fromRevision))
	}
	// RequireLeader makes the watch fail instead of hanging when this etcd
	// member loses its quorum.
	ch := ew.Watch(clientv3.WithRequireLeader(ctx), prefix, ops...)
	w.wg.Add(1)
	go w.run(ctx, ch, fromRevision)
	return w, nil
}

// watchSource is where a watcher's responses come from: an etcd watch
// stream of its own, or a Feed's subscription.
type watchSource interface {
	// RequestProgress asks for a progress notification; ctx has the
	// watch's RequireLeader metadata.
	RequestProgress(ctx context.Context) error
	// Close releases the source once the watcher's goroutine has ended.
	Close() error
}

func newWatcher(s *Store, src watchSource, cancel context.CancelFunc) *watcher {
	return &watcher{store: s, src: src, out: make(chan storage.Event), cancel: cancel, stopped: make(chan struct{})}
}

type watcher struct {
	store *Store // transforms the values back
	src   watchSource
	// ended, if set, is why the response channel was closed, when it was
	// closed with the watch's context still live (a Feed's subscription).
	ended   func() (error, int64)
	out     chan storage.Event
	cancel  context.CancelFunc
	stopped chan struct{} // closed by Stop
	wg      sync.WaitGroup
	once    sync.Once
}

func (w *watcher) Events() <-chan storage.Event { return w.out }

func (w *watcher) RequestProgress(ctx context.Context) error {
	// The etcd client routes the request by the context's metadata, which
	// must match the watch's (see Watch).
	return w.src.RequestProgress(clientv3.WithRequireLeader(ctx))
}

func (w *watcher) Stop() {
	w.once.Do(func() {
		close(w.stopped)
		w.cancel()
		w.wg.Wait()
		w.src.Close()
	})
}

// run owns w.out: it translates etcd responses until ctx ends or the watch
// fails, then closes w.out. A ctx cancelled with a cause ends the watch
// with an Error event carrying it (see Watch).
func (w *watcher) run(ctx context.Context, ch clientv3.WatchChan, from int64) {
	defer w.wg.Done()
	defer close(w.out)
	w.follow(ctx, ch, from)
	if ctx.Err() == nil {
		return
	}
	// The cause itself, not what it wraps: a reason may wrap a deadline.
	if cause := context.Cause(ctx); cause != context.Canceled && cause != context.DeadlineExceeded {
		select {
		case w.out <- storage.Event{Type: storage.Error, Err: fmt.Errorf("watch: %w", cause)}:
		case <-w.stopped:
		}
	}
}

// follow sends the events of ch until ctx ends or the watch fails.
//
// The events of one etcd response — every event of one revision is in
// one response — are sent whole even when ctx ends meanwhile (a guard
// cancelling the watch, see Watch): only Stop interrupts them. A
// consumer that resumes after a failure from the revision of the last
// event it saw plus one (the watch cache, the history's recorder) would
// otherwise miss the rest of a revision of several keys (a transaction,
// a DeletePrefix) cut in the middle.
func (w *watcher) follow(ctx context.Context, ch clientv3.WatchChan, from int64) {
	send := func(e storage.Event) bool {
		select {
		case w.out <- e:
			return true
		case <-ctx.Done():
			return false
		}
	}
	sendWhole := func(e storage.Event) bool {
		select {
		case w.out <- e:
			return true
		case <-w.stopped:
			return false
		}
	}
	for resp := range ch {
		if err := resp.Err(); err != nil {
			send(storage.Event{Type: storage.Error, Err: w.store.watchErr(resp, from), Revision: resp.Header.Revision})
			return
		}
		if resp.IsProgressNotify() {
			if !send(storage.Event{Type: storage.Progress, Revision: resp.Header.Revision}) {
				return
			}
			continue
		}
		for i, ev := range resp.Events {
			e, err := w.event(ctx, ev)
			if err != nil {
				// As Kubernetes' etcd watch: the watch ends with the error.
				send(storage.Event{Type: storage.Error, Err: fmt.Errorf("watch: %w", err), Revision: ev.Kv.ModRevision})
				return
			}
			e.More = i+1 < len(resp.Events) && resp.Events[i+1].Kv.ModRevision == ev.Kv.ModRevision
			if !sendWhole(e) {
				return
			}
		}
	}
	if ctx.Err() == nil {
		err, rev := errors.New("watch: etcd watch channel closed"), int64(0)
		if w.ended != nil {
			if e, r := w.ended(); e != nil {
				err, rev = e, r
			}
		}
		send(storage.Event{Type: storage.Error, Err: err, Revision: rev})
	}
}

// watchErr is the error that ends a watch from from whose etcd watch
// answered resp, an error response.
func (s *Store) watchErr(resp clientv3.WatchResponse, from int64) error {
	err := resp.Err()
	switch {
	case resp.CompactRevision > 0:
		s.sawCompacted(resp.CompactRevision)
		err = &storage.CompactedError{Requested: from, Compacted: resp.CompactRevision}
	case errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrGRPCNoLeader):
		err = fmt.Errorf("%w: etcd: %w", storage.ErrUnavailable, err)
	}
	return fmt.Errorf("watch: %w", err)
}

// event translates one etcd event, transforming its values back.
func (w *watcher) event(ctx context.Context, ev *clientv3.Event) (storage.Event, error) {
	e := storage.Event{Revision: ev.Kv.ModRevision}
	var err error
	switch ev.Type {
	case clientv3.EventTypePut:
		e.Type = storage.Put
		if e.KV, err = w.store.fromStorage(ctx, ev.Kv); err != nil {
			return e, err
		}
		if ev.PrevKv != nil {
			p, err := w.store.fromStorage(ctx, ev.PrevKv)
			if err != nil {
				return e, err
			}
			e.PrevKV = &p
		}
	case clientv3.EventTypeDelete:
		e.Type = storage.Delete
		if ev.PrevKv != nil {
			if e.KV, err = w.store.fromStorage(ctx, ev.PrevKv); err != nil {
				return e, err
			}
		}
		e.KV.Key = string(ev.Kv.Key)
		e.KV.ModRevision = ev.Kv.ModRevision
	}
	return e, nil
}
