package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// elector runs a task on one server at a time among those sharing an etcd,
// the way kube-controller-manager's leader election does: the holder of a
// coordination.k8s.io Lease in kube-system runs it and renews the lease
// every retry period; the others watch the lease, and take it over once
// its record has not changed for its duration as measured by their own
// clock (so clocks need not agree). A holder that cannot renew within
// renewDeadline stops the task before its lease can expire, and one that
// shuts down releases the lease so that another takes over at once. The
// lease is an ordinary object: kubectl get lease -n kube-system shows the
// holder.
//
// Every write is conditional on the lease's revision. The task must still
// tolerate a short overlap (a holder that is slow to notice it lost the
// lease); the garbage collector does, as every action it takes is
// conditional.
//
// run blocks until ctx ends and the task has returned. An elector is used
// by one goroutine.
type elector struct {
	store                          storage.Interface
	registry                       *registry.Registry
	log                            *slog.Logger
	name                           string // the Lease's name in kube-system
	identity                       string
	duration, renewDeadline, retry time.Duration

	// observed is the lease record last read, and when the read that
	// found it changed returned.
	observedRev int64
	observedAt  time.Time
}

const leaseNamespace = "kube-system"

func newElector(cfg Config, name string, duration time.Duration) *elector {
	host, _ := os.Hostname()
	return &elector{
		store: cfg.Storage, registry: cfg.Registry, log: cfg.Log, name: name, identity: host + "_" + string(uuid.NewUUID()),
		duration: duration, renewDeadline: duration * 2 / 3, retry: max(duration/7, 10*time.Millisecond),
	}
}

// run runs task while this server holds the lease.
func (e *elector) run(ctx context.Context, task func(context.Context)) {
	var (
		stop      context.CancelFunc
		done      chan struct{}
		lastRenew time.Time
		// watchdog cancels the task at its renew deadline, even while
		// this loop is not running (a process resumed after SIGSTOP runs
		// its expired timers before the loop's next attempt).
		watchdog *time.Timer
	)
	end := func() {
		if watchdog != nil {
			watchdog.Stop()
		}
		if stop != nil {
			stop()
			<-done
			stop, done = nil, nil
		}
	}
	t := time.NewTicker(e.retry)
	defer t.Stop()
	for {
		// A holder's attempt must not outlast its renew deadline: an
		// etcd call that hangs (etcd unreachable, a member paused) would
		// otherwise keep the task running past the lease, beside the
		// server that took it over. A renewal counts from when its
		// attempt started, which is before the record changed in etcd
		// and so before any other server saw it change.
		start := time.Now()
		deadline := start.Add(e.renewDeadline)
		if stop != nil {
			deadline = lastRenew.Add(e.renewDeadline)
		}
		actx, cancel := context.WithDeadline(ctx, deadline)
		ok, err := e.tryAcquireOrRenew(actx)
		cancel()
		now := time.Now()
		switch {
		case ok && now.Before(deadline):
			lastRenew = start
			if stop != nil {
				select {
				case <-done: // the watchdog ended it: start it again
					stop, done = nil, nil
				default:
				}
			}
			if stop == nil {
				var tctx context.Context
				tctx, stop = context.WithCancel(ctx)
				done = make(chan struct{})
				go func() { defer close(done); task(tctx) }()
			}
			if watchdog != nil {
				watchdog.Stop()
			}
			watchdog = time.AfterFunc(time.Until(lastRenew.Add(e.renewDeadline)), stop)
		case stop != nil && (err == nil || !now.Before(lastRenew.Add(e.renewDeadline))):
			// Lost the lease, or could not renew it in time.
			end()
		}
		if err != nil && ctx.Err() == nil {
			e.log.Debug("lease: renew", "lease", e.name, "err", err)
		}
		select {
		case <-ctx.Done():
			held := stop != nil
			end()
			if held {
				e.release()
			}
			return
		case <-t.C:
		}
	}
}

func (e *elector) leaseResource() *registry.Resource {
	res, _ := e.registry.Get(schema.GroupVersionResource{Group: registry.CoordinationGroup, Version: "v1", Resource: "leases"})
	return res
}

