// Package informer keeps a local, indexed, always-current copy of a
// resource's objects and tells handlers about every change, in order.
//
//	inf, err := informer.New(client.NewClient[*corev1.ConfigMap](rc, configMaps), informer.Options[*corev1.ConfigMap]{})
//	reg, err := inf.AddHandler(informer.HandlerFuncs[*corev1.ConfigMap]{
//		Update: func(old, new *corev1.ConfigMap) { ... },
//	}, informer.HandlerOptions{Name: "reloader"})
//	go inf.Run(ctx)
//	informer.WaitForSync(ctx, reg.HasSynced)
//	cm, ok := inf.Lister().Get("default", "settings")
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
// # How it works
//
// A reflector lists the resource (as a streaming list — a watch with
// sendInitialEvents — when the server supports it, else with paginated
// LISTs) and then watches it from the list's resourceVersion. It appends
// what it reads to an event log: a plain ordered queue that never looks
// at the cache. One processor goroutine applies the log to the Store, in
// order, and queues a notification for each handler. Each handler has its
// own goroutine and bounded queue.
//
// A relist compares each listed object's resourceVersion and UID with the
// cache before decoding it, so it costs memory and CPU only for objects
// that changed; the cache is never built twice.
//
// # Guarantees
//
//   - No change is lost. After a disconnect the watch resumes from the
//     last resourceVersion seen (bookmarks advance it). If the server has
//     compacted that history (410 Gone) the reflector relists and applies
//     only the differences: objects whose resourceVersion or UID changed
//     are updated (or deleted and re-added), objects that disappeared are
//     deleted with finalStateUnknown; unchanged objects produce nothing.
//   - Per object, a handler sees states in the order they happened, each a
//     real state of the object, and an OnDelete for every object it was
//     told about that goes away. It may skip intermediate states — across
//     a relist, or when its backlog exceeds HandlerOptions.Bound, where
//     queued notifications for one object are merged — but never sees an
//     older state after a newer one.
//   - Across objects, notifications follow the order the changes were read,
//     except that a merged notification keeps the place of the one it was
//     merged into.
//   - OnUpdate(old, new) always has old.UID == new.UID; an object deleted
//     and re-created unseen arrives as OnDelete then OnAdd.
//   - A handler added at any time first gets OnAdd for every cached
//     object, then every later change, with no gap and no duplicate.
//
// # Concurrency
//
// All types are safe for concurrent use. SharedInformer.Run starts the
// reflector, processor and handler goroutines and returns only after all
// of them ended; handlers added while it runs are part of it. A handler's
// methods run on its own goroutine, one call at a time; a slow handler
// delays only itself and its backlog is exported as the
// objwatch_informer_handler_backlog gauge. Registration.Remove never
// blocks; Registration.Done says when the handler's last call returned.
//
// # Metrics
//
// With Options.Metrics, the informer exports into that registry its
// cache size (objwatch_informer_objects), watch events, lists, relists,
// watch restarts and errors (objwatch_informer_*_total), and per handler
// (label handler): its backlog, notifications delivered and coalesced,
// how long its calls take (objwatch_informer_handler_duration_seconds)
// and the event lag (objwatch_informer_event_lag_seconds), the time from
// a change to the handler call that delivers it. objwatch's server stamps
// watch events with their commit time, and lag is then measured from it
// (source="commit"); for other servers, and for listed objects, it is
// measured from when the informer read the change (source="receive").
//
// Every series carries the label informer="<Options.Name>", so any number
// of informers, and of factories, can share one registry; names must
// differ there. New returns an error wrapping ErrDuplicateName otherwise;
// a Factory runs that informer without metrics and reports the error
// through Factory.Err, and FactoryOptions.Name keeps two factories' names
// apart. When Run returns, the informer's series are unregistered.
//
// # Tenants: namespaces and refusals
//
// A user allowed to read a resource only in some namespaces (a tenant, in
// Kubernetes' RBAC: Roles bound in those namespaces, no ClusterRole
// binding) cannot list or watch it cluster-wide. Options.Namespaces (or
// FactoryOptions.Namespaces, for a whole factory) makes one informer over
// a set of namespaces: it runs one reflector, one list and watch, per
// namespace, all feeding one cache, one Lister, the same indexes and one
// stream of notifications, with the guarantees above. Each namespace
// resumes its watch from its own resourceVersion, and relists on its own:
// a relist of namespace a compares and deletes only a's objects, and
// waits only for a's changes to be applied, so other namespaces' churn
// does not delay it. HasSynced is true once every namespace has listed;
// an object's OnAdd says initial while its own namespace's initial list
// is delivered. LastResourceVersion is then the smallest of the
// namespaces' resourceVersions.
//
// When the server refuses a list or watch (403 Forbidden, or 401
// Unauthorized) the informer does not retry silently: LastError returns
// a *RefusedError naming the informer, resource, namespace ("" for the
// cluster scope) and verb, and matching client.ErrForbidden (or
// ErrUnauthorized) with errors.Is; the gauge
// objwatch_informer_refused{namespace,verb} is 1; the informer logs it at
// warning level, once per change of refusal. SharedInformer.WaitForSyncOrRefusal
// and Factory.WaitForSyncOrRefusal return the refusal right away, where WaitForSync
// would wait for ctx to end. The informer still retries, with its
// backoff, since access may be granted later (a binding created after the
// program started), and clears the state as soon as the server accepts a
// list or watch; a revoked watch, which the server ends with a 403, is
// reported the same way. Objects of a refused namespace stay in the cache
// as last seen.
//
// Label selectors (a "tenant=x" label, say) make an informer read less,
// but they are a convenience, never a security boundary: whoever may list
// a namespace may list it without the selector. Namespaces and RBAC are
// the boundary; ask what is allowed with client.REST.CanI and Rules.
//
// # The cache is read-only
//
// Objects returned by a Lister or passed to a handler are the cached
// objects themselves, shared by every reader: never modify them. Copy an
// object before changing it (for k8s.io/api types, obj.DeepCopy()). Tests
// can turn on the mutation detector (Options.DetectMutations or
// OBJWATCH_DETECT_MUTATIONS=true) to catch violations.
//
// A compact cache (Options.Compact) is different: it holds no objects,
// only their encodings, and every Lister call decodes new objects that the
// caller owns and may modify. Objects passed to handlers are still shared,
// among handlers, and must not be modified.
//
// # Field masks, projections and delta events
//
// Options.FieldMask names the fields (RFC 6901 JSON Pointers) whose
// changes handlers care about: other updates are not delivered, and the
// cache keeps each object as of the last change the mask saw.
// Options.Projection trims cached objects to those fields plus their
// identity; Options.Deltas lets updates arrive as JSON Patches, applied to
// the cached copy without changing objects already handed out (an
// unstructured object shares its unchanged parts with its previous
// version, which is why cached objects must never be modified). The
// informer asks an objwatch server for these (one GET /version per REST
// tells what it offers) and emulates them on other servers, with the same
// calls to handlers. The wire format is in docs/WATCH-EXTENSIONS.md.
//
// # Memory
//
// A decoded cache costs what client-go's does: for ConfigMaps of 1 KiB
// (3 labels, 8 data keys of 100 random characters) about 2.0 KB per
// object, 0.96 times client-go's heap (BenchmarkInformer, 10,000 objects).
// A compact cache (Options.Compact) keeps per object its protobuf (JSON
// for types without protobuf methods), zstd-compressed with a dictionary
// trained on the informer's first 64 objects, plus its resourceVersion,
// UID and labels for the comparisons and label selectors that must not
// decode: about 1.0 KB for the same ConfigMap, 0.47 times client-go's heap
// (~0.8 MB of compressor state per informer included). Real objects, less
// random, compress better.
//
// The price is CPU: Lister.Get takes about 9 µs for that ConfigMap
// instead of 40 ns, a List decodes every object it returns, and an update
// decodes the replaced object when handlers or indexes need it. A handler
// added later and each resync queue the cached blobs, decoded one by one by
// the handler's own goroutine as it delivers them (the processor does not
// stall); AddIndexers decodes the whole cache once.
package informer
