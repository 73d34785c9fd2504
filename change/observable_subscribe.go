package change

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
)

// subscription is one OnChange.
type subscription[T any] struct {
	filter  *Filter // nil: every change
	fn      func(Event[T])
	stopped atomic.Bool
}

// delivery is a change and the subscriptions there were when it was made.
type delivery[T any] struct {
	ev   Event[T]
	subs []*subscription[T]
}

// OnChange calls fn with every change whose diff changes the value at or
// below path (a Pattern: "age", "spec.replicas", "items[*].name"; "" for
// any change), from the next Set on, until the returned stop is called.
// A change above path (a whole struct replaced) calls fn only if it
// changes what is at path. Fields the Observable's Differ excludes never
// call fn.
//
// fn runs on the goroutine of a Set or Update, after the Observable is
// unlocked, one call at a time for all subscriptions, in revision order.
// Set returns after the calls its change made, unless another goroutine
// was already calling subscribers (that one then makes them) or Set was
// called from fn itself (its calls follow when fn returns). So fn may
// call any of the Observable's methods, Set included; it should be quick,
// as it holds up the Sets behind it.
//
// stop may be called any number of times, from anywhere, fn included;
// once it returns fn is not called again (a call already under way on
// another goroutine finishes).
func (o *Observable[T]) OnChange(path string, fn func(Event[T])) (stop func(), err error) {
	if fn == nil {
		return nil, errors.New("observable: OnChange without a function")
	}
	s := &subscription[T]{fn: fn}
	if path != "" {
		if s.filter, err = NewFilter(path); err != nil {
			return nil, fmt.Errorf("observable: OnChange: %w", err)
		}
	}
	o.mu.Lock()
	o.subs = append(slices.Clip(o.subs), s)
	o.mu.Unlock()
	return func() { o.unsubscribe(s) }, nil
}

// unsubscribe marks s stopped (deliveries already pending skip it) and
// removes it from the subscriptions of future changes.
func (o *Observable[T]) unsubscribe(s *subscription[T]) {
	s.stopped.Store(true)
	o.mu.Lock()
	defer o.mu.Unlock()
	if i := slices.Index(o.subs, s); i >= 0 {
		o.subs = slices.Delete(slices.Clone(o.subs), i, i+1)
	}
}

// deliver calls the subscribers of the pending changes, unless another
// goroutine (or an outer call on this one) is doing so.
func (o *Observable[T]) deliver() {
	o.mu.Lock()
	if o.delivering || len(o.pending) == 0 {
		o.mu.Unlock()
		return
	}
	o.delivering = true
	defer func() {
		o.mu.Lock()
		o.delivering = false
		o.mu.Unlock()
	}()
	for len(o.pending) > 0 {
		batch := o.pending
		o.pending = nil
		o.mu.Unlock()
		for _, d := range batch {
			for _, s := range d.subs {
				if !s.stopped.Load() && s.filter.Match(d.ev.Diff) {
					s.fn(d.ev)
				}
			}
		}
		o.mu.Lock()
	}
	o.mu.Unlock()
}

// diff is the Differ's diff of old and new, through their plain views
// when JSON would lose fields of T.
func (o *Observable[T]) diff(old, new T) *Diff {
	if !hasHidden(reflect.TypeFor[T]()) && reflect.TypeFor[T]().Kind() != reflect.Interface {
		return o.Differ.Between(old, new)
	}
	a, err := plainView(old)
	if err == nil {
		var b any
		if b, err = plainView(new); err == nil {
			return o.Differ.Between(a, b)
		}
	}
	d := &Diff{old: old, new: new, err: fmt.Errorf("observable: %w", err)}
	d.once.Do(func() {})
	return d
}
