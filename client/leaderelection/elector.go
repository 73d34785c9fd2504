package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
)

// Leases is the resource an Elector uses.
var Leases = client.Resource{GVR: coordinationv1.SchemeGroupVersion.WithResource("leases"), Namespaced: true, Kind: "Lease"}

// jitterFactor is client-go's: a candidate waits RetryPeriod plus up to
// 120% of it between attempts to acquire.
const jitterFactor = 1.2

// Elector is one candidate in the election of one Lease. Run takes part;
// IsLeader and Leader may be called from any goroutine at any time.
type Elector struct {
	cfg     Config
	leases  *client.Client[*coordinationv1.Lease]
	metrics metrics

	running atomic.Bool
	leading atomic.Bool
	leader  atomic.Pointer[string]
	kick    chan struct{} // cap 1: the leader changed, for the OnNewLeader goroutine

	// Used by Run's goroutine only (Run is exclusive).
	observed   coordinationv1.LeaseSpec // the lease's spec last read or written
	observedAt time.Time                // when this candidate first saw observed
	lease      *coordinationv1.Lease    // as last written while leading: the renewal fast path
	// visibleAt is when this candidate sent the first write of the lease
	// as client-go's candidates see it (see clientGoRecord): its renewals
	// less than a second apart look alike to them, so its RenewDeadline
	// runs from there.
	visibleAt time.Time
}

// New returns an Elector for cfg that talks to the server through rc.
// Errors wrap ErrInvalidConfig, or are the metrics registry's.
func New(rc *client.REST, cfg Config) (*Elector, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Metrics, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("leader election metrics: %w", err)
	}
	return &Elector{
		cfg:     cfg,
		leases:  client.NewClient[*coordinationv1.Lease](rc, Leases),
		metrics: m,
		kick:    make(chan struct{}, 1),
	}, nil
}

// Run is New followed by Elector.Run.
func Run(ctx context.Context, rc *client.REST, cfg Config) error {
	e, err := New(rc, cfg)
	if err != nil {
		return err
	}
	return e.Run(ctx)
}

// Identity is this candidate's holderIdentity (Config.Identity or its
// default).
func (e *Elector) Identity() string { return e.cfg.Identity }

// IsLeader reports whether this candidate leads: from just before
// OnStartedLeading is called until Run sees leadership end.
func (e *Elector) IsLeader() bool { return e.leading.Load() }

// Leader is the holder of the lease as last observed ("" if none or not
// yet known). It may be stale by up to RetryPeriod and more; only
// IsLeader, and OnStartedLeading's context, speak for this candidate.
func (e *Elector) Leader() string {
	if p := e.leader.Load(); p != nil {
		return *p
	}
	return ""
}

// Run takes part in the election until ctx ends or this candidate stops
// leading. It tries to acquire the lease every RetryPeriod (jittered);
// once it holds it, it calls OnStartedLeading on a new goroutine and
// renews the lease every RetryPeriod until that goroutine returns. It then
// releases the lease if ReleaseOnCancel, calls OnStoppedLeading, and
// returns.
//
// Run returns nil when ctx ended (before or while leading) or
// OnStartedLeading returned on its own; an error wrapping ErrLost when
// leadership was lost; an error from releasing the lease; or ErrRunning
// if this Elector is already running. An Elector may be Run again after
// Run returned, but not twice at once.
func (e *Elector) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer e.running.Store(false)
	if e.cfg.Callbacks.OnNewLeader != nil {
		stop, done := make(chan struct{}), make(chan struct{})
		go func() { defer close(done); e.notify(stop) }()
		defer func() { close(stop); <-done }()
	}
	ok := e.acquire(ctx)
	if !ok {
		return nil
	}
	if ctx.Err() != nil {
		// Taken as ctx ended: do not start leading, but do not make the
		// others wait for the lease to expire either.
		return e.released(ctx)
	}
	return e.lead(ctx)
}

