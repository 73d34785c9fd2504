// Package controller runs reconcilers: it turns informer events into keys
// on a work queue (client/workqueue) and calls a Reconciler for each,
// with retries, timeouts, metrics and a graceful stop. Its models are
// controller-runtime's reconcile and builder packages, without
// controller-runtime or client-go.
//
//	deploys := informer.Shared[*appsv1.Deployment](factory, deployments, informer.Selection{})
//	cms := informer.Shared[*corev1.ConfigMap](factory, configMaps, informer.Selection{})
//	go factory.Run(ctx) // caching is explicit: the controller runs no informer
//
//	ctrl, err := controller.NewBuilder("web").
//		For(controller.NewSource(deploys, change.FieldsChanged("spec.replicas"))).
//		Owns(controller.NewSource(cms)).
//		WithOptions(controller.Options{MaxConcurrentReconciles: 4, Metrics: reg}).
//		Complete(controller.Func[controller.Request](reconcile))
//	cmClient := controller.NewClient(ctrl, client.NewClient[*corev1.ConfigMap](rc, configMaps), cms)
//	err = ctrl.Run(ctx)
//
// # Names
//
// One rule across client, client/informer, client/controller and change:
// a function that makes something is New (the package's main type:
// client.New a REST, informer.New a SharedInformer, controller.New a
// Controller) or NewX (an X: client.NewClient, controller.NewSource,
// change.NewFilter); MustX is a NewX or ParseX that panics on bad input;
// informer.Shared returns a Factory's informer, shared by every caller
// asking for the same one. A wait is WaitFor followed by what ends it
// (WaitForSync, WaitForSyncOrRefusal) and ends early with ctx's error.
// The Builder's For, Owns and Watches are controller-runtime's words. The
// older spellings (client.For and Unstructured, informer.For,
// controller.Watch, Map and ClientFor, WaitSynced) still compile,
// deprecated. docs/CLIENT.md gives the reasons.
//
// # Sources
//
// For's objects reconcile themselves; Owns' objects reconcile their
// controller owner (the ownerReference with controller: true), if its API
// group and kind are the primary resource's (any version); Watches' map
// functions say what an event reconciles. Predicates (change.Predicate)
// filter adds, as p(nil, obj), and updates; deletes always pass. When the
// controller owns objects of its primary resource (a ConfigMap mirroring
// a ConfigMap), change.LabelsMatch on the primary's source says which
// objects are primaries, so that the mirrors do not reconcile themselves. Adds from
// an informer's initial list, and resyncs (updates that keep the
// resourceVersion), are queued at workqueue.LowPriority, so real changes
// go first.
//
// # Reconciling
//
// A key is reconciled by one worker at a time; events meanwhile merge
// into one more reconcile after it. An error is retried with the key's
// exponential backoff (Options.Queue), a success resets it. An error
// wrapping ErrTerminal (TerminalError) is counted and not retried. A
// panic is recovered, logged with its stack, counted, and retried as an
// error. Result.RequeueAfter reconciles the key again later. With
// Options.ReconcileTimeout each reconcile's context ends after it.
//
// # Read your writes
//
// A Client (NewClient) reads the informer's cache and writes through the
// API, remembering the resourceVersion of each successful write per
// object. A read of that object (or a List of its namespace) waits until
// the cache has it at that resourceVersion or newer, at most
// Options.ReadYourWritesTimeout (default 5 s; on expiry it reads what the
// cache has). resourceVersions are compared as integers (etcd revisions,
// for objwatch and Kubernetes alike); one that does not parse is not
// waited for. A delete waits until the cache no longer has the object it
// had, or has it being deleted. Without this a reconcile that follows its
// own write by milliseconds acts on the state before it: conflicts, or a
// change made twice (TestReadYourWrites shows both ways).
//
// The stale-cache guard uses the same record: a reconcile of a primary
// object that the controller wrote, while the cache still has an older
// resourceVersion of it, is not started but put off by
// Options.StaleRequeue, counted in objwatch_controller_stale_cache_skips_total.
// So a reconciler reading the primary from the cache, even directly
// through its Lister, never sees the state before its own last write.
//
// Both are on by default; Options.DisableReadYourWrites turns both off.
// Only writes made through the controller's Clients are known.
//
// # Lifecycle and leader election
//
// Run adds the controller's handlers to its informers, waits for every
// informer and handler to sync (Options.SyncTimeout; the error wraps
// ErrSyncTimeout and names each informer that did not sync with its last
// list or watch error), then starts the workers. When its context ends no
// reconcile starts; running ones finish, their contexts cancelled after
// Options.ShutdownTimeout; queued keys are dropped, the queue shut down;
// handlers are removed. Run returns after every goroutine it started has
// ended. It may be called once.
//
// Run is what a leader-election callback calls: losing leadership must
// cancel Run's context, which stops all work before Run returns. For a
// warm standby call WaitForSync first: the handlers are added and the
// queue fills while the replica waits to lead, and Run starts at once.
// RunElected does all of it: it runs a factory's informers and
// controllers as one candidate of a leader election, with
// ElectedOptions.EnableWarmup (controller-runtime's EnableWarmup) for a
// warm standby. With 10k ConfigMaps the first reconcile on a new leader
// came 7 to 24 ms after the old leader released the lease warm, 280 to
// 450 ms cold (TestWarmStandby logs both).
//
// A Factory's DefaultResync (informer.FactoryOptions) is the resync
// period of the controller's handlers.
//
// # Metrics
//
// With Options.Metrics, controller-runtime's controller metrics, each with
// the constant label controller="<name>": controller_runtime_reconcile_total
// {result=success|error|requeue|requeue_after} (requeue stays 0: Result has
// no Requeue), _reconcile_errors_total, _terminal_reconcile_errors_total,
// _reconcile_panics_total, _reconcile_timeouts_total,
// _reconcile_time_seconds, _active_workers and _max_concurrent_reconciles;
// plus objwatch_controller_stale_cache_skips_total, and the queue's
// workqueue_* metrics with name="<name>". Two controllers of one name
// cannot share a registerer (ErrDuplicateName); Run unregisters them.
//
// # Concurrency
//
// Controller, Builder-made controllers and Client are safe for concurrent
// use. Goroutines: Run's workers, owned and awaited by Run; the queue's
// timer, stopped by Run; the informers' handler goroutines, owned by the
// informers and removed by Run. A Client starts none: its waits poll the
// cache (1 ms, doubling to 20 ms).
//
// This package never imports objwatch's server, etcd or client-go (a test
// in package client enforces it).
package controller
