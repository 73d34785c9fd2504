package controller

import (
	"context"
	"errors"
	"time"
)

// Request names the object to reconcile: its namespace ("" for
// cluster-scoped objects) and name.
type Request struct {
	Namespace, Name string
}

// String returns "namespace/name", or "name" for cluster-scoped objects.
func (r Request) String() string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "/" + r.Name
}

// Result tells the controller what to do after a reconcile that
// succeeded.
type Result struct {
	// RequeueAfter, if positive, reconciles the key again after this long
	// (sooner if an event comes for it meanwhile).
	RequeueAfter time.Duration
}

// Reconciler makes the world match one object's desired state. It is
// called for a key at most once at a time (workers reconcile different
// keys concurrently, see Options.MaxConcurrentReconciles), must be
// idempotent, and should read the current state rather than rely on why
// it was called: events for a key that arrive while it is queued or being
// reconciled are merged into one more call.
//
// An error is retried with the key's exponential backoff, unless it wraps
// ErrTerminal (see TerminalError). A panic is recovered and treated as an
// error. ctx ends when Options.ReconcileTimeout passes, or when the
// controller's shutdown grace period is over.
type Reconciler[K comparable] interface {
	Reconcile(ctx context.Context, key K) (Result, error)
}

// Func adapts a function to a Reconciler.
type Func[K comparable] func(ctx context.Context, key K) (Result, error)

// Reconcile calls f.
func (f Func[K]) Reconcile(ctx context.Context, key K) (Result, error) { return f(ctx, key) }

// ErrTerminal marks reconcile errors that retrying will not fix; test
// with errors.Is.
var ErrTerminal = errors.New("terminal error")

// TerminalError wraps err so that the controller does not retry it: it is
// counted (controller_runtime_terminal_reconcile_errors_total) and logged,
// and the key is reconciled again only when an event comes for it.
func TerminalError(err error) error {
	if err == nil {
		err = errors.New("nil error")
	}
	return terminalError{err}
}

type terminalError struct{ err error }

func (e terminalError) Error() string        { return "terminal error: " + e.err.Error() }
func (e terminalError) Unwrap() error        { return e.err }
func (e terminalError) Is(target error) bool { return target == ErrTerminal }
