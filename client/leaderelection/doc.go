// Package leaderelection elects one leader among candidates through a
// coordination.k8s.io/v1 Lease, compatibly with client-go's
// tools/leaderelection and its LeaseLock: candidates of either library may
// share one Lease.
//
//	err := leaderelection.Run(ctx, rc, leaderelection.Config{
//		Namespace: "kube-system", Name: "my-controller",
//		ReleaseOnCancel: true,
//		Callbacks: leaderelection.Callbacks{
//			OnStartedLeading: func(ctx context.Context) { controller.Run(ctx) },
//		},
//	})
//	if errors.Is(err, leaderelection.ErrLost) { ... } // run again, or exit
//
// # How it works
//
// The Lease is client-go's leader election record: holderIdentity,
// leaseDurationSeconds, acquireTime, renewTime and leaseTransitions mean
// what they mean there. strategy and preferredHolder are kept as found but
// not acted on (coordinated leader election is not supported).
//
// A candidate reads the lease every RetryPeriod plus up to 120% jitter. It
// takes it if it is missing, has no holder, or has not changed for its
// leaseDurationSeconds as measured by the candidate's own clock from when
// it first read the lease as it is (renewTime is a remote clock's reading
// and only its change counts). The leader renews every RetryPeriod,
// first with the lease as it last wrote it and, if that fails, by reading
// it again. Every write is conditional on the resourceVersion read, so of
// two candidates that judge a lease expired at once only one takes it.
//
// # Guarantees
//
// There is never more than one leader — no two OnStartedLeading contexts
// live at once, whichever library each candidate uses — provided that:
//
//   - only candidates write the lease, each with a unique Identity (a
//     candidate finding its own identity in the lease takes it at once);
//   - the server's writes are linearizable and conditional on
//     resourceVersion (objwatch and kube-apiserver on etcd are);
//   - clocks advance at about the same rate: a leader stops at
//     RenewDeadline after it sent its last successful renewal, while the
//     others wait LeaseDuration after they saw that renewal, which was
//     later. Wall clocks need not agree at all; the margin
//     LeaseDuration-RenewDeadline absorbs rate skew (LeaseDuration/
//     RenewDeadline is the tolerated ratio of clock rates) and the time
//     OnStartedLeading takes to stop once its context is done;
//   - the process is not paused (stopped, swapped out) past that margin.
//     Like client-go, this is not fencing: work that must not overlap
//     should itself be conditional, as the server's own GC election does.
//
// A client-go leader may keep leading up to RetryPeriod plus RenewDeadline
// after its last renewal (its deadline runs from the start of a retry
// round, not from the renewal): when client-go candidates take part,
// choose LeaseDuration greater than RenewDeadline plus RetryPeriod, as the
// defaults (15s, 10s, 2s) are. leaseDurationSeconds is LeaseDuration
// rounded up to whole seconds, so the others never wait less than
// configured.
//
// client-go's candidates tell whether a lease changed by comparing its
// record as JSON, where renewTime has whole seconds: renewals within one
// second look alike to them, and their wait runs from the first. So an
// Elector runs its RenewDeadline from the first renewal that differs in
// whole seconds (TestInterop/cut shows two leaders otherwise). With a
// RetryPeriod under a second this shortens the deadline by up to a
// second: choose RenewDeadline above RetryPeriod plus 1s, or leadership
// may end although renewals succeed.
//
// # Concurrency
//
// An Elector runs in the goroutine that calls Run, which owns two more:
// OnStartedLeading's, while leading, and OnNewLeader's, if set. Run
// returns only after both ended. IsLeader, Leader and Identity are safe to
// call from any goroutine. Config is plain data.
//
// # Differences from client-go
//
//   - Run returns why it ended (ErrLost, or nil when ctx ended) and waits
//     for OnStartedLeading to return; while it has not, Run keeps renewing
//     the lease, even after ctx ended, since it may still act as leader.
//     If OnStartedLeading returns on its own, leadership ends.
//   - With ReleaseOnCancel the lease is released only after
//     OnStartedLeading returned, never while it may still act.
//   - OnStoppedLeading is called only if this candidate led; OnNewLeader
//     is called from one goroutine, never with "".
//   - Metrics go to Config.Metrics, not a process-wide provider; the
//     names and labels are client-go's.
package leaderelection
