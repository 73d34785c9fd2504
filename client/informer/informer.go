package informer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/change/fieldmask"
	"github.com/objwatch/objwatch/client"
)

// Options configure a SharedInformer. The zero value caches every object
// of the resource.
type Options[T client.Object] struct {
	// Namespace limits the informer to one namespace ("" for all).
	Namespace string
	// Namespaces, if set (and Namespace is not), limits the informer to
	// these namespaces: it lists and watches each of them on its own, as
	// a tenant without cluster-wide access must, into one cache, one
	// Lister and one stream of notifications. See the package
	// documentation, # Tenants: namespaces and refusals.
	Namespaces []string
	// LabelSelector and FieldSelector limit it to matching objects. An
	// object that stops matching is deleted from the cache.
	LabelSelector string
	FieldSelector string

	// Indexers are the cache's indexes besides the namespace one.
	Indexers Indexers[T]

	// Transform, if set, is applied to each object after decoding and
	// before it is cached or handed to handlers, e.g. to drop fields and
	// save memory. It may modify and return its argument, but must keep
	// metadata.namespace, name, uid and resourceVersion.
	Transform func(T) (T, error)

	// DropManagedFields leaves metadata.managedFields out of the cache and
	// of what handlers get: the informer asks the server not to send them
	// (Client.WithoutManagedFields, KEP-5958's Accept parameter, which
	// objwatch honours), and clears them itself when a server sends them
	// anyway, before Transform. They are server-side apply's bookkeeping,
	// often a third to a half of an object's bytes, and few controllers
	// read them. Off by default, as in Kubernetes' informers, because code
	// that extracts an apply configuration from cached objects
	// (managedfields.ExtractInto) needs them.
	DropManagedFields bool

	// Compact keeps cached objects encoded and compressed (protobuf for
	// k8s.io/api types, else JSON; then zstd with a dictionary trained on
	// the first objects) instead of decoded, with
	// just their resourceVersion, UID and labels beside them: less than
	// half the memory (ConfigMaps of 1 KiB: about 1.0 KB each instead of
	// 2.0 KB). The cost: every read decodes. Lister.Get, List and ByIndex
	// return new objects, which the caller owns and may modify, at about
	// 9 µs per 1 KiB object; updates with handlers registered also decode
	// the replaced object. Handlers still get decoded objects, shared
	// among handlers. Relists, label selectors and resourceVersion
	// comparisons decode nothing. See the package documentation, # Memory.
	Compact bool

	// Name identifies the informer in logs and, as the label
	// informer="<Name>", in every series of its metrics (default: the
	// resource and selection).
	Name string
	// Metrics, if set, receives the informer's metrics, including each
	// handler's backlog. Any number of informers may share a registerer,
	// as long as their names differ there: New returns an error wrapping
	// ErrDuplicateName for a name already in use. New registers the
	// metrics and Run unregisters them when it returns, so that a stopped
	// informer leaves no series behind and its name can be used again; an
	// informer that is never run stays registered.
	Metrics prometheus.Registerer
	// Log receives the informer's logs (default: discarded).
	Log *slog.Logger

	// PageSize is the page size of paginated lists (default 500).
	PageSize int64
	// DisableStreamingList makes the informer always list with paginated
	// LIST requests. By default it first tries a streaming list (a watch
	// with sendInitialEvents), which needs far less server memory, and
	// falls back when the server does not support it.
	DisableStreamingList bool
	// MinWatchTimeout: each watch asks the server to end it after a random
	// time in [MinWatchTimeout, 2*MinWatchTimeout) (default 5 min), and is
	// then renewed from where it ended.
	MinWatchTimeout time.Duration
	// InitialBackoff and MaxBackoff bound the exponential, jittered delay
	// between failed lists and watches (default 800 ms and 30 s).
	InitialBackoff, MaxBackoff time.Duration

	// DetectMutations turns on the cache mutation detector, for tests: it
	// keeps a serialized copy of each cached object and reports objects
	// that changed in the cache (see CheckMutations). Costly; also turned
	// on by OBJWATCH_DETECT_MUTATIONS=true. A compact cache has nothing
	// to detect (readers get copies): there it is off.
	DetectMutations bool
	// OnMutation receives detected mutations (default: panic).
	OnMutation func(error)

	// FieldMask, if set, is a field mask: RFC 6901 JSON Pointers (e.g.
	// "/spec/replicas", "/metadata/annotations/example.com~1weight"; see
	// package change/fieldmask) naming what the informer's user cares
	// about. Handlers then get OnUpdate only when the value at some
	// pointer, or below it, changed; adds and deletes always. The cache
	// holds each object as of the last change the mask saw (a write that
	// changes only other fields changes neither the cache nor what
	// handlers see; LastResourceVersion moves on). On a server that
	// offers masks (objwatch; see client.REST.WatchExtensions) the server
	// sends only those events; on others (kube-apiserver) the informer
	// watches everything and drops the rest itself, with the same calls
	// to handlers. New refuses a malformed mask.
	FieldMask []string
	// Projection (needs FieldMask) trims every object to the mask plus
	// apiVersion, kind and metadata's name, namespace, uid,
	// resourceVersion, generation and deletionTimestamp, before it is
	// cached or handed out (and before Transform): the server sends
	// projections when it can, else the informer projects what it gets.
	Projection bool
	// Deltas lets the server send an update as a JSON Patch from the
	// cached copy instead of the whole object, which the informer applies
	// to its cached copy (copy-on-write: objects already handed out or
	// returned by the Lister do not change). A patch that does not apply
	// makes the informer relist (objwatch_informer_delta_failures_total).
	// Handlers get whole objects either way. Used only on a server that
	// offers deltas and when the cache holds what the server sends: not
	// with Transform, nor with a FieldMask or Projection the server does
	// not offer.
	Deltas bool
	// DisableServerExtensions makes the informer emulate FieldMask and
	// Projection on the client (and not ask for Deltas) even when the
	// server offers them, e.g. to compare both ways in tests.
	DisableServerExtensions bool
}

