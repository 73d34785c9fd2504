// Package gc is objwatch's garbage collector: it deletes objects whose
// owners are gone and carries out Orphan and Foreground deletions, with
// the rules of Kubernetes' garbage collector:
//
//   - A dependent none of whose owner references names an existing owner
//     (the same name and uid) is deleted, in the background (or as its
//     own orphan or foregroundDeletion finalizer asks). If some owners
//     exist, the references to the absent ones are removed instead.
//   - An owner being deleted with the "orphan" finalizer (propagationPolicy
//     Orphan) has its reference removed from every dependent; then the
//     finalizer is removed.
//   - An owner being deleted with the "foregroundDeletion" finalizer
//     (propagationPolicy Foreground) has its dependents deleted (those
//     with dependents of their own in the foreground too); once no
//     dependent with blockOwnerDeletion remains, the finalizer is removed.
//   - A container being deleted — a terminating namespace, or a custom
//     resource definition with its cleanup finalizer (Backend.Container) —
//     has its content deleted (after Config.DrainDelay) and is finished
//     (Backend.Finish) once nothing is left in it, as Kubernetes'
//     namespace controller and custom resource finalizer do. Content held by finalizers is waited
//     for: every deletion in the container, and a backoff of up to 30 s,
//     look again.
//   - A dependent whose owner reference's uid is that of an object of the
//     referenced kind in another namespace gets Kubernetes' Warning Event
//     OwnerRefInvalidNamespace (Backend.Warn; see misplaced). A namespaced
//     one is collected all the same (its owner is not in its namespace);
//     a cluster-scoped one, whose namespaced owner cannot be judged, never
//     is.
//
// The collector follows every stored object with one etcd watch of the
// whole registry, in revision order, and keeps an index of the objects
// that have owner references, by owner key. It decodes only the writes
// that may matter (see interesting): an object without owner references
// or deletion costs two byte searches. Every action is decided on fresh
// quorum reads of the object and its owners, with two remembered facts:
// an owner uid once found absent stays absent (uids are never reused),
// and an owner a read found existing lets a new dependent of it skip its
// check until the watch shows that owner deleting or deleted. Every action
// is conditional on the object's uid, through the server's own delete and
// update paths (Backend), so that running a collector in each of several
// servers on one etcd is safe: one of them acts, the others find nothing
// to do.
//
// Collector.Run owns its goroutines (the feed and the workers) and
// returns when its context ends and they have stopped.
package gc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/storage"
)

// The finalizers of Orphan and Foreground deletion, as in Kubernetes.
const (
	FinalizerOrphan           = metav1.FinalizerOrphanDependents
	FinalizerDeleteDependents = metav1.FinalizerDeleteDependents
	defaultWorkers            = 4
	listPage                  = 500
	absentOwners              = 1024 // owner references remembered as absent
	ownerHomes                = 1024 // owner uids looked up in every namespace
	warnings                  = 1024 // (dependent, owner) pairs warned about
	// ReasonOwnerRefInvalidNamespace is the reason of the Warning Event
	// about a dependent whose owner exists in another namespace, as
	// Kubernetes' collector records it.
	ReasonOwnerRefInvalidNamespace = "OwnerRefInvalidNamespace"
	feedRetry                      = time.Second
	// anyUID makes Backend.Update change whichever object has the key.
	anyUID types.UID = ""
)