// acquire tries to take the lease until it does or ctx ends.
func (e *Elector) acquire(ctx context.Context) bool {
	for {
		rctx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
		held, err := e.try(rctx, false)
		cancel()
		// A lease retaken as it was (by this identity, within the second)
		// may be about to expire for client-go's candidates: try again.
		if held && e.cfg.Clock.Now().Add(e.cfg.RetryPeriod).Before(e.visibleAt.Add(e.cfg.RenewDeadline)) {
			return true
		}
		if err != nil && ctx.Err() == nil {
			e.cfg.Log.Warn("leader election: acquire", "lease", e.describe(), "err", err)
		}
		wait := e.cfg.RetryPeriod + time.Duration(rand.Float64()*jitterFactor*float64(e.cfg.RetryPeriod))
		select {
		case <-ctx.Done():
			return false
		case <-e.cfg.Clock.After(wait):
		}
	}
}

// lead runs OnStartedLeading and renews the lease until leadership ends.
// visibleAt is when the last write that the others can tell from the one
// before was sent: none of them saw it earlier, so none takes over before
// visibleAt plus LeaseDuration by their clocks, while this candidate stops
// at visibleAt plus RenewDeadline by its own.
func (e *Elector) lead(ctx context.Context) error {
	leadCtx, cancelLead := context.WithCancel(ctx)
	defer cancelLead()
	e.leading.Store(true)
	e.metrics.leading(true)
	e.cfg.Log.Info("leader election: started leading", "lease", e.describe(), "identity", e.cfg.Identity)
	done := make(chan struct{})
	go func() { defer close(done); e.cfg.Callbacks.OnStartedLeading(leadCtx) }()

	// Renewals go on after ctx ended, until OnStartedLeading has returned:
	// until then it may still act as leader.
	base := context.WithoutCancel(ctx)
	clock := e.cfg.Clock
	ctxDone := ctx.Done()
	next := clock.Now().Add(e.cfg.RetryPeriod)
	var lost, lastErr error
loop:
	for {
		deadline := e.visibleAt.Add(e.cfg.RenewDeadline)
		wake := next
		if deadline.Before(wake) {
			wake = deadline
		}
		select {
		case <-done:
			break loop
		case <-ctxDone:
			ctxDone = nil
			e.stopLeading()
			continue
		case <-clock.After(max(0, wake.Sub(clock.Now()))):
		}
		now := clock.Now()
		if !now.Before(deadline) {
			lost = fmt.Errorf("%w: lease %s not renewed within %v", ErrLost, e.describe(), e.cfg.RenewDeadline)
			if lastErr != nil {
				lost = fmt.Errorf("%w: %w", lost, lastErr)
			}
			break loop
		}
		rctx, cancel := context.WithTimeout(base, deadline.Sub(now))
		held, err := e.try(rctx, true)
		cancel()
		next = clock.Now().Add(e.cfg.RetryPeriod)
		switch {
		case held:
			lastErr = nil
		case err == nil:
			lost = fmt.Errorf("%w: lease %s taken by %q", ErrLost, e.describe(), e.Leader())
			break loop
		default:
			lastErr = err
			e.cfg.Log.Warn("leader election: renew", "lease", e.describe(), "err", err)
		}
	}
	e.stopLeading()
	cancelLead()
	<-done
	e.lease = nil
	if ctxDone == nil {
		lost = nil // ctx ended first: that is why leadership ended
	}
	if lost != nil {
		e.cfg.Log.Warn("leader election: stopped leading", "lease", e.describe(), "err", lost)
	}
	err := e.released(ctx)
	if f := e.cfg.Callbacks.OnStoppedLeading; f != nil {
		f()
	}
	if lost != nil {
		return lost
	}
	return err
}

func (e *Elector) stopLeading() {
	if e.leading.Swap(false) {
		e.metrics.leading(false)
	}
}