type state int

const (
	stateNew state = iota
	stateRunning
	stateStopped
)

// SharedInformer keeps an indexed cache of one resource's objects current
// and tells handlers about every change. See the package documentation for
// the guarantees.
//
// Create it with New (or Shared, from a Factory), add handlers at any time,
// and call Run once. All methods are safe for concurrent use.
type SharedInformer[T client.Object] struct {
	mask *fieldmask.Mask // Options.FieldMask, nil without
	name string
	// defaultResync is the Resync of handlers added without one (set
	// by Factory.Shared before the informer is shared).
	defaultResync time.Duration
	store         *Store[T]
	events        chan entry[T]   // what the reflectors' logs hold, in order
	refls         []*reflector[T] // one, or one per namespace of Options.Namespaces
	metrics       metrics
	detector      *detector
	logger        *slog.Logger

	// mu guards the fields below and is held while the processor applies
	// a log entry and queues its notifications, so that a handler being
	// added sees each change either in its replay or as a notification,
	// never neither and never both. Lock order: mu, then the store's
	// lock, then a handler queue's lock.
	mu         sync.Mutex
	handlers   []*Registration[T]
	handlerSeq int
	state      state
	stopc      chan struct{} // closed when Run's context ends
	wg         sync.WaitGroup
	unregister func()        // unregisters the metrics (nil without Options.Metrics)
	syncedLogs int           // reflectors whose initial list was applied
	synced     atomic.Bool   // every reflector's initial list was applied
	kick       chan struct{} // cap 1: the resync schedule changed
}

// New returns an informer for the objects c reads. It starts nothing; call
// Run.
func New[T client.Object](c *client.Client[T], opts Options[T]) (*SharedInformer[T], error) {
	i, err := newInformer(c, opts)
	if err != nil {
		return nil, err
	}
	if opts.Metrics != nil {
		if err := i.exportMetrics(opts.Metrics); err != nil {
			return nil, err
		}
	}
	return i, nil
}