// tryAcquireOrRenew reads the lease and, if this server holds it, renews
// it, or if it is free or expired, takes it. ok reports whether this
// server holds it now.
func (e *elector) tryAcquireOrRenew(ctx context.Context) (ok bool, err error) {
	res := e.leaseResource()
	key := res.Key(leaseNamespace, e.name)
	now := time.Now()
	kv, err := e.store.Get(ctx, key)
	// A record read now may have been written at any time since the read
	// began (a read that waits out an etcd election returns writes made
	// meanwhile), so its lease counts from when the read returned; a
	// renewal of this server counts from before it (now), the earlier.
	read := time.Now()
	if errors.Is(err, storage.ErrNotFound) {
		lease := e.record(nil, now)
		b, err := leaseBytes(lease)
		if err != nil {
			return false, err
		}
		if _, err := e.store.Create(ctx, key, b); err != nil {
			return false, err
		}
		return true, nil
	}
	if err != nil {
		return false, err
	}
	var cur coordinationv1.Lease
	obj, err := objects.FromStorage(res, kv)
	if err == nil {
		err = runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &cur)
	}
	if err != nil {
		return false, fmt.Errorf("lease %s: %w", e.name, err)
	}
	if kv.ModRevision != e.observedRev {
		e.observedRev, e.observedAt = kv.ModRevision, read
	}
	holder := ""
	if cur.Spec.HolderIdentity != nil {
		holder = *cur.Spec.HolderIdentity
	}
	duration := e.duration
	if d := cur.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		duration = time.Duration(*d) * time.Second
	}
	if holder != e.identity && holder != "" && read.Sub(e.observedAt) < duration {
		return false, nil // held by another, and alive
	}
	b, err := leaseBytes(e.record(&cur, now))
	if err != nil {
		return false, err
	}
	nkv, err := e.store.Update(ctx, key, b, kv.ModRevision)
	if err != nil {
		if errors.Is(err, storage.ErrConflict) {
			return false, nil // another server wrote first
		}
		return false, err
	}
	e.observedRev, e.observedAt = nkv.ModRevision, now
	return true, nil
}

// record is the lease as this server holds it at now, renewing cur (nil
// for a new lease).
func (e *elector) record(cur *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	seconds := int32(max(1, e.duration.Round(time.Second)/time.Second))
	mnow := metav1.NewMicroTime(now)
	l := &coordinationv1.Lease{}
	if cur != nil {
		l = cur.DeepCopy()
	} else {
		l.Name, l.Namespace = e.name, leaseNamespace
		l.UID = uuid.NewUUID()
		l.CreationTimestamp = metav1.NewTime(now.UTC().Truncate(time.Second))
		var zero int32
		l.Spec.LeaseTransitions = &zero
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != e.identity {
		if cur != nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			n := int32(0)
			if l.Spec.LeaseTransitions != nil {
				n = *l.Spec.LeaseTransitions
			}
			n++
			l.Spec.LeaseTransitions = &n
		}
		id := e.identity
		l.Spec.HolderIdentity = &id
		l.Spec.AcquireTime = &mnow
	}
	l.Spec.RenewTime = &mnow
	l.Spec.LeaseDurationSeconds = &seconds
	return l
}

// release gives the lease up on shutdown, so that another server takes it
// over without waiting for it to expire.
func (e *elector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res := e.leaseResource()
	key := res.Key(leaseNamespace, e.name)
	kv, err := e.store.Get(ctx, key)
	if err != nil {
		return
	}
	obj, err := objects.FromStorage(res, kv)
	if err != nil {
		return
	}
	var cur coordinationv1.Lease
	if runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &cur) != nil || cur.Spec.HolderIdentity == nil || *cur.Spec.HolderIdentity != e.identity {
		return
	}
	empty := ""
	cur.Spec.HolderIdentity = &empty
	b, err := leaseBytes(&cur)
	if err == nil {
		_, _ = e.store.Update(ctx, key, b, kv.ModRevision)
	}
}

// leaseBytes is the stored form of a lease.
func leaseBytes(l *coordinationv1.Lease) ([]byte, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(l)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion("coordination.k8s.io/v1")
	u.SetKind("Lease")
	u.SetResourceVersion("")
	if md, ok := u.Object["metadata"].(map[string]any); ok && md["creationTimestamp"] == nil {
		delete(md, "creationTimestamp")
	}
	return objects.ToStorage(u)
}
