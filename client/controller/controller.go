package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/objwatch/objwatch/client/informer"
	"github.com/objwatch/objwatch/client/workqueue"
)

// Options configure a Controller. The zero value is ready to use.
type Options struct {
	// MaxConcurrentReconciles is the number of workers (default 1).
	MaxConcurrentReconciles int
	// ReconcileTimeout, if positive, bounds each reconcile: its context
	// ends then (counted in controller_runtime_reconcile_timeouts_total).
	// Reconcilers must heed their context; nothing can stop one that
	// does not.
	ReconcileTimeout time.Duration
	// ShutdownTimeout is how long reconciles running when Run's context
	// ends may go on before their contexts are cancelled (default 30 s).
	ShutdownTimeout time.Duration
	// SyncTimeout bounds the wait for every informer to sync before the
	// workers start (default 2 min).
	SyncTimeout time.Duration

	// Queue tunes the work queue's backoff and token bucket (its Name,
	// Metrics are the controller's).
	Queue workqueue.Options

	// DisableReadYourWrites turns off read-your-writes for the
	// controller's Clients and the stale-cache guard (see the package
	// documentation).
	DisableReadYourWrites bool
	// ReadYourWritesTimeout bounds how long a cache read waits for the
	// controller's own write to reach the cache (default 5 s).
	ReadYourWritesTimeout time.Duration
	// StaleRequeue is how soon a reconcile skipped by the stale-cache
	// guard is tried again (default 20 ms).
	StaleRequeue time.Duration

	// Metrics, if set, receives the controller's and its queue's
	// metrics, labelled controller="<name>" and name="<name>".
	Metrics prometheus.Registerer
	// Log receives the controller's logs (default: discarded).
	Log *slog.Logger
}

// Controller reconciles keys taken from a work queue, which its sources
// (informer handlers, see Builder) or anyone else (Queue) fill. Create it
// with New or a Builder and call Run once. It is safe for concurrent use.
type Controller[K comparable] struct {
	name    string
	r       Reconciler[K]
	opts    Options
	queue   *workqueue.Queue[K]
	metrics *metrics
	log     *slog.Logger
	writes  *writes

	// stale, if set, reports that the cache is known to be older than
	// the controller's last write of key's object (the primary).
	stale func(key K) bool

	mu      sync.Mutex
	sources []source[K]
	started []started // the sources' registrations, once started
	ran     bool
}

// source is something that feeds the queue from an informer.
type source[K comparable] interface {
	// start adds the source's handler to its informer.
	start(q *workqueue.Queue[K]) (started, error)
}

// started is a source's handler, added to its informer.
type started struct {
	name    string       // the informer's name
	synced  func() bool  // the informer and handler have synced
	lastErr func() error // why the informer has not
	remove  func()
	done    <-chan struct{}
}

// ErrSyncTimeout is wrapped by the error of Run and WaitForSync when an
// informer did not sync within Options.SyncTimeout.
var ErrSyncTimeout = errors.New("informers did not sync")

// New returns a controller that calls r for the keys of its queue. It
// starts nothing; add keys with Queue and call Run.
func New[K comparable](name string, r Reconciler[K], opts Options) (*Controller[K], error) {
	if name == "" {
		return nil, errors.New("controller: a name is required")
	}
	if r == nil {
		return nil, fmt.Errorf("controller %s: nil reconciler", name)
	}
	o := opts
	o.MaxConcurrentReconciles = max(o.MaxConcurrentReconciles, 1)
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 30 * time.Second
	}
	if o.SyncTimeout <= 0 {
		o.SyncTimeout = 2 * time.Minute
	}
	if o.ReadYourWritesTimeout <= 0 {
		o.ReadYourWritesTimeout = 5 * time.Second
	}
	if o.StaleRequeue <= 0 {
		o.StaleRequeue = 20 * time.Millisecond
	}
	c := &Controller[K]{name: name, r: r, opts: o, log: o.Log, writes: newWrites(o.ReadYourWritesTimeout, !o.DisableReadYourWrites)}
	if c.log == nil {
		c.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c.log = c.log.With("controller", name)
	if o.Metrics != nil {
		m, err := newMetrics(name, o.Metrics)
		if err != nil {
			return nil, err
		}
		m.maxConcurrent.Set(float64(o.MaxConcurrentReconciles))
		c.metrics = m
	}
	qo := o.Queue
	qo.Name, qo.Metrics = name, o.Metrics
	q, err := workqueue.New[K](qo)
	if err != nil {
		if c.metrics != nil {
			c.metrics.unregister()
		}
		return nil, fmt.Errorf("controller %s: %w", name, err)
	}
	c.queue = q
	return c, nil
}

// Name returns the controller's name.
func (c *Controller[K]) Name() string { return c.name }

// Queue returns the controller's work queue, to add keys from sources of
// one's own.
func (c *Controller[K]) Queue() *workqueue.Queue[K] { return c.queue }