// newInformer is New without Options.Metrics.
func newInformer[T client.Object](c *client.Client[T], opts Options[T]) (*SharedInformer[T], error) {
	if _, err := labels.Parse(opts.LabelSelector); err != nil {
		return nil, fmt.Errorf("informer: label selector: %w", err)
	}
	if _, err := fields.ParseSelector(opts.FieldSelector); err != nil {
		return nil, fmt.Errorf("informer: field selector: %w", err)
	}
	ext, err := extensions(opts)
	if err != nil {
		return nil, err
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 500
	}
	if opts.MinWatchTimeout <= 0 {
		opts.MinWatchTimeout = 5 * time.Minute
	}
	if opts.InitialBackoff <= 0 {
		opts.InitialBackoff = 800 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 30 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	namespaces, err := scopes(opts.Namespace, opts.Namespaces)
	if err != nil {
		return nil, err
	}
	name := opts.Name
	if name == "" {
		name = selectionName(c.Resource(), strings.Join(namespaces, ","), opts.LabelSelector, opts.FieldSelector)
	}
	logLen := logSize
	if opts.Compact {
		logLen = compactLogSize
	}
	i := &SharedInformer[T]{
		mask:   ext.mask,
		name:   name,
		store:  newStore(opts.Indexers, opts.Compact),
		events: make(chan entry[T], logLen),
		logger: opts.Log.With("informer", name),
		stopc:  make(chan struct{}),
		kick:   make(chan struct{}, 1),
	}
	transform := opts.Transform
	if opts.DropManagedFields {
		c = c.WithoutManagedFields()
		transform = withoutManagedFields(opts.Transform)
	}
	for _, ns := range namespaces {
		log := i.logger
		if len(namespaces) > 1 {
			log = log.With("namespace", ns)
		}
		i.refls = append(i.refls, &reflector[T]{
			name: name, client: c, namespace: ns, labelSelector: opts.LabelSelector, fieldSelector: opts.FieldSelector,
			store: i.store, out: newEventLog(i.events), transform: transform, pageSize: opts.PageSize,
			minTimeout: opts.MinWatchTimeout, backoff: backoff{base: opts.InitialBackoff, max: opts.MaxBackoff},
			log: log, metrics: &i.metrics, streaming: !opts.DisableStreamingList, ext: ext,
		})
	}
	if !opts.Compact && (opts.DetectMutations || os.Getenv("OBJWATCH_DETECT_MUTATIONS") == "true") {
		i.detector = newDetector(opts.OnMutation)
	}
	return i, nil
}

// extensions checks the watch-extension options.
func extensions[T client.Object](opts Options[T]) (extConfig, error) {
	x := extConfig{projection: opts.Projection, deltas: opts.Deltas, disabled: opts.DisableServerExtensions,
		dropMF: opts.DropManagedFields, transform: opts.Transform != nil}
	if opts.FieldMask == nil {
		if opts.Projection {
			return x, errors.New("informer: Projection without a FieldMask")
		}
		return x, nil
	}
	m, err := fieldmask.Parse(opts.FieldMask...)
	if err != nil {
		return x, fmt.Errorf("informer: FieldMask: %w", err)
	}
	x.mask = &m
	return x, nil
}

// withoutManagedFields clears an object's managedFields, then applies
// next (if set).
func withoutManagedFields[T client.Object](next func(T) (T, error)) func(T) (T, error) {
	return func(obj T) (T, error) {
		if obj.GetManagedFields() != nil {
			obj.SetManagedFields(nil)
		}
		if next == nil {
			return obj, nil
		}
		return next(obj)
	}
}

// scopes returns the namespaces an informer reads, one per reflector: ""
// for all, or Options.Namespace, or Options.Namespaces sorted, without
// duplicates.
func scopes(namespace string, namespaces []string) ([]string, error) {
	if len(namespaces) == 0 {
		return []string{namespace}, nil
	}
	if namespace != "" {
		return nil, errors.New("informer: both Namespace and Namespaces are set")
	}
	if slices.Contains(namespaces, "") {
		return nil, errors.New(`informer: Namespaces has "" (for all namespaces, leave Namespaces empty)`)
	}
	return slices.Compact(slices.Sorted(slices.Values(namespaces))), nil
}

// selectionName names an informer after what it reads; ns is its
// namespaces, comma-separated.
func selectionName(res client.Resource, ns, ls, fs string) string {
	s := res.String()
	if ns != "" {
		s += "/" + ns
	}
	if ls != "" {
		s += "?labels=" + ls
	}
	if fs != "" {
		s += "?fields=" + fs
	}
	return s
}

// Name returns the informer's name.
func (i *SharedInformer[T]) Name() string { return i.name }

// Lister returns a reader of the cache.
func (i *SharedInformer[T]) Lister() Lister[T] { return Lister[T]{store: i.store} }

// AddIndexers adds indexes to the cache, at any time.
func (i *SharedInformer[T]) AddIndexers(indexers Indexers[T]) error {
	return i.store.AddIndexers(indexers)
}

// HasSynced reports whether the cache holds the complete initial list.
// Handlers may not have seen it all yet; see Registration.HasSynced.
func (i *SharedInformer[T]) HasSynced() bool { return i.synced.Load() }

// LastResourceVersion returns the resourceVersion the cache reflects:
// every change up to it has been applied to the store, and handlers have
// been notified of them or will be ("" before the first list completed).
// The reflector may have read further.
//
// With Options.Namespaces, each namespace's watch has its own
// resourceVersion; LastResourceVersion returns the smallest, which every
// namespace has read up to ("" until all listed, or if one is not a
// number: Kubernetes does not promise they are).
func (i *SharedInformer[T]) LastResourceVersion() string {
	if len(i.refls) == 1 {
		return i.refls[0].out.appliedRV()
	}
	var least string
	var leastN uint64
	for _, r := range i.refls {
		rv := r.out.appliedRV()
		n, err := strconv.ParseUint(rv, 10, 64)
		if err != nil {
			return ""
		}
		if least == "" || n < leastN {
			least, leastN = rv, n
		}
	}
	return least
}

// LastError returns the error of the informer's last failed list or
// watch, or nil if none failed since the server last accepted one. With
// HasSynced false, it tells why the informer has not
// synced (e.g. the resource does not exist, or access is forbidden).
// A refusal is a *RefusedError, cleared as soon as a list or watch is
// accepted. With Options.Namespaces, it joins the namespaces' errors.
func (i *SharedInformer[T]) LastError() error {
	var errs []error
	for _, r := range i.refls {
		if p := r.lastErr.Load(); p != nil {
			errs = append(errs, *p)
		}
	}
	return join(errs)
}

// join is errors.Join, except that it returns a single error itself.
func join(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// refusal returns the informer's refusals, joined (see RefusedError), or
// nil while access to every namespace it reads is granted or unknown.
func (i *SharedInformer[T]) refusal() error {
	var errs []error
	for _, r := range i.refls {
		if e := r.refused.Load(); e != nil {
			errs = append(errs, e)
		}
	}
	return join(errs)
}

// Resource returns the resource the informer caches.
func (i *SharedInformer[T]) Resource() client.Resource { return i.refls[0].client.Resource() }

// Run runs the informer until ctx ends, then waits for every goroutine it
// started (reflector, processor, handlers) to end before returning: a
// handler call in progress finishes, notifications still queued are
// dropped. Last, it unregisters the informer's metrics. The cache stays
// readable afterwards. Run may be called only once.
func (i *SharedInformer[T]) Run(ctx context.Context) error {
	i.mu.Lock()
	if i.state != stateNew {
		i.mu.Unlock()
		return errors.New("informer: Run called more than once")
	}
	i.state = stateRunning
	for _, r := range i.handlers {
		i.startHandler(r)
	}
	i.mu.Unlock()

	for _, r := range i.refls {
		i.wg.Go(func() { r.run(ctx) })
	}
	i.wg.Add(1)
	go func() {
		defer i.wg.Done()
		i.process(ctx)
	}()
	<-ctx.Done()
	i.mu.Lock()
	i.state = stateStopped
	close(i.stopc)
	i.mu.Unlock()
	i.wg.Wait()
	if i.unregister != nil {
		i.unregister()
	}
	return nil
}

// startHandler starts r's goroutine; i.mu must be held and i running.
func (i *SharedInformer[T]) startHandler(r *Registration[T]) {
	i.wg.Add(1)
	go func() {
		defer i.wg.Done()
		defer close(r.done)
		r.q.serve(r.h, i.stopc, r.removed, i.metrics.forHandler(r.name, r.removed))
	}()
}

// AddHandler adds a handler, at any time. It first receives OnAdd for every
// object already cached (initial true), then every later change. The
// handler runs on its own goroutine with its own queue; opts bound it.
func (i *SharedInformer[T]) AddHandler(h Handler[T], opts HandlerOptions) (*Registration[T], error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	name := opts.Name
	for name == "" || slices.ContainsFunc(i.handlers, func(r *Registration[T]) bool { return r.name == name }) {
		if opts.Name != "" {
			return nil, fmt.Errorf("informer %s: handler %q already exists", i.name, name)
		}
		i.handlerSeq++
		name = "handler-" + strconv.Itoa(i.handlerSeq)
	}
	resync := cmp.Or(opts.Resync, i.defaultResync)
	r := &Registration[T]{
		name: name, h: h, q: newQueue[T](opts.Bound), resync: max(resync, 0), inf: i,
		removed: make(chan struct{}), done: make(chan struct{}),
	}
	r.q.decode = i.store.decode
	i.store.rangeEntries(func(k Key, obj T, blob []byte) bool {
		r.q.push(notification[T]{kind: kindAdd, obj: obj, blob: blob, key: k, initial: true})
		return true
	})
	if i.synced.Load() {
		r.q.markSynced()
	}
	if r.resync > 0 {
		r.nextDue = time.Now().Add(r.resync)
		select {
		case i.kick <- struct{}{}:
		default:
		}
	}
	switch i.state {
	case stateRunning:
		i.handlers = append(i.handlers, r)
		i.startHandler(r)
	case stateNew:
		i.handlers = append(i.handlers, r)
	case stateStopped:
		close(r.done)
	}
	return r, nil
}

// remove unregisters r (Registration.Remove).
func (i *SharedInformer[T]) remove(r *Registration[T]) {
	i.mu.Lock()
	defer i.mu.Unlock()
	n := len(i.handlers)
	i.handlers = slices.DeleteFunc(i.handlers, func(x *Registration[T]) bool { return x == r })
	if len(i.handlers) < n && i.state == stateNew {
		close(r.done) // never started
	}
}

func (i *SharedInformer[T]) registrations() []*Registration[T] {
	i.mu.Lock()
	defer i.mu.Unlock()
	return slices.Clone(i.handlers)
}

// maxBatch bounds how many log entries the processor applies per lock
// acquisition.
const maxBatch = 256

// process applies log entries to the store and queues notifications, and
// runs resyncs and mutation checks.
func (i *SharedInformer[T]) process(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var check <-chan time.Time
	if i.detector != nil {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		check = t.C
	}
	for {
		due, resync := i.nextResync()
		var timerC <-chan time.Time
		if resync {
			timer.Reset(time.Until(due))
			timerC = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case e := <-i.events:
			i.mu.Lock()
			i.apply(e)
			for n := 1; n < maxBatch && len(i.events) > 0; n++ {
				i.apply(<-i.events)
			}
			i.mu.Unlock()
		case now := <-timerC:
			i.resync(now)
		case <-i.kick:
		case <-check:
			i.detector.check()
		}
	}
}

// apply applies one log entry; i.mu must be held.
func (i *SharedInformer[T]) apply(e entry[T]) {
	defer func() {
		if e.mark != "" {
			e.from.applied.Store(&e.mark)
		}
		e.from.done()
	}()
	switch e.op {
	case opMark:
	case opUpsert:
		obj := e.obj
		k := KeyOf(obj)
		cur, had := i.store.identity(k.Namespace, k.Name)
		if had && cur.rv == obj.GetResourceVersion() && cur.uid == obj.GetUID() {
			return // a state the cache has: nothing changed
		}
		if e.maskCheck && had && cur.uid == obj.GetUID() && i.maskUnchanged(k, obj) {
			if !e.keep {
				return // emulated mask: the cache keeps the state handlers saw
			}
			old, _ := i.store.put(obj, i.detector != nil)
			if i.detector != nil {
				i.detector.retire(old)
				i.detector.add(obj)
			}
			return
		}
		// Only handlers need the old object (a compact store decodes it).
		old, _ := i.store.put(obj, len(i.handlers) > 0)
		if i.detector != nil {
			if had {
				i.detector.retire(old)
			}
			i.detector.add(obj)
		}
		initial := !e.from.synced // from its namespace's initial list
		switch {
		case !had:
			i.notify(notification[T]{kind: kindAdd, obj: obj, key: k, initial: initial, stamp: e.stamp})
		case cur.uid != obj.GetUID():
			// Deleted and re-created while the watch was down.
			i.notify(notification[T]{kind: kindDelete, obj: old, key: k, unknown: true, stamp: e.stamp})
			i.notify(notification[T]{kind: kindAdd, obj: obj, key: k, initial: initial, stamp: e.stamp})
		default:
			i.notify(notification[T]{kind: kindUpdate, old: old, obj: obj, key: k, stamp: e.stamp})
		}
	case opDelete:
		old, uid, had := i.store.delete(e.key, len(i.handlers) > 0)
		if !had {
			return
		}
		if i.detector != nil {
			i.detector.retire(old)
		}
		final, unknown := e.obj, e.unknown
		if unknown || final.GetUID() != uid {
			final, unknown = old, true // the object we knew went away unseen
		}
		i.notify(notification[T]{kind: kindDelete, obj: final, key: e.key, unknown: unknown, stamp: e.stamp})
	case opGone:
		// Only to the handlers that are told (no entry, no delivery
		// counted, for the others).
		for _, r := range i.handlers {
			if wantsGone(r.h) {
				r.q.push(notification[T]{kind: kindGone, gone: e.gone})
			}
		}
	case opSynced:
		e.from.synced = true
		if i.syncedLogs++; i.syncedLogs < len(i.refls) {
			return
		}
		i.synced.Store(true)
		for _, r := range i.handlers {
			r.q.markSynced()
		}
	}
}

func (i *SharedInformer[T]) notify(n notification[T]) {
	for _, r := range i.handlers {
		r.q.push(n)
	}
}

// nextResync returns the earliest resync due time, if any handler resyncs.
func (i *SharedInformer[T]) nextResync() (time.Time, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	var due time.Time
	for _, r := range i.handlers {
		if r.resync > 0 && (due.IsZero() || r.nextDue.Before(due)) {
			due = r.nextDue
		}
	}
	return due, !due.IsZero()
}

// resync queues OnUpdate(obj, obj) for every cached object to each handler
// whose resync is due, reading the cache once.
func (i *SharedInformer[T]) resync(now time.Time) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if !i.synced.Load() {
		return
	}
	var due []*Registration[T]
	for _, r := range i.handlers {
		if r.resync > 0 && !r.nextDue.After(now) {
			r.nextDue = now.Add(r.resync)
			due = append(due, r)
		}
	}
	if len(due) == 0 {
		return
	}
	i.store.rangeEntries(func(k Key, obj T, blob []byte) bool {
		n := notification[T]{kind: kindUpdate, old: obj, obj: obj, blob: blob, key: k, resync: true}
		for _, r := range due {
			r.q.push(n)
		}
		return true
	})
}

// CheckMutations checks every cached object (and every object recently
// replaced in the cache) against the copy the mutation detector kept, and
// returns an error naming the ones that changed. It returns nil when the
// detector is off (Options.DetectMutations).
func (i *SharedInformer[T]) CheckMutations() error {
	if i.detector == nil {
		return nil
	}
	return i.detector.check()
}

// WaitForSync waits until the informer has synced or ctx ends, also while
// the server refuses it access (see WaitForSyncOrRefusal).
func (i *SharedInformer[T]) WaitForSync(ctx context.Context) error {
	return WaitForSync(ctx, i.HasSynced)
}

// WaitForSyncOrRefusal is WaitForSync, except that it returns as soon as the server
// refuses the informer access (a *RefusedError; with Options.Namespaces,
// those of every namespace refused, joined) instead of waiting for the
// informer to be granted access, which may never happen. The informer
// itself keeps retrying. Right after a role or binding is created the
// server may still refuse for a moment; use WaitForSync to wait it out.
func (i *SharedInformer[T]) WaitForSyncOrRefusal(ctx context.Context) error {
	return waitSynced(ctx, []runner{i})
}

// WaitSynced is WaitForSyncOrRefusal.
//
// Deprecated: use WaitForSyncOrRefusal (waits are named WaitFor and what
// ends them; see the package documentation, # Names).
func (i *SharedInformer[T]) WaitSynced(ctx context.Context) error { return i.WaitForSyncOrRefusal(ctx) }

// waitSynced waits until every informer has synced, one of them is
// refused access, or ctx ends.
func waitSynced(ctx context.Context, infs []runner) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		synced := true
		var refused []error
		for _, inf := range infs {
			if !inf.HasSynced() {
				synced = false
				if err := inf.refusal(); err != nil {
					refused = append(refused, err)
				}
			}
		}
		switch {
		case synced:
			return nil
		case refused != nil:
			return join(refused)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// WaitForSync waits until every function reports true (e.g. informers' and
// registrations' HasSynced), polling, or until ctx ends.
func WaitForSync(ctx context.Context, synced ...func() bool) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if !slices.ContainsFunc(synced, func(f func() bool) bool { return !f() }) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
