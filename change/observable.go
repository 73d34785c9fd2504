package change

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
)

// ErrCompacted: the revision asked for is older than the history kept
// (like the server's 410 Gone). Read the current value and revision with
// Get and watch again from there.
var ErrCompacted = errors.New("revision compacted")

// ErrFutureRevision: the revision asked for has not been written yet.
var ErrFutureRevision = errors.New("revision not yet written")

// Observable holds a value of any type and lets any number of watchers
// follow its changes, with the semantics of a watch on the server: every
// Set gets the next revision (1, 2, ...); Watch replays the changes after
// a given revision from a bounded history, then follows new ones, in
// order, none lost or repeated; a revision older than the history is
// ErrCompacted. Each change carries its field-level diff.
//
// The zero value is ready to use and holds the zero T at revision 0.
//
// # Values are shared
//
// The values passed to Set are handed to every watcher as they are: never
// modify a value after Set, and never modify a value read with Get or from
// an event (build a new one, e.g. with Update). Diffs compare the values'
// JSON form, like Between, except for types JSON would lose fields of: a
// struct with unexported fields, such as type user struct{ name string;
// age int }, is diffed field by field, unexported fields included, by
// their Go names (mutexes, atomics, functions and channels left out), so
// Diff.Paths() of a birthday is ["age"]. The Diff's Old and New are then
// the plain views (maps), the Event's Old and New the values themselves.
//
// # Subscriptions
//
// OnChange calls a function for each change at or below a path; Watch
// follows every change from a revision.
//
// # Concurrency
//
// An Observable is safe for concurrent use and starts no goroutines. Set
// never waits for watchers: a watcher that falls more than History
// changes behind gets ErrCompacted, like a slow watch on the server.
// OnChange's functions run one at a time, in revision order, on the
// goroutine of a Set (see OnChange).
type Observable[T any] struct {
	// History is how many changes are kept for watchers to replay and
	// catch up from (default 1000). Set it before first use.
	History int
	// Differ computes the events' diffs. Set it before first use.
	Differ Differ

	mu    sync.Mutex
	value T
	rev   int64
	ring  []Event[T]    // the last kept changes; revision r at ring[(r-1)%len(ring)]
	kept  int           // number of changes in ring
	wake  chan struct{} // closed at the next Set; nil until someone waits

	subs       []*subscription[T] // OnChange's, copied on write
	pending    []delivery[T]      // changes whose subscribers are still to be called
	delivering bool               // a goroutine is calling subscribers
}

// Event is one change of an Observable.
type Event[T any] struct {
	Revision int64
	Old, New T
	// Diff is from Old to New, computed when first asked for and shared by
	// all watchers.
	Diff *Diff
}

// Get returns the current value and its revision, which Watch takes to
// follow changes from there without a gap.
func (o *Observable[T]) Get() (T, int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.value, o.rev
}

// Set makes v the current value and returns its revision. Every Set is a
// change with a new revision, even if v equals the previous value (its
// Diff is then empty).
func (o *Observable[T]) Set(v T) int64 {
	o.mu.Lock()
	rev := o.set_locked(v)
	o.mu.Unlock()
	o.deliver()
	return rev
}

// Update sets the value to f(current) atomically and returns the new
// revision. f runs with the Observable locked: it must be quick, must not
// call the Observable's methods, and must not modify its argument.
func (o *Observable[T]) Update(f func(current T) T) int64 {
	rev := o.update(f)
	o.deliver()
	return rev
}

// update is Update but for the subscribers; the deferred unlock keeps a
// panicking f from leaving the Observable locked.
func (o *Observable[T]) update(f func(current T) T) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.set_locked(f(o.value))
}

func (o *Observable[T]) set_locked(v T) int64 {
	if o.ring == nil {
		n := o.History
		if n <= 0 {
			n = 1000
		}
		o.ring = make([]Event[T], n)
	}
	old := o.value
	o.value = v
	o.rev++
	ev := Event[T]{Revision: o.rev, Old: old, New: v, Diff: o.diff(old, v)}
	o.ring[(o.rev-1)%int64(len(o.ring))] = ev
	if len(o.subs) > 0 {
		o.pending = append(o.pending, delivery[T]{ev: ev, subs: o.subs})
	}
	o.kept = min(o.kept+1, len(o.ring))
	if o.wake != nil {
		close(o.wake)
		o.wake = nil
	}
	return o.rev
}

// Watch returns the changes after revision from, in order: first those in
// the history, then new ones as they happen, until ctx ends or the loop
// stops. Watch from 0 for every change since the start, from the revision
// Get returned for the changes after that value.
//
// The sequence ends with an error: ctx.Err() when ctx ends, ErrCompacted
// if from is older than the history or the watcher fell more than History
// changes behind, ErrFutureRevision if from is after the current revision.
//
//	v, rev := o.Get()
//	for ev, err := range o.Watch(ctx, rev) {
//		if err != nil { ... }
//		for _, c := range ev.Diff.Changes() { ... }
//	}
//
// The sequence may be iterated once; it runs on the caller's goroutine.
func (o *Observable[T]) Watch(ctx context.Context, from int64) iter.Seq2[Event[T], error] {
	return func(yield func(Event[T], error) bool) {
		var zero Event[T]
		o.mu.Lock()
		cur := o.rev
		o.mu.Unlock()
		switch {
		case from > cur:
			yield(zero, fmt.Errorf("watch from %d (current %d): %w", from, cur, ErrFutureRevision))
			return
		case from < 0:
			yield(zero, fmt.Errorf("watch from %d: %w", from, ErrCompacted))
			return
		}
		next := from + 1
		for {
			ev, wake, err := o.next(next)
			if err != nil {
				yield(zero, err)
				return
			}
			if wake != nil {
				select {
				case <-wake:
					continue
				case <-ctx.Done():
					yield(zero, ctx.Err())
					return
				}
			}
			if !yield(ev, nil) {
				return
			}
			next++
		}
	}
}

// next returns the change with revision rev, or a channel closed when it
// may be there.
func (o *Observable[T]) next(rev int64) (Event[T], <-chan struct{}, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if rev > o.rev {
		if o.wake == nil {
			o.wake = make(chan struct{})
		}
		return Event[T]{}, o.wake, nil
	}
	if oldest := o.rev - int64(o.kept) + 1; rev < oldest {
		return Event[T]{}, nil, fmt.Errorf("watch at %d (oldest kept %d): %w", rev-1, oldest-1, ErrCompacted)
	}
	return o.ring[(rev-1)%int64(len(o.ring))], nil, nil
}