// Backend is the server the collector reads and acts through. Its methods
// are safe for concurrent use.
type Backend interface {
	// OwnerKey returns the storage key of the object ref names, for a
	// dependent in namespace ns. ok is false when no served resource has
	// the reference's group and kind (the owner cannot be judged), or the
	// owner's resource is namespaced and ns is empty.
	OwnerKey(ref metav1.OwnerReference, ns string) (key string, ok bool)
	// OwnerKind returns the key prefix under which every object of ref's
	// kind is stored (in every namespace), and whether the kind is
	// namespaced; ok is false when no served resource has the kind.
	OwnerKind(ref metav1.OwnerReference) (prefix string, namespaced, ok bool)
	// Warn records a Warning Event with reason and message about the
	// object at key, whose metadata is m, as Kubernetes' collector does.
	Warn(ctx context.Context, key string, m Meta, reason, message string) error
	// Delete deletes the object at key if its uid is uid and, when rev is
	// not 0, it is still at revision rev, with policy. An absent object or
	// another uid is not an error; a newer revision is ErrChanged.
	Delete(ctx context.Context, key string, uid types.UID, rev int64, policy metav1.DeletionPropagation) error
	// Update changes the object at key if its uid is uid (any uid for
	// anyUID), through the server's update path: change edits obj and
	// reports whether it changed anything. An absent object or another uid
	// is not an error.
	Update(ctx context.Context, key string, uid types.UID, change func(obj *unstructured.Unstructured) bool) error
	// Container reports whether the object at key, with metadata m, is a
	// container whose deletion waits until its content is gone, and if so
	// which keys are its content.
	Container(key string, m Meta) (contains func(key string) bool, ok bool)
	// Drain starts the deletion of the content of the container at key
	// that is not being deleted yet and returns how many objects are left.
	Drain(ctx context.Context, key string) (left int64, err error)
	// Finish removes the content finalizer of the emptied container at
	// key if its uid is uid, which then goes once no finalizer is left.
	Finish(ctx context.Context, key string, uid types.UID) error
}

// Config configures a Collector.
type Config struct {
	Store   storage.Interface
	Backend Backend
	// Prefix is the key prefix of every object (the registry's root).
	Prefix string
	// Workers process keys concurrently (default 4); a key is never
	// processed by two at once.
	Workers int
	Log     *slog.Logger
	// DrainDelay, if set, is how long after the collector sees a container
	// start being deleted it waits before draining it: Kubernetes'
	// namespace controller waits 5 s (namespaceDeletionGracePeriod), so
	// that every API server refuses new objects in the namespace, and
	// meanwhile whoever deleted it may finalize it themselves (envtest
	// users' helpers do, as envtest runs no namespace controller). 0: at
	// once. A container found deleting by a (re)list is drained at once.
	DrainDelay func(key string) time.Duration
}

// Collector is a garbage collector. Its methods are safe for concurrent
// use; Run is called once.
type Collector struct {
	cfg   Config
	queue *queue

	mu  sync.Mutex
	idx *index
	// synced: idx holds every stored object's references as of the
	// feed's position. False while (re)listing: workers wait for it, so
	// that an Orphan or Foreground deletion never acts on part of its
	// dependents.
	synced bool

	stats Stats
	// absent remembers owner references found absent (no object with
	// the uid at the key the reference resolves to, for a dependent's
	// namespace): a uid is never reused, so the next dependent of the same
	// owner needs no read of it. It is keyed by the owner's key, not by
	// uid alone: a uid absent from one namespace may live in another.
	absent *recent[ownerAt, struct{}]
	// homes remembers where owner uids live that a reference did not
	// find where it resolves (see misplaced): the namespace of the object
	// of the reference's kind with that uid, "" when there is none.
	homes *recent[ownerAt, string]
	// warned holds the (dependent, owner) uid pairs already warned about.
	warned *recent[[2]types.UID, struct{}]
	// draining maps the key of each container being deleted to the test
	// of its content's keys.
	draining map[string]func(string) bool
	// drainAfter holds the containers in their DrainDelay, until when.
	drainAfter map[string]time.Time
}

// index holds the owner references of every stored object that has any.
// Its maps are guarded by Collector.mu.
type index struct {
	// owners maps a dependent's key to the keys of its owners, as resolved
	// at the dependent's last write; dependents is the reverse.
	owners     map[string][]string
	dependents map[string]map[string]bool
	// unresolved holds the dependents with a reference no served resource
	// resolves (a custom kind not served yet): KindsChanged re-reads them.
	unresolved map[string]bool
	// present holds owners (keys with dependents) known to exist and not
	// to be deleting, with the revision they were seen at, so that a new
	// dependent of one needs no check. gone holds, for keys with
	// dependents, the revision of the last write the feed saw that deleted
	// the key or marked it deleting: a read older than that cannot say the
	// owner is present.
	present map[string]presentOwner
	gone    map[string]int64
}

// ownerAt is an owner uid at a key (absent), or under a resource's
// prefix (homes).
type ownerAt struct {
	key string
	uid types.UID
}

type presentOwner struct {
	uid types.UID
	rev int64
}

func newIndex() *index {
	return &index{owners: map[string][]string{}, dependents: map[string]map[string]bool{}, unresolved: map[string]bool{},
		present: map[string]presentOwner{}, gone: map[string]int64{}}
}