// try reads the lease and renews it if this candidate holds it, or takes
// it if it is free or expired. held reports whether this candidate holds
// it now. While
// leading, a lease found held by anyone else (even by no one: someone
// else wrote it) is lost: held false and no error. Errors are failed
// requests, after which the state of the lease is unknown.
func (e *Elector) try(ctx context.Context, leading bool) (held bool, err error) {
	clock := e.cfg.Clock
	if leading && e.lease != nil {
		// Fast path: the lease is most likely as this candidate last
		// wrote it.
		l := e.lease.DeepCopy()
		start := clock.Now()
		e.renewSpec(&l.Spec, start)
		got, err := e.leases.Update(ctx, l, metav1.UpdateOptions{})
		if err == nil {
			e.wrote(got, start, &e.lease.Spec)
			return true, nil
		}
		if ctx.Err() != nil {
			return false, fmt.Errorf("renew lease: %w", err)
		}
	}
	cur, err := e.leases.Get(ctx, e.cfg.Namespace, e.cfg.Name, metav1.GetOptions{})
	if errors.Is(err, client.ErrNotFound) {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.cfg.Name}}
		start := clock.Now()
		e.takeSpec(&l.Spec, start, false)
		got, err := e.leases.Create(ctx, l, metav1.CreateOptions{})
		if errors.Is(err, client.ErrAlreadyExists) {
			return false, nil // another candidate created it first
		}
		if err != nil {
			return false, fmt.Errorf("create lease: %w", err)
		}
		e.wrote(got, start, nil)
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("get lease: %w", err)
	}
	// Now, after the answer: the change observed was committed before.
	now := clock.Now()
	e.observe(cur, now)
	holder := deref(cur.Spec.HolderIdentity)
	l := cur.DeepCopy()
	if holder == e.cfg.Identity {
		e.metrics.slowpathTaken()
		e.renewSpec(&l.Spec, now)
	} else {
		if leading {
			return false, nil
		}
		if holder != "" && now.Before(e.observedAt.Add(e.duration(&cur.Spec))) {
			return false, nil // held, and renewed within its duration as far as this clock knows
		}
		e.takeSpec(&l.Spec, now, true)
	}
	got, err := e.leases.Update(ctx, l, metav1.UpdateOptions{})
	if errors.Is(err, client.ErrConflict) && holder != e.cfg.Identity {
		return false, nil // another candidate wrote first
	}
	if err != nil {
		return false, fmt.Errorf("update lease: %w", err)
	}
	e.wrote(got, now, &cur.Spec)
	return true, nil
}

// observe notes the lease as read at now; its expiry counts from when its
// spec was first seen as it is.
func (e *Elector) observe(l *coordinationv1.Lease, now time.Time) {
	if e.observedAt.IsZero() || !equality.Semantic.DeepEqual(l.Spec, e.observed) {
		e.observed, e.observedAt = *l.Spec.DeepCopy(), now
	}
	e.setLeader(deref(l.Spec.HolderIdentity))
}

// wrote notes the lease as this candidate wrote it, at start, over prev
// (nil if it created it).
func (e *Elector) wrote(l *coordinationv1.Lease, start time.Time, prev *coordinationv1.LeaseSpec) {
	if prev == nil || recordOf(prev) != recordOf(&l.Spec) {
		e.visibleAt = start
	}
	e.lease = l
	e.observed, e.observedAt = *l.Spec.DeepCopy(), start
	e.setLeader(e.cfg.Identity)
}

// clientGoRecord is a lease as client-go's candidates compare it with
// the one they saw before, to tell whether it was renewed: its leader
// election record as JSON, where times have whole seconds.
type clientGoRecord struct {
	holder, strategy, preferred string
	duration, transitions       int32
	acquire, renew              int64
}

func recordOf(s *coordinationv1.LeaseSpec) clientGoRecord {
	r := clientGoRecord{holder: deref(s.HolderIdentity), preferred: deref(s.PreferredHolder)}
	if s.Strategy != nil {
		r.strategy = string(*s.Strategy)
	}
	if s.LeaseDurationSeconds != nil {
		r.duration = *s.LeaseDurationSeconds
	}
	if s.LeaseTransitions != nil {
		r.transitions = *s.LeaseTransitions
	}
	if s.AcquireTime != nil && !s.AcquireTime.IsZero() {
		r.acquire = s.AcquireTime.Unix()
	}
	if s.RenewTime != nil && !s.RenewTime.IsZero() {
		r.renew = s.RenewTime.Unix()
	}
	return r
}

