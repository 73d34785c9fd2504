package change

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/clock"
)

// Source is where a StateSyncer reads objects: an informer's lister, or
// anything else with a list and a lookup. Adapt functions with SourceFuncs.
type Source[K comparable, T any] interface {
	List() []T
	Get(key K) (T, bool)
}

// SourceFuncs adapts two functions to a Source, e.g. an informer's lister:
//
//	change.SourceFuncs[informer.Key, *corev1.Pod]{
//		ListFunc: func() []*corev1.Pod { return lister.List("", nil) },
//		GetFunc:  func(k informer.Key) (*corev1.Pod, bool) { return lister.Get(k.Namespace, k.Name) },
//	}
type SourceFuncs[K comparable, T any] struct {
	ListFunc func() []T
	GetFunc  func(key K) (T, bool)
}

var _ Source[string, any] = SourceFuncs[string, any]{}

func (s SourceFuncs[K, T]) List() []T           { return s.ListFunc() }
func (s SourceFuncs[K, T]) Get(key K) (T, bool) { return s.GetFunc(key) }

// SyncerOptions configure a StateSyncer.
type SyncerOptions[K comparable, T, S any] struct {
	// Source holds the objects (required).
	Source Source[K, T]
	// Key returns an object's key (required).
	Key func(obj T) K
	// Derive returns the local state an object calls for, and false if it
	// calls for none (required). It must not modify obj.
	Derive func(obj T) (S, bool)
	// Interval is how often Run checks everything (default 5 minutes).
	Interval time.Duration
	// Clock is for tests; nil: the real clock.
	Clock clock.WithTicker
	// OnDrift, if set, gets the drift each of Run's checks finds.
	OnDrift func(drift []Drift[K, S])
	// Repair makes Run repair the drift it finds.
	Repair bool
}

// DriftKind says how local state and objects disagree.
type DriftKind uint8

const (
	// DriftMissing: an object calls for state that is not there.
	DriftMissing DriftKind = iota + 1
	// DriftExtra: there is state no object calls for.
	DriftExtra
	// DriftChanged: the state differs from what its object calls for.
	DriftChanged
)

func (k DriftKind) String() string {
	switch k {
	case DriftMissing:
		return "missing"
	case DriftExtra:
		return "extra"
	case DriftChanged:
		return "changed"
	}
	return "unknown"
}

// Drift is one key whose local state disagrees with its object.
type Drift[K comparable, S any] struct {
	Key  K
	Kind DriftKind
	// Local is the state held (zero if DriftMissing); Want the state the
	// object calls for (zero if DriftExtra).
	Local, Want S
	// Diff is from Local to Want (from null for DriftMissing, to null for
	// DriftExtra).
	Diff *Diff
}

// StateSyncer keeps local state derived from objects — one S per object,
// by key, computed by a function of the object — and checks that it still
// says what the objects say: Sync follows changes (call it from an
// informer's handlers), Check reports drift with diffs, Repair fixes it,
// and Run checks everything periodically. State is compared with
// equality.Semantic (1000m and 1 CPU are the same quantity; times compare
// as instants).
//
// # Concurrency
//
// A StateSyncer is safe for concurrent use. Syncs (Sync, Repair, Resync)
// run one at a time, each reading the source anew, so the last one leaves
// the state the source holds last; Source and Derive must not call the
// StateSyncer. Run is the only method that blocks; it starts no
// goroutines. Values of S are copied in and out as they are: if S holds
// maps or pointers, do not modify what Get returns.
type StateSyncer[K comparable, T, S any] struct {
	opts SyncerOptions[K, T, S]

	syncMu sync.Mutex // serializes syncs; taken before mu
	mu     sync.Mutex // guards state
	state  map[K]S
}

// NewStateSyncer returns a StateSyncer with no local state; call Resync
// (or Repair) to fill it.
func NewStateSyncer[K comparable, T, S any](opts SyncerOptions[K, T, S]) (*StateSyncer[K, T, S], error) {
	if opts.Source == nil || opts.Key == nil || opts.Derive == nil {
		return nil, errors.New("state syncer: Source, Key and Derive are required")
	}
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Minute
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &StateSyncer[K, T, S]{opts: opts, state: map[K]S{}}, nil
}

