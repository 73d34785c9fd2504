package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
	"github.com/objwatch/objwatch/client/leaderelection"
)

// Runnable is what RunElected runs: a Controller of any key type.
type Runnable interface {
	Name() string
	WaitForSync(ctx context.Context) error
	Run(ctx context.Context) error
}

// ElectedOptions configure RunElected.
type ElectedOptions struct {
	// Election names the Lease and sets its timings, identity, metrics
	// and log. RunElected sets Callbacks.OnStartedLeading itself (it must
	// be nil); OnStoppedLeading and OnNewLeader are kept.
	Election leaderelection.Config
	// EnableWarmup (controller-runtime's EnableWarmup) keeps a warm
	// standby: the factory's informers run and the controllers' handlers
	// are added and synced before this replica leads, so its caches hold
	// every object and its queues every key when it wins the election,
	// and the first reconcile follows leadership at once instead of after
	// a full list of every resource. Nothing is reconciled before
	// leading: the workers start only then. The price is a standby that
	// lists, watches and holds the cache like the leader does.
	//
	// Without it the informers start on gaining leadership and stop with
	// it.
	EnableWarmup bool
}

// RunElected runs ctrls (and factory's informers) as one candidate of a
// leader election: they reconcile only while this replica holds the
// Lease, and with EnableWarmup their caches are kept warm meanwhile.
//
// It returns when ctx ends, or when leadership, once gained, ends: a
// replica that lost the lease must not reconcile again before it has
// rebuilt its state, so the caller exits (or calls RunElected again with
// a new factory and new controllers; a Controller runs once). The error
// wraps leaderelection.ErrLost when the lease was lost, and joins the
// controllers' errors (a sync timeout, say). RunElected returns after
// every goroutine it started, the informers' included, has ended.
func RunElected(ctx context.Context, rc *client.REST, factory *informer.Factory, opts ElectedOptions, ctrls ...Runnable) error {
	if opts.Election.Callbacks.OnStartedLeading != nil {
		return errors.New("controller: RunElected sets Election.Callbacks.OnStartedLeading itself")
	}
	if len(ctrls) == 0 {
		return errors.New("controller: RunElected without controllers")
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	var mu sync.Mutex
	var errs []error
	record := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	runFactory := func(ctx context.Context) {
		wg.Go(func() {
			if err := factory.Run(ctx); err != nil {
				record(fmt.Errorf("informers: %w", err))
			}
		})
	}
	if opts.EnableWarmup {
		runFactory(ctx)
		for _, c := range ctrls {
			wg.Go(func() {
				// Adds the handlers; Run waits again for what is left.
				if err := c.WaitForSync(ctx); err != nil && ctx.Err() == nil {
					record(fmt.Errorf("warm-up of %s: %w", c.Name(), err))
				}
			})
		}
	}
	cfg := opts.Election
	cfg.Callbacks.OnStartedLeading = func(lctx context.Context) {
		if !opts.EnableWarmup {
			runFactory(lctx)
		}
		var lead sync.WaitGroup
		for _, c := range ctrls {
			lead.Go(func() {
				if err := c.Run(lctx); err != nil {
					record(fmt.Errorf("controller %s: %w", c.Name(), err))
				}
			})
		}
		lead.Wait()
	}
	err := leaderelection.Run(ctx, rc, cfg)
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return errors.Join(append([]error{err}, errs...)...)
}
