// Package health tells whether a store can be reached, and makes its loss
// visible instead of silent: a Monitor probes the store in the background
// (a linearizable read of its revision, so an etcd member without quorum
// fails it as well as one that is gone), and the store it guards
// (Monitor.Store) refuses requests at once while the probes fail, and ends
// its open watches, with errors wrapping storage.ErrUnavailable.
//
// A store is unhealthy once no probe has succeeded for UnhealthyAfter, and
// healthy again after the next probe that succeeds. A request refused
// while unhealthy was never sent to the store, so it surely was not
// processed (the server answers 503 and clients may send it elsewhere);
// requests already under way when the store goes are not cut and end as
// the store makes them.
//
// # Concurrency
//
// A Monitor is safe for concurrent use; Run is its only goroutine, owned
// by the caller. The guarded store is safe for concurrent use, and costs
// requests one atomic load.
package health

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/objwatch/objwatch/storage"
)

// Config configures a Monitor. Zero values take the defaults.
type Config struct {
	// Interval between probes (default 1 s).
	Interval time.Duration
	// UnhealthyAfter is how long probes must fail before the store counts
	// as unavailable (default 3 s); a probe times out after it too, so a
	// store that stops answering is unavailable within Interval plus
	// UnhealthyAfter.
	UnhealthyAfter time.Duration
	// Log receives the transitions (default slog.Default()).
	Log *slog.Logger
}

// Monitor probes a store; see the package doc.
type Monitor struct {
	store storage.Interface
	cfg   Config
	down  atomic.Pointer[error] // why the store is unavailable; nil while healthy
	downs atomic.Uint64

	mu sync.Mutex
	// up ends, with the reason as its cause, when the store becomes
	// unavailable; a new one starts when it is healthy again. A signal the
	// monitor owns, not a caller's context: watches join it with
	// context.AfterFunc, which needs no goroutine per watch.
	up     context.Context
	cancel context.CancelCauseFunc
}

// New returns a Monitor of store, healthy until its probes fail; call Run.
func New(store storage.Interface, cfg Config) *Monitor {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.UnhealthyAfter <= 0 {
		cfg.UnhealthyAfter = 3 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	m := &Monitor{store: store, cfg: cfg}
	m.up, m.cancel = context.WithCancelCause(context.Background())
	return m
}

// Run probes the store every Interval until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	lastOK := time.Now()
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, m.cfg.UnhealthyAfter)
		_, err := m.store.Revision(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		switch {
		case err == nil:
			lastOK = now
			m.healthy()
		case now.Sub(lastOK) >= m.cfg.UnhealthyAfter:
			m.unavailable(fmt.Errorf("%w: no answer for %v: %w", storage.ErrUnavailable, now.Sub(lastOK).Round(time.Millisecond), err))
		}
	}
}

func (m *Monitor) healthy() {
	if m.down.Load() == nil {
		return
	}
	m.mu.Lock()
	m.up, m.cancel = context.WithCancelCause(context.Background())
	m.down.Store(nil)
	m.mu.Unlock()
	m.cfg.Log.Info("storage available again")
}

func (m *Monitor) unavailable(err error) {
	if m.down.Load() != nil {
		m.down.Store(&err) // the latest reason
		return
	}
	m.mu.Lock()
	m.down.Store(&err)
	m.cancel(err)
	m.mu.Unlock()
	m.downs.Add(1)
	m.cfg.Log.Error("storage unavailable: refusing requests and ending watches", "err", err)
}

// Err is nil while the store is healthy, else why it is not (wrapping
// storage.ErrUnavailable).
func (m *Monitor) Err() error {
	if p := m.down.Load(); p != nil {
		return *p
	}
	return nil
}

// Outages counts the times the store became unavailable.
func (m *Monitor) Outages() uint64 { return m.downs.Load() }

// upContext returns the context that ends when the store next becomes
// unavailable, or the reason it is unavailable now.
func (m *Monitor) upContext() (context.Context, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.Err(); err != nil {
		return nil, err
	}
	return m.up, nil
}

// Store returns the store guarded by m: while the store is unavailable
// every call fails at once with m.Err(), and when it becomes unavailable
// every watch of it ends with an Error event wrapping that reason (the
// store must end a watch whose context is cancelled with a cause with an
// Error event carrying it, as storage/etcd's does).
func (m *Monitor) Store() storage.Interface { return &guarded{Interface: m.store, m: m} }

type guarded struct {
	storage.Interface
	m *Monitor
}