// errNotSynced makes a worker retry a key until the feed has listed;
// errWaiting retries a key after a backoff, without a warning (a
// container that still has content, an object that changed since read).
var (
	errNotSynced = errors.New("the collector is listing the store")
	errWaiting   = errors.New("waiting")
	// ErrChanged is Backend.Delete's answer when the object changed since
	// the revision the decision was made on: it is judged again.
	ErrChanged = errors.New("the object changed since it was read")
)

// Stats counts what the collector did.
type Stats struct {
	Deleted, Orphaned, Released, Errors int64
}

// Add returns the sums of s's and t's counts.
func (s Stats) Add(t Stats) Stats {
	return Stats{s.Deleted + t.Deleted, s.Orphaned + t.Orphaned, s.Released + t.Released, s.Errors + t.Errors}
}

// New returns a collector; Run starts it.
func New(cfg Config) *Collector {
	if cfg.Workers <= 0 {
		cfg.Workers = defaultWorkers
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Collector{cfg: cfg, queue: newQueue(), idx: newIndex(), absent: newRecent[ownerAt, struct{}](absentOwners),
		homes: newRecent[ownerAt, string](ownerHomes), warned: newRecent[[2]types.UID, struct{}](warnings), draining: map[string]func(string) bool{}, drainAfter: map[string]time.Time{}}
}

// KindsChanged tells the collector that the served resources changed (a
// custom resource definition came or went): references it could not
// resolve are resolved again.
func (c *Collector) KindsChanged() {
	c.mu.Lock()
	keys := make([]string, 0, len(c.idx.unresolved))
	for k := range c.idx.unresolved {
		keys = append(keys, k)
	}
	c.mu.Unlock()
	for _, k := range keys {
		c.queue.add(k)
	}
}

// Stats returns what the collector did so far.
func (c *Collector) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Pending is the number of keys waiting to be processed.
func (c *Collector) Pending() int { return c.queue.len() }

// Run follows the store and processes what it finds until ctx ends.
func (c *Collector) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() {
			for {
				key, ok := c.queue.get()
				if !ok {
					return
				}
				err := c.process(ctx, key)
				if err != nil && ctx.Err() == nil && err != errNotSynced && err != errWaiting {
					c.count(func(s *Stats) { s.Errors++ })
					c.cfg.Log.Warn("garbage collector: will retry", "key", key, "err", err)
				}
				c.queue.done(key, err != nil)
			}
		})
	}
	c.feed(ctx)
	c.queue.close()
	wg.Wait()
}

func (c *Collector) count(f func(*Stats)) {
	c.mu.Lock()
	f(&c.stats)
	c.mu.Unlock()
}

// feed lists every object, then watches from the list's revision; after a
// compaction or an error it lists again. A store whose keys live on
// several etcd clusters (storage.Partitioned) is listed and watched part
// by part, each from its own revision: revisions of two clusters are not
// comparable, and the collector never compares them. Every revision it
// keeps (present, gone) is one key's, from that key's own cluster; the
// order it relies on is each cluster's order of its own keys, never an
// order between an owner on one cluster and a dependent on another (those
// are judged on fresh reads of both). While one part cannot be listed or
// watched the collector relists every feedRetry and acts on nothing: an
// index without that part's dependents would let an Orphan or Foreground
// deletion act on part of them.
func (c *Collector) feed(ctx context.Context) {
	for ctx.Err() == nil {
		parts, revs, err := c.list(ctx)
		if err == nil {
			err = c.watch(ctx, parts, revs)
		}
		if ctx.Err() != nil {
			return
		}
		c.cfg.Log.Warn("garbage collector: relisting", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(feedRetry):
		}
	}
}

