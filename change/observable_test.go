package change_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/objwatch/objwatch/change"
)

type config struct {
	Replicas int               `json:"replicas"`
	Image    string            `json:"image,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
}

// collect reads events until one with revision until, or an error.
func collect[T any](ctx context.Context, o *change.Observable[T], from, until int64) ([]change.Event[T], error) {
	var out []change.Event[T]
	if from >= until {
		return nil, nil
	}
	for ev, err := range o.Watch(ctx, from) {
		if err != nil {
			return out, err
		}
		out = append(out, ev)
		if ev.Revision >= until {
			break
		}
	}
	return out, nil
}

func TestObservable(t *testing.T) {
	var o change.Observable[config]
	if v, rev := o.Get(); rev != 0 || v.Replicas != 0 {
		t.Fatalf("zero Observable Get() = %v, %d", v, rev)
	}
	values := []config{
		{Replicas: 1},
		{Replicas: 2},
		{Replicas: 2, Image: "nginx"},
		{Replicas: 2, Image: "nginx", Labels: map[string]string{"app": "web"}},
		{Replicas: 2, Image: "nginx", Labels: map[string]string{"app": "web"}}, // no change: still a revision
	}
	for i, v := range values {
		if rev := o.Set(v); rev != int64(i+1) {
			t.Fatalf("Set() = %d, want %d", rev, i+1)
		}
	}
	wantPaths := [][]string{{"replicas"}, {"replicas"}, {"image"}, {"labels"}, nil}
	ctx := t.Context()
	for from := int64(0); from <= 5; from++ {
		evs, err := collect(ctx, &o, from, 5)
		if err != nil {
			t.Fatalf("Watch(%d) = %v", from, err)
		}
		if len(evs) != int(5-from) {
			t.Fatalf("Watch(%d) returned %d events, want %d", from, len(evs), 5-from)
		}
		for i, ev := range evs {
			rev := from + 1 + int64(i)
			if ev.Revision != rev {
				t.Errorf("Watch(%d) event %d: revision %d, want %d", from, i, ev.Revision, rev)
			}
			if ev.New.Replicas != values[rev-1].Replicas || (rev > 1 && ev.Old.Image != values[rev-2].Image) {
				t.Errorf("event %d: Old %v, New %v", rev, ev.Old, ev.New)
			}
			if got := ev.Diff.Paths(); !slices.Equal(got, wantPaths[rev-1]) {
				t.Errorf("event %d: Paths() = %q, want %q", rev, got, wantPaths[rev-1])
			}
		}
	}
	ev := mustFirst(t, &o, 3)
	if c := ev.Diff.Changes(); len(c) != 1 || c[0].Op != change.OpAdd || c[0].New.(map[string]any)["app"] != "web" {
		t.Errorf("event 4 changes = %+v, want labels added", c)
	}
}

func mustFirst[T any](t *testing.T, o *change.Observable[T], from int64) change.Event[T] {
	t.Helper()
	evs, err := collect(t.Context(), o, from, from+1)
	if err != nil || len(evs) != 1 {
		t.Fatalf("Watch(%d) = %v, %v", from, evs, err)
	}
	return evs[0]
}

func TestObservableErrors(t *testing.T) {
	o := change.Observable[int]{History: 3}
	for i := range 10 {
		o.Set(i)
	}
	tests := []struct {
		from int64
		want error
	}{
		{0, change.ErrCompacted},
		{6, change.ErrCompacted},
		{-1, change.ErrCompacted},
		{7, nil}, // events 8, 9, 10 are kept
		{10, context.DeadlineExceeded},
		{11, change.ErrFutureRevision},
	}
	for _, tt := range tests {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		var err error
		for _, err = range o.Watch(ctx, tt.from) {
			break
		}
		cancel()
		if !errors.Is(err, tt.want) {
			t.Errorf("Watch(%d) = %v, want %v", tt.from, err, tt.want)
		}
	}
}

func TestObservableFollow(t *testing.T) {
	var o change.Observable[int]
	_, rev := o.Get()
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan int64)
	done := make(chan error, 1)
	go func() {
		for ev, err := range o.Watch(ctx, rev) {
			if err != nil {
				done <- err
				return
			}
			got <- ev.Revision
		}
	}()
	for i := 1; i <= 3; i++ {
		o.Set(i)
		if r := <-got; r != int64(i) {
			t.Errorf("watcher got revision %d, want %d", r, i)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("watch ended with %v, want context.Canceled", err)
	}
}

// TestObservableSlowWatcher: a watcher that falls more than History
// changes behind gets ErrCompacted; writers never wait for it.
func TestObservableSlowWatcher(t *testing.T) {
	o := change.Observable[int]{History: 4}
	o.Set(1)
	n := 0
	var err error
	for ev, e := range o.Watch(t.Context(), 0) {
		if e != nil {
			err = e
			break
		}
		n++
		if ev.Revision == 1 {
			for i := range 10 {
				o.Set(i + 2) // while the watcher is busy
			}
		}
	}
	if n != 1 || !errors.Is(err, change.ErrCompacted) {
		t.Errorf("slow watcher got %d events then %v, want 1 then ErrCompacted", n, err)
	}
	if !strings.Contains(err.Error(), "oldest kept 7") {
		t.Errorf("error %q does not say what is kept", err)
	}
}

// TestObservableConcurrent: concurrent writers and watchers; every watcher
// sees every revision once, in order, each event's Old being the previous
// event's New, and ends at the final value; watchers that fall behind
// restart from Get as a client would after a 410.
func TestObservableConcurrent(t *testing.T) {
	const writers, writes, watchers = 4, 500, 6
	o := change.Observable[map[string]int]{History: 64}
	o.Set(map[string]int{})
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, watchers)
	for w := range watchers {
		wg.Go(func() {
			prev, rev := o.Get()
			if total(prev) == writers*writes {
				return // started after the writers ended
			}
			if w%2 == 0 {
				prev, rev = nil, 0 // replay everything first
			}
			restarts := 0
			for {
				restart := false
				for ev, err := range o.Watch(ctx, rev) {
					if errors.Is(err, change.ErrCompacted) {
						restart = true
						break
					}
					if err != nil {
						errs <- err
						return
					}
					if ev.Revision != rev+1 {
						errs <- fmt.Errorf("watcher %d: revision %d after %d", w, ev.Revision, rev)
						return
					}
					if prev != nil && fmt.Sprint(prev) != fmt.Sprint(ev.Old) {
						errs <- fmt.Errorf("watcher %d: event %d Old %v, previous New %v", w, ev.Revision, ev.Old, prev)
						return
					}
					prev, rev = ev.New, ev.Revision
					if total(ev.New) == writers*writes {
						return
					}
				}
				if !restart {
					errs <- fmt.Errorf("watcher %d: watch ended", w)
					return
				}
				restarts++
				var v map[string]int
				v, rev = o.Get()
				prev = v
				if total(v) == writers*writes {
					return
				}
			}
		})
	}
	var ww sync.WaitGroup
	for w := range writers {
		ww.Go(func() {
			key := fmt.Sprint("w", w)
			for range writes {
				o.Update(func(cur map[string]int) map[string]int {
					next := make(map[string]int, len(cur)+1)
					for k, v := range cur {
						next[k] = v
					}
					next[key]++
					return next
				})
			}
		})
	}
	ww.Wait()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if v, rev := o.Get(); total(v) != writers*writes || rev != writers*writes+1 {
		t.Errorf("final value %v at %d", v, rev)
	}
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func ExampleObservable() {
	var settings change.Observable[config]
	settings.Set(config{Replicas: 1, Image: "nginx:1"})
	_, rev := settings.Get()
	settings.Set(config{Replicas: 3, Image: "nginx:1"})
	settings.Set(config{Replicas: 3, Image: "nginx:2"})

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for ev, err := range settings.Watch(ctx, rev) {
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, c := range ev.Diff.Changes() {
			fmt.Printf("revision %d: %s %v -> %v\n", ev.Revision, c.Path, c.Old, c.New)
		}
		if ev.Revision == 3 {
			break
		}
	}
	// Output:
	// revision 2: replicas 1 -> 3
	// revision 3: image nginx:1 -> nginx:2
}