// call runs f with a context that the store's loss cancels: a call in
// flight when the monitor counts the store as lost (a member that stopped
// answering, a cluster without quorum) fails then, with the reason, rather
// than waiting out its request's deadline. A write cut so may or may not
// have been applied: its error wraps storage.ErrOutcomeUnknown too.
func call[T any](g *guarded, ctx context.Context, write bool, f func(context.Context) (T, error)) (T, error) {
	var zero T
	up, err := g.m.upContext()
	if err != nil {
		return zero, err
	}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(up, func() { cancel(context.Cause(up)) })
	v, err := f(cctx)
	stop()
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		cause := context.Cause(cctx)
		if write {
			return v, fmt.Errorf("%w: %w", storage.ErrOutcomeUnknown, cause)
		}
		return v, cause
	}
	return v, err
}

func (g *guarded) Get(ctx context.Context, key string) (storage.KeyValue, error) {
	return call(g, ctx, false, func(ctx context.Context) (storage.KeyValue, error) { return g.Interface.Get(ctx, key) })
}

func (g *guarded) List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListResult, error) {
	return call(g, ctx, false, func(ctx context.Context) (storage.ListResult, error) { return g.Interface.List(ctx, prefix, opts) })
}

// ListAll streams when the guarded store can (storage.Streamer).
func (g *guarded) ListAll(ctx context.Context, prefix string, chunk func(kvs []storage.KeyValue) error) (int64, error) {
	st, ok := g.Interface.(storage.Streamer)
	if !ok {
		if err := g.m.Err(); err != nil {
			return 0, err
		}
		return 0, storage.ErrStreamUnsupported
	}
	return call(g, ctx, false, func(ctx context.Context) (int64, error) { return st.ListAll(ctx, prefix, chunk) })
}

func (g *guarded) Count(ctx context.Context, prefix string) (int64, error) {
	return call(g, ctx, false, func(ctx context.Context) (int64, error) { return g.Interface.Count(ctx, prefix) })
}

func (g *guarded) Create(ctx context.Context, key string, value []byte) (storage.KeyValue, error) {
	return call(g, ctx, true, func(ctx context.Context) (storage.KeyValue, error) { return g.Interface.Create(ctx, key, value) })
}

func (g *guarded) Update(ctx context.Context, key string, value []byte, expectedRevision int64) (storage.KeyValue, error) {
	return call(g, ctx, true, func(ctx context.Context) (storage.KeyValue, error) {
		return g.Interface.Update(ctx, key, value, expectedRevision)
	})
}

func (g *guarded) Delete(ctx context.Context, key string, expectedRevision int64) (storage.KeyValue, error) {
	return call(g, ctx, true, func(ctx context.Context) (storage.KeyValue, error) {
		return g.Interface.Delete(ctx, key, expectedRevision)
	})
}

func (g *guarded) DeletePrefix(ctx context.Context, prefix string) (int64, error) {
	return call(g, ctx, true, func(ctx context.Context) (int64, error) { return g.Interface.DeletePrefix(ctx, prefix) })
}

func (g *guarded) Revision(ctx context.Context) (int64, error) {
	return call(g, ctx, false, func(ctx context.Context) (int64, error) { return g.Interface.Revision(ctx) })
}

func (g *guarded) Compact(ctx context.Context, revision int64) error {
	_, err := call(g, ctx, true, func(ctx context.Context) (struct{}, error) { return struct{}{}, g.Interface.Compact(ctx, revision) })
	return err
}

func (g *guarded) Compacted(ctx context.Context, rev int64) (int64, error) {
	return call(g, ctx, false, func(ctx context.Context) (int64, error) { return g.Interface.Compacted(ctx, rev) })
}

// Watch starts a watch that the store's loss ends: its context is
// cancelled with the reason as the cause.
func (g *guarded) Watch(ctx context.Context, prefix string, fromRevision int64) (storage.Watcher, error) {
	up, err := g.m.upContext()
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(up, func() { cancel(context.Cause(up)) })
	w, err := g.Interface.Watch(wctx, prefix, fromRevision)
	if err != nil {
		stop()
		cancel(nil)
		return nil, err
	}
	return &guardedWatcher{Watcher: w, stop: func() { stop(); cancel(nil) }}, nil
}

type guardedWatcher struct {
	storage.Watcher
	stop func()
}

func (w *guardedWatcher) Stop() {
	w.Watcher.Stop()
	w.stop()
}