// list reads every object at one revision and rebuilds the index from it.
// Dependents are queued when an owner is missing from that snapshot or
// being deleted in the foreground, and owners when an Orphan or Foreground
// deletion is under way.
func (c *Collector) list(ctx context.Context) ([]storage.Part, []int64, error) {
	c.mu.Lock()
	c.synced = false
	c.mu.Unlock()
	var (
		parts    = storage.PartsOf(c.cfg.Store, c.cfg.Prefix)
		revs     = make([]int64, len(parts))
		uids     = map[string]presentOwner{} // uid and the revision of its part's list
		metas    = map[string]Meta{}
		fg       = map[string]bool{}              // keys of owners deleting in the foreground
		draining = map[string]func(string) bool{} // containers being deleted
	)
	for i, part := range parts {
		if err := c.listPart(ctx, part, &revs[i], func(kv storage.KeyValue, rev int64) {
			m, err := DecodeMeta(kv.Value)
			if err != nil {
				return // not an object the collector can judge
			}
			uids[kv.Key] = presentOwner{uid: m.UID, rev: rev}
			if !interesting(kv.Value) {
				return
			}
			metas[kv.Key] = m
			if m.Deleting() && m.HasFinalizer(FinalizerDeleteDependents) {
				fg[kv.Key] = true
			}
			if contains, ok := c.cfg.Backend.Container(kv.Key, m); ok {
				draining[kv.Key] = contains
			}
		}); err != nil {
			return nil, nil, err
		}
	}
	idx := newIndex()
	var queue []string
	for key, m := range metas {
		c.track(idx, key, m)
		if pendingOwnerWork(m) {
			queue = append(queue, key)
		}
		check := false
		for _, ref := range m.OwnerReferences {
			okey, resolved := c.cfg.Backend.OwnerKey(ref, m.Namespace)
			switch {
			case !resolved || uids[okey].uid != ref.UID || fg[okey]:
				check = true
			case !metas[okey].Deleting():
				idx.present[okey] = uids[okey]
			}
		}
		if check {
			queue = append(queue, key)
		}
	}
	for key := range draining {
		queue = append(queue, key)
	}
	c.mu.Lock()
	c.idx, c.synced, c.draining = idx, true, draining
	c.mu.Unlock()
	for _, key := range queue {
		c.queue.add(key)
	}
	return parts, revs, nil
}

// listPart reads every key of part under the prefix at one revision,
// which it leaves in *rev, calling f with each.
func (c *Collector) listPart(ctx context.Context, part storage.Part, rev *int64, f func(kv storage.KeyValue, rev int64)) error {
	var start string
	for {
		page, err := part.Store.List(ctx, c.cfg.Prefix, storage.ListOptions{Revision: *rev, Limit: listPage, StartKey: start})
		if err != nil {
			if part.Name != "" {
				err = fmt.Errorf("etcd cluster of %s: %w", part.Name, err)
			}
			return err
		}
		*rev = page.Revision
		for _, kv := range page.KVs {
			if part.Holds(kv.Key) {
				f(kv, page.Revision)
			}
		}
		if !page.More || len(page.KVs) == 0 {
			return nil
		}
		start = page.KVs[len(page.KVs)-1].Key + "\x00"
	}
}

// watch follows changes of every part after its revision in revs until
// an error or ctx ends. The events of one part are handled in its order;
// those of two parts in the order they arrive.
func (c *Collector) watch(ctx context.Context, parts []storage.Part, revs []int64) error {
	ctx, cancel := context.WithCancel(ctx)
	type partEvent struct {
		part storage.Part
		ev   storage.Event
	}
	events := make(chan partEvent)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // first: the forwarders return
	// Without previous values: the collector reads only the new one, and
	// etcd would otherwise read the old value of every change for it.
	wctx := storage.WithoutPrev(ctx)
	for i, part := range parts {
		w, err := part.Store.Watch(wctx, c.cfg.Prefix, revs[i]+1)
		if err != nil {
			return err
		}
		wg.Go(func() {
			defer w.Stop()
			for ev := range w.Events() {
				select {
				case events <- partEvent{part, ev}:
				case <-ctx.Done():
					return
				}
			}
			select {
			case events <- partEvent{part, storage.Event{Type: storage.Error, Err: errors.New("watch ended")}}:
			case <-ctx.Done():
			}
		})
	}
	for {
		var pe partEvent
		select {
		case pe = <-events:
		case <-ctx.Done():
			return nil
		}
		ev := pe.ev
		if ev.Type != storage.Error && !pe.part.Holds(ev.KV.Key) {
			continue
		}
		switch ev.Type {
		case storage.Put:
			c.put(ev.KV)
		case storage.Delete:
			c.deleted(ev.KV.Key, ev.Revision)
		case storage.Error:
			if ctx.Err() != nil {
				return nil
			}
			if pe.part.Name != "" {
				return fmt.Errorf("etcd cluster of %s: %w", pe.part.Name, ev.Err)
			}
			return ev.Err
		}
	}
}