// Get returns the local state for key.
func (s *StateSyncer[K, T, S]) Get(key K) (S, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.state[key]
	return v, ok
}

// Snapshot returns a copy of all local state.
func (s *StateSyncer[K, T, S]) Snapshot() map[K]S {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.state)
}

// Set replaces the local state for key, for state the application changes
// itself; Check reports it if it disagrees with the object.
func (s *StateSyncer[K, T, S]) Set(key K, v S) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state[key] = v
}

// Delete removes the local state for key.
func (s *StateSyncer[K, T, S]) Delete(key K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.state, key)
}

// Sync makes the local state for key what the source's object calls for
// now (removing it if there is no object or it calls for none). Call it
// from an informer's add, update and delete handlers.
func (s *StateSyncer[K, T, S]) Sync(key K) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	want, ok := s.want(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.state[key] = want
	} else {
		delete(s.state, key)
	}
}

// Resync makes all local state what the source's objects call for, and
// returns the drift it repaired.
func (s *StateSyncer[K, T, S]) Resync() []Drift[K, S] {
	drift := s.Check()
	s.Repair(keys(drift)...)
	return drift
}

// Repair syncs the keys (see Sync): use it on the keys of drift Check
// found. It reads the objects anew, so it never installs state older than
// what the source holds.
func (s *StateSyncer[K, T, S]) Repair(keys ...K) {
	for _, k := range keys {
		s.Sync(k)
	}
}

func (s *StateSyncer[K, T, S]) want(key K) (S, bool) {
	obj, ok := s.opts.Source.Get(key)
	if !ok {
		var zero S
		return zero, false
	}
	return s.opts.Derive(obj)
}

// Check compares all local state with what the source's objects call for
// and returns the disagreements, without changing anything. Drift found in
// the full pass is checked again against the source's current object
// before it is reported, so that a change racing with the check (an
// object updated and synced while the check ran) is not reported.
func (s *StateSyncer[K, T, S]) Check() []Drift[K, S] {
	want := map[K]S{}
	for _, obj := range s.opts.Source.List() {
		if v, ok := s.opts.Derive(obj); ok {
			want[s.opts.Key(obj)] = v
		}
	}
	local := s.Snapshot()
	var suspects []K
	for k, w := range want {
		if l, ok := local[k]; !ok || !equality.Semantic.DeepEqual(l, w) {
			suspects = append(suspects, k)
		}
	}
	for k := range local {
		if _, ok := want[k]; !ok {
			suspects = append(suspects, k)
		}
	}
	var drift []Drift[K, S]
	for _, k := range suspects {
		if d, ok := s.CheckKey(k); ok {
			drift = append(drift, d)
		}
	}
	return drift
}

// CheckKey compares the local state for key with what the source's object
// calls for.
func (s *StateSyncer[K, T, S]) CheckKey(key K) (Drift[K, S], bool) {
	w, wok := s.want(key)
	l, lok := s.Get(key)
	d := Drift[K, S]{Key: key, Local: l, Want: w}
	switch {
	case wok && !lok:
		d.Kind, d.Diff = DriftMissing, exact.Between(nil, w)
	case !wok && lok:
		d.Kind, d.Diff = DriftExtra, exact.Between(l, nil)
	case wok && lok && !equality.Semantic.DeepEqual(l, w):
		d.Kind, d.Diff = DriftChanged, exact.Between(l, w)
	default:
		return Drift[K, S]{}, false
	}
	return d, true
}

// Run checks everything every Interval until ctx ends, passing the drift
// found to OnDrift and repairing it if Repair is set. It returns nil when
// ctx ends.
func (s *StateSyncer[K, T, S]) Run(ctx context.Context) error {
	t := s.opts.Clock.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		drift := s.Check()
		if len(drift) == 0 {
			continue
		}
		if s.opts.OnDrift != nil {
			s.opts.OnDrift(drift)
		}
		if s.opts.Repair {
			s.Repair(keys(drift)...)
		}
	}
}

func keys[K comparable, S any](drift []Drift[K, S]) []K {
	out := make([]K, len(drift))
	for i, d := range drift {
		out[i] = d.Key
	}
	return out
}