// duration is how long the lease s lasts after it was last seen to change:
// its own leaseDurationSeconds, as client-go judges it, or this
// candidate's LeaseDuration if it has none.
func (e *Elector) duration(s *coordinationv1.LeaseSpec) time.Duration {
	if s.LeaseDurationSeconds != nil && *s.LeaseDurationSeconds > 0 {
		return time.Duration(*s.LeaseDurationSeconds) * time.Second
	}
	return e.cfg.LeaseDuration
}

// renewSpec makes s this candidate's renewal at now. Fields an Elector
// does not manage (strategy, preferredHolder) are kept.
func (e *Elector) renewSpec(s *coordinationv1.LeaseSpec, now time.Time) {
	id, secs, t := e.cfg.Identity, e.cfg.leaseSeconds(), metav1.NewMicroTime(now)
	s.HolderIdentity, s.LeaseDurationSeconds, s.RenewTime = &id, &secs, &t
	if s.AcquireTime == nil {
		s.AcquireTime = &t
	}
	if s.LeaseTransitions == nil {
		var zero int32
		s.LeaseTransitions = &zero
	}
}

// takeSpec makes s this candidate's acquisition at now. As in client-go,
// leaseTransitions counts every acquisition of an existing lease, also
// after a release.
func (e *Elector) takeSpec(s *coordinationv1.LeaseSpec, now time.Time, existing bool) {
	var n int32
	if existing {
		if s.LeaseTransitions != nil {
			n = *s.LeaseTransitions
		}
		n++
	}
	s.AcquireTime = nil
	s.LeaseTransitions = &n
	e.renewSpec(s, now)
}

// released releases the lease if ReleaseOnCancel, within RenewDeadline
// even if ctx ended.
func (e *Elector) released(ctx context.Context) error {
	if !e.cfg.ReleaseOnCancel {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.RenewDeadline)
	defer cancel()
	if err := e.release(rctx); err != nil {
		return fmt.Errorf("release lease %s: %w", e.describe(), err)
	}
	return nil
}

// release gives the lease up if this candidate still holds it, as
// client-go does: no holder, a duration of 1 s, transitions kept.
func (e *Elector) release(ctx context.Context) error {
	for {
		cur, err := e.leases.Get(ctx, e.cfg.Namespace, e.cfg.Name, metav1.GetOptions{})
		if errors.Is(err, client.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if deref(cur.Spec.HolderIdentity) != e.cfg.Identity {
			return nil
		}
		now := e.cfg.Clock.Now()
		l := cur.DeepCopy()
		empty, one, t := "", int32(1), metav1.NewMicroTime(now)
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.AcquireTime, l.Spec.RenewTime = &empty, &one, &t, &t
		got, err := e.leases.Update(ctx, l, metav1.UpdateOptions{})
		if errors.Is(err, client.ErrConflict) {
			continue // a renewal in flight when leadership ended landed
		}
		if err != nil {
			return err
		}
		e.observe(got, now)
		return nil
	}
}

// setLeader records the holder observed and wakes the OnNewLeader
// goroutine if it changed.
func (e *Elector) setLeader(id string) {
	if prev := e.leader.Swap(&id); id != "" && (prev == nil || *prev != id) {
		select {
		case e.kick <- struct{}{}:
		default:
		}
	}
}

// notify calls OnNewLeader for each new leader until stop is closed.
func (e *Elector) notify(stop <-chan struct{}) {
	reported := ""
	for {
		select {
		case <-stop:
			return
		case <-e.kick:
		}
		if id := e.Leader(); id != "" && id != reported {
			reported = id
			e.cfg.Callbacks.OnNewLeader(id)
		}
	}
}

func (e *Elector) describe() string { return e.cfg.Namespace + "/" + e.cfg.Name }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