// put handles a write of key.
func (c *Collector) put(kv storage.KeyValue) {
	c.mu.Lock()
	_, tracked := c.idx.owners[kv.Key]
	c.mu.Unlock()
	if !tracked && !interesting(kv.Value) {
		return
	}
	m, err := DecodeMeta(kv.Value)
	if err != nil {
		return
	}
	if m.Deleting() {
		// A check that read the owner before this write must not record
		// it present after it (see notePresent).
		c.mu.Lock()
		delete(c.idx.present, kv.Key)
		if len(c.idx.dependents[kv.Key]) > 0 {
			c.idx.gone[kv.Key] = kv.ModRevision
		}
		c.mu.Unlock()
	}
	changed, dropped := c.track(c.idx, kv.Key, m)
	if changed && !c.ownersPresent(m) || pendingOwnerWork(m) {
		c.queue.add(kv.Key)
	}
	if contains, ok := c.cfg.Backend.Container(kv.Key, m); ok {
		c.mu.Lock()
		if _, known := c.draining[kv.Key]; !known && c.cfg.DrainDelay != nil {
			if d := c.cfg.DrainDelay(kv.Key); d > 0 {
				c.drainAfter[kv.Key] = time.Now().Add(d)
			}
		}
		c.draining[kv.Key] = contains
		c.mu.Unlock()
		c.queue.add(kv.Key)
	}
	// An owner the dependent no longer refers to may have been waiting for
	// it in a Foreground deletion.
	for _, o := range dropped {
		c.queue.add(o)
	}
}

// deleted handles the deletion of key: its dependents may have lost their
// last owner, and its owners one dependent that blocked their deletion.
func (c *Collector) deleted(key string, rev int64) {
	c.mu.Lock()
	deps := make([]string, 0, len(c.idx.dependents[key]))
	for d := range c.idx.dependents[key] {
		deps = append(deps, d)
	}
	delete(c.idx.present, key)
	if len(deps) > 0 {
		c.idx.gone[key] = rev
	}
	var containers []string
	for ck, contains := range c.draining {
		if ck != key && contains(key) {
			containers = append(containers, ck) // one object less in it
		}
	}
	delete(c.draining, key)
	delete(c.drainAfter, key)
	c.mu.Unlock()
	_, owners := c.track(c.idx, key, Meta{})
	for _, d := range deps {
		c.queue.add(d)
	}
	for _, o := range owners {
		c.queue.add(o)
	}
	for _, ck := range containers {
		c.queue.add(ck)
	}
}

// track records in idx key's owners from m. changed reports whether they
// changed (a new dependent, or new references, needs a check), dropped
// the owner keys it no longer refers to.
func (c *Collector) track(idx *index, key string, m Meta) (changed bool, dropped []string) {
	var keys []string
	for _, ref := range m.OwnerReferences {
		if okey, ok := c.cfg.Backend.OwnerKey(ref, m.Namespace); ok && !slices.Contains(keys, okey) {
			keys = append(keys, okey)
		}
	}
	unresolved := len(keys) < len(m.OwnerReferences)
	c.mu.Lock()
	defer c.mu.Unlock()
	old, had := idx.owners[key]
	for _, o := range old {
		if !slices.Contains(keys, o) {
			dropped = append(dropped, o)
		}
		if set := idx.dependents[o]; set != nil {
			delete(set, key)
			if len(set) == 0 {
				delete(idx.dependents, o)
				delete(idx.present, o)
				delete(idx.gone, o)
			}
		}
	}
	delete(idx.unresolved, key)
	if len(m.OwnerReferences) == 0 {
		delete(idx.owners, key)
		return false, dropped
	}
	if unresolved {
		idx.unresolved[key] = true
	}
	idx.owners[key] = keys
	for _, o := range keys {
		set := idx.dependents[o]
		if set == nil {
			set = map[string]bool{}
			idx.dependents[o] = set
		}
		set[key] = true
	}
	return !had || !slices.Equal(old, keys) || unresolved, dropped
}

// ownersPresent reports whether every owner m refers to is known to exist
// with the referenced uid and not to be deleting: then m needs no check.
func (c *Collector) ownersPresent(m Meta) bool {
	for _, ref := range m.OwnerReferences {
		okey, ok := c.cfg.Backend.OwnerKey(ref, m.Namespace)
		if !ok {
			return false
		}
		c.mu.Lock()
		p, known := c.idx.present[okey]
		c.mu.Unlock()
		if !known || p.uid != ref.UID {
			return false
		}
	}
	return true
}