// WaitForSync adds the controller's handlers to its informers, if not
// done yet, and waits until every informer and handler has synced, at
// most Options.SyncTimeout. The informers must be running (the
// controller does not run them: caching is explicit).
//
// Called before Run, it warms a standby up: its cache is synced and its
// queue filled with the initial lists while another replica leads, and
// Run then starts working at once. Run calls it itself.
func (c *Controller[K]) WaitForSync(ctx context.Context) error {
	regs, err := c.startSources()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.opts.SyncTimeout, ErrSyncTimeout)
	defer cancel()
	syncs := make([]func() bool, len(regs))
	for i, r := range regs {
		syncs[i] = r.synced
	}
	if informer.WaitForSync(ctx, syncs...) == nil {
		return nil
	}
	if !errors.Is(context.Cause(ctx), ErrSyncTimeout) {
		return ctx.Err()
	}
	var errs []error
	for _, r := range regs {
		if r.synced() {
			continue
		}
		why := r.lastErr()
		if why == nil {
			why = errors.New("no error reported")
		}
		errs = append(errs, fmt.Errorf("%s: %w", r.name, why))
	}
	return fmt.Errorf("controller %s: %w within %v: %w", c.name, ErrSyncTimeout, c.opts.SyncTimeout, errors.Join(errs...))
}

func (c *Controller[K]) startSources() ([]started, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started != nil || len(c.sources) == 0 {
		return c.started, nil
	}
	for _, s := range c.sources {
		st, err := s.start(c.queue)
		if err != nil {
			for _, r := range c.started {
				r.remove()
			}
			c.started = nil
			return nil, fmt.Errorf("controller %s: %w", c.name, err)
		}
		c.started = append(c.started, st)
	}
	return c.started, nil
}

// Run waits for the informers to sync (see WaitForSync), then reconciles
// with Options.MaxConcurrentReconciles workers until ctx ends. Then no
// new reconcile starts; running ones finish, their contexts cancelled
// after Options.ShutdownTimeout; keys still queued are dropped. Run
// returns once every goroutine it started has ended and its handlers
// were removed from the informers; it unregisters the metrics.
//
// Run may be called only once. Under leader election, call Run when
// leadership is gained and cancel its context when it is lost: the
// controller then stops working before Run returns.
//
// It returns nil when ctx ends, and an error if the informers did not
// sync in time.
func (c *Controller[K]) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.ran {
		c.mu.Unlock()
		return fmt.Errorf("controller %s: Run called twice", c.name)
	}
	c.ran = true
	c.mu.Unlock()
	defer c.stop()

	if err := c.WaitForSync(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	c.log.Info("starting workers", "workers", c.opts.MaxConcurrentReconciles)
	// Reconciles outlive ctx by the shutdown grace period.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	var wg sync.WaitGroup
	for range c.opts.MaxConcurrentReconciles {
		wg.Go(func() {
			for c.processNext(work) {
			}
		})
	}
	<-ctx.Done()
	c.log.Info("stopping workers")
	grace := time.AfterFunc(c.opts.ShutdownTimeout, cancelWork)
	defer grace.Stop()
	_ = c.queue.ShutDownWithDrain(context.Background()) // bounded: the workers end
	wg.Wait()
	return nil
}

// stop shuts the queue down and removes the handlers, waiting for their
// last calls.
func (c *Controller[K]) stop() {
	c.queue.ShutDown()
	c.mu.Lock()
	regs := c.started
	c.mu.Unlock()
	for _, r := range regs {
		r.remove()
	}
	for _, r := range regs {
		<-r.done
	}
	if c.metrics != nil {
		c.metrics.unregister()
	}
}

// processNext reconciles one key; false once the queue shut down.
func (c *Controller[K]) processNext(ctx context.Context) bool {
	key, priority, shutdown := c.queue.GetWithPriority()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	if c.stale != nil && c.stale(key) {
		if c.metrics != nil {
			c.metrics.staleSkips.Inc()
		}
		c.queue.AddWithOpts(workqueue.AddOpts{After: c.opts.StaleRequeue, Priority: priority}, key)
		return true
	}
	m := c.metrics
	if m != nil {
		m.active.Inc()
		defer m.active.Dec()
	}
	start := time.Now()
	res, err := c.reconcile(ctx, key)
	if m != nil {
		m.duration.Observe(time.Since(start).Seconds())
	}
	result := "success"
	switch {
	case err != nil:
		result = "error"
		if m != nil {
			m.errors.Inc()
		}
		if errors.Is(err, ErrTerminal) {
			if m != nil {
				m.terminal.Inc()
			}
			c.queue.Forget(key)
			c.log.Error("reconcile failed, not retrying", "key", key, "err", err)
		} else {
			c.queue.AddWithOpts(workqueue.AddOpts{RateLimited: true, Priority: priority}, key)
			c.log.Info("reconcile failed, retrying", "key", key, "err", err, "retries", c.queue.NumRequeues(key))
		}
	case res.RequeueAfter > 0:
		result = "requeue_after"
		c.queue.Forget(key)
		c.queue.AddWithOpts(workqueue.AddOpts{After: res.RequeueAfter, Priority: priority}, key)
	default:
		c.queue.Forget(key)
	}
	if m != nil {
		m.total.WithLabelValues(result).Inc()
	}
	return true
}

var errTimeout = errors.New("reconcile timeout")

// reconcile calls the reconciler, bounded by the timeout, turning a panic
// into an error.
func (c *Controller[K]) reconcile(ctx context.Context, key K) (res Result, err error) {
	if c.opts.ReconcileTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.opts.ReconcileTimeout, errTimeout)
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			if c.metrics != nil {
				c.metrics.panics.Inc()
			}
			c.log.Error("reconcile panicked", "key", key, "panic", p, "stack", string(debug.Stack()))
			res, err = Result{}, fmt.Errorf("panic: %v [recovered]", p)
		}
		if errors.Is(context.Cause(ctx), errTimeout) && c.metrics != nil {
			c.metrics.timeouts.Inc()
		}
	}()
	return c.r.Reconcile(ctx, key)
}