// notePresent records that a read at revision rev found the owner at key
// with uid, not deleting: unless the feed has since seen the key deleted
// or marked deleting (a check racing with the owner's deletion).
func (c *Collector) notePresent(key string, uid types.UID, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.idx.dependents[key]) > 0 && c.idx.gone[key] < rev {
		c.idx.present[key] = presentOwner{uid: uid, rev: rev}
	}
}

// pendingOwnerWork reports whether m is an owner whose Orphan or
// Foreground deletion waits on the collector.
func pendingOwnerWork(m Meta) bool {
	return m.Deleting() && (m.HasFinalizer(FinalizerOrphan) || m.HasFinalizer(FinalizerDeleteDependents))
}

// dependentsOf returns the keys indexed as dependents of key.
func (c *Collector) dependentsOf(key string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.idx.dependents[key]))
	for d := range c.idx.dependents[key] {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// get reads key with a quorum read; found is false if it is absent.
func (c *Collector) get(ctx context.Context, key string) (Meta, bool, error) {
	m, _, found, err := c.getRev(ctx, key)
	return m, found, err
}

// getRev is get with the object's modification revision.
func (c *Collector) getRev(ctx context.Context, key string) (Meta, int64, bool, error) {
	kv, err := c.cfg.Store.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return Meta{}, 0, false, nil
	}
	if err != nil {
		return Meta{}, 0, false, err
	}
	m, err := DecodeMeta(kv.Value)
	m.Rev = kv.ModRevision
	return m, kv.ModRevision, err == nil, err
}

// process does what key's object needs: its Orphan or Foreground deletion
// as an owner, then its collection as a dependent.
func (c *Collector) process(ctx context.Context, key string) error {
	c.mu.Lock()
	synced, unresolved := c.synced, c.idx.unresolved[key]
	idx := c.idx
	c.mu.Unlock()
	if !synced {
		return errNotSynced
	}
	m, found, err := c.get(ctx, key)
	if err != nil || !found {
		return err
	}
	if unresolved {
		c.track(idx, key, m) // the kinds may be served now
	}
	if m.Deleting() {
		switch {
		case m.HasFinalizer(FinalizerOrphan):
			return c.orphan(ctx, key, m)
		case m.HasFinalizer(FinalizerDeleteDependents):
			return c.deleteDependents(ctx, key, m)
		}
		if _, ok := c.cfg.Backend.Container(key, m); ok {
			return c.drain(ctx, key, m)
		}
		return nil // its deletion is under way; nothing to collect
	}
	if len(m.OwnerReferences) == 0 {
		return nil
	}
	return c.collect(ctx, key, m)
}

// ownerState is how one owner reference resolves.
type ownerState int

const (
	solid    ownerState = iota // exists and is not being deleted in the foreground (or cannot be judged)
	dangling                   // absent, or another object of that name
	waiting                    // being deleted in the foreground, waiting for its dependents
)

// classify reads each owner of m, the object at key.
func (c *Collector) classify(ctx context.Context, key string, m Meta) ([]ownerState, error) {
	states := make([]ownerState, len(m.OwnerReferences))
	for i, ref := range m.OwnerReferences {
		okey, ok := c.cfg.Backend.OwnerKey(ref, m.Namespace)
		if !ok {
			// An unknown kind: never collect on a guess. Nor a
			// cluster-scoped dependent of a namespaced kind, as in
			// Kubernetes, which warns about it if that owner exists.
			states[i] = solid
			if m.Namespace == "" {
				if err := c.misplaced(ctx, key, m, ref, ""); err != nil {
					return nil, err
				}
			}
			continue
		}
		at := ownerAt{okey, ref.UID}
		if _, known := c.absent.get(at); known {
			states[i] = dangling
			if err := c.misplaced(ctx, key, m, ref, okey); err != nil {
				return nil, err
			}
			continue
		}
		om, rev, found, err := c.getRev(ctx, okey)
		if err != nil {
			return nil, err
		}
		switch {
		case !found || om.UID != ref.UID:
			states[i] = dangling
			c.absent.add(at, struct{}{})
			if err := c.misplaced(ctx, key, m, ref, okey); err != nil {
				return nil, err
			}
		case om.Deleting() && om.HasFinalizer(FinalizerDeleteDependents):
			states[i] = waiting
		case !om.Deleting():
			c.notePresent(okey, om.UID, rev)
		}
	}
	return states, nil
}

// misplaced warns about the dependent m at key, as Kubernetes' collector
// does (a Warning Event, OwnerRefInvalidNamespace), when ref, which it
// did not find at okey (for a cluster-scoped dependent, "": a namespaced
// kind, which no cluster-scoped object can own), names the uid of an
// object of its kind in another namespace. Where a uid lives is looked up
// once (homes), by a scan of the kind's objects, and only for a reference
// whose owner the feed has not seen deleted: an owner simply deleted,
// the common case, costs nothing more. Each (dependent, owner) pair is
// warned about once.
func (c *Collector) misplaced(ctx context.Context, key string, m Meta, ref metav1.OwnerReference, okey string) error {
	prefix, namespaced, ok := c.cfg.Backend.OwnerKind(ref)
	if !ok || !namespaced {
		return nil // a cluster-scoped owner is in no namespace
	}
	home, known := c.homes.get(ownerAt{prefix, ref.UID})
	if !known {
		if okey != "" && c.seenDeleted(okey) {
			return nil
		}
		var err error
		if home, err = c.home(ctx, prefix, ref.UID); err != nil {
			return err
		}
		c.homes.add(ownerAt{prefix, ref.UID}, home)
	}
	if home == "" || home == m.Namespace || !c.warned.add([2]types.UID{m.UID, ref.UID}, struct{}{}) {
		return nil
	}
	msg := fmt.Sprintf("ownerRef [%s/%s, namespace: %s, name: %s, uid: %s] does not exist in namespace %q",
		ref.APIVersion, ref.Kind, m.Namespace, ref.Name, ref.UID, m.Namespace)
	if err := c.cfg.Backend.Warn(ctx, key, m, ReasonOwnerRefInvalidNamespace, msg); err != nil && ctx.Err() == nil {
		c.cfg.Log.Warn("garbage collector: recording an event", "key", key, "reason", ReasonOwnerRefInvalidNamespace, "err", err)
	}
	return nil
}

// seenDeleted reports whether the feed saw the object at key, which has
// dependents, deleted or marked deleting.
func (c *Collector) seenDeleted(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.idx.gone[key]
	return ok
}

// home returns the namespace of the object under prefix whose uid is uid,
// "" when there is none: a quorum read of every object under prefix, a
// page at a time, decoding only those whose bytes hold the uid.
func (c *Collector) home(ctx context.Context, prefix string, uid types.UID) (string, error) {
	needle := []byte(`"` + string(uid) + `"`)
	start := ""
	for {
		page, err := c.cfg.Store.List(ctx, prefix, storage.ListOptions{Limit: listPage, StartKey: start})
		if err != nil {
			return "", err
		}
		for _, kv := range page.KVs {
			if !bytes.Contains(kv.Value, needle) {
				continue
			}
			if m, err := DecodeMeta(kv.Value); err == nil && m.UID == uid {
				return m.Namespace, nil
			}
		}
		if !page.More || len(page.KVs) == 0 {
			return "", nil
		}
		start = page.KVs[len(page.KVs)-1].Key + "\x00"
	}
}

// collect deletes the dependent at key if it has no solid owner left, or
// removes its references to absent and waiting owners if it has.
func (c *Collector) collect(ctx context.Context, key string, m Meta) error {
	states, err := c.classify(ctx, key, m)
	if err != nil {
		return err
	}
	var drop []types.UID
	nSolid, nWaiting := 0, 0
	for i, s := range states {
		switch s {
		case solid:
			nSolid++
		case waiting:
			nWaiting++
			drop = append(drop, m.OwnerReferences[i].UID)
		case dangling:
			drop = append(drop, m.OwnerReferences[i].UID)
		}
	}
	switch {
	case nSolid > 0:
		if len(drop) == 0 {
			return nil
		}
		err := c.cfg.Backend.Update(ctx, key, m.UID, func(obj *unstructured.Unstructured) bool {
			return removeOwners(obj, drop)
		})
		if err == nil {
			c.count(func(s *Stats) { s.Released++ })
		}
		return err
	case nWaiting > 0 && len(c.dependentsOf(key)) > 0:
		// Its own dependents must go first: delete it in the foreground.
		return c.delete(ctx, key, m, metav1.DeletePropagationForeground)
	}
	policy := metav1.DeletePropagationBackground
	switch {
	case m.HasFinalizer(FinalizerOrphan):
		policy = metav1.DeletePropagationOrphan
	case m.HasFinalizer(FinalizerDeleteDependents):
		policy = metav1.DeletePropagationForeground
	}
	return c.delete(ctx, key, m, policy)
}

// delete deletes the object m was read from, conditionally on that read:
// its owner references may have changed since (an Orphan deletion of its
// owner removing them), and then it is judged again.
func (c *Collector) delete(ctx context.Context, key string, m Meta, policy metav1.DeletionPropagation) error {
	err := c.cfg.Backend.Delete(ctx, key, m.UID, m.Rev, policy)
	if errors.Is(err, ErrChanged) {
		return errWaiting
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	c.count(func(s *Stats) { s.Deleted++ })
	return nil
}

// orphan removes the owner's references from its dependents, then its
// orphan finalizer.
func (c *Collector) orphan(ctx context.Context, key string, m Meta) error {
	for _, d := range c.dependentsOf(key) {
		err := c.cfg.Backend.Update(ctx, d, anyUID, func(obj *unstructured.Unstructured) bool {
			return removeOwners(obj, []types.UID{m.UID})
		})
		if err != nil {
			return fmt.Errorf("orphan %s: %w", d, err)
		}
		c.count(func(s *Stats) { s.Orphaned++ })
	}
	return c.cfg.Backend.Update(ctx, key, m.UID, func(obj *unstructured.Unstructured) bool {
		return RemoveFinalizer(obj, FinalizerOrphan)
	})
}

// deleteDependents deletes the owner's dependents; once none that blocks
// its deletion remains, it removes the foregroundDeletion finalizer.
func (c *Collector) deleteDependents(ctx context.Context, key string, m Meta) error {
	blocked := false
	for _, d := range c.dependentsOf(key) {
		dm, found, err := c.get(ctx, d)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(dm.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == m.UID })
		if !found || i < 0 {
			continue // gone, or no longer its dependent
		}
		if b := dm.OwnerReferences[i].BlockOwnerDeletion; b != nil && *b {
			blocked = true
		}
		if !dm.Deleting() {
			if err := c.collect(ctx, d, dm); err != nil {
				return err
			}
		}
	}
	if blocked {
		return nil // queued again as each blocking dependent goes (deleted)
	}
	return c.cfg.Backend.Update(ctx, key, m.UID, func(obj *unstructured.Unstructured) bool {
		return RemoveFinalizer(obj, FinalizerDeleteDependents)
	})
}

// drain deletes a container's content, and finishes the container once
// it is empty.
func (c *Collector) drain(ctx context.Context, key string, m Meta) error {
	c.mu.Lock()
	wait := time.Until(c.drainAfter[key])
	if wait <= 0 {
		delete(c.drainAfter, key)
	}
	c.mu.Unlock()
	if wait > 0 {
		c.queue.addAfter(key, wait) // in its DrainDelay
		return nil
	}
	left, err := c.cfg.Backend.Drain(ctx, key)
	if err != nil {
		return fmt.Errorf("drain %s: %w", key, err)
	}
	if left > 0 {
		return errWaiting
	}
	return c.cfg.Backend.Finish(ctx, key, m.UID)
}

// removeOwners drops the owner references to uids from obj.
func removeOwners(obj *unstructured.Unstructured, uids []types.UID) bool {
	refs := obj.GetOwnerReferences()
	kept := slices.DeleteFunc(slices.Clone(refs), func(r metav1.OwnerReference) bool { return slices.Contains(uids, r.UID) })
	if len(kept) == len(refs) {
		return false
	}
	obj.SetOwnerReferences(kept)
	return true
}

// RemoveFinalizer drops f from obj's finalizers and reports whether it
// was there.
func RemoveFinalizer(obj *unstructured.Unstructured, f string) bool {
	fs := obj.GetFinalizers()
	kept := slices.DeleteFunc(slices.Clone(fs), func(s string) bool { return s == f })
	if len(kept) == len(fs) {
		return false
	}
	obj.SetFinalizers(kept)
	return true
}
