package change_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/objwatch/objwatch/change"
)

// route is an object: a named backend with a weight and a CPU budget.
type route struct {
	Name   string
	Host   string
	Weight int
	CPU    string
	Off    bool
}

// backend is the local state a route calls for.
type backend struct {
	Host   string            `json:"host"`
	Weight int               `json:"weight"`
	CPU    resource.Quantity `json:"cpu"`
	Since  metav1.Time       `json:"since"`
}

// source is a Source over a map, safe for concurrent use.
type source struct {
	mu     sync.Mutex
	routes map[string]route
}

func (s *source) List() []route {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []route
	for _, r := range s.routes {
		out = append(out, r)
	}
	return out
}

func (s *source) Get(key string) (route, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.routes[key]
	return r, ok
}

func (s *source) put(r route) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.routes[r.Name] = r
}

var _ change.Source[string, route] = (*source)(nil)

var epoch = metav1.NewTime(time.Unix(1e9, 0))

func derive(r route) (backend, bool) {
	if r.Off {
		return backend{}, false
	}
	// A time in another location: the same instant.
	return backend{Host: r.Host, Weight: r.Weight, CPU: resource.MustParse(r.CPU), Since: metav1.NewTime(epoch.In(time.FixedZone("x", 3600)))}, true
}

func newSyncer(t *testing.T, opts change.SyncerOptions[string, route, backend]) (*change.StateSyncer[string, route, backend], *source) {
	t.Helper()
	src := &source{routes: map[string]route{
		"a": {Name: "a", Host: "10.0.0.1", Weight: 1, CPU: "1"},
		"b": {Name: "b", Host: "10.0.0.2", Weight: 2, CPU: "500m"},
		"c": {Name: "c", Host: "10.0.0.3", Off: true},
	}}
	opts.Source = src
	opts.Key = func(r route) string { return r.Name }
	opts.Derive = derive
	s, err := change.NewStateSyncer(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, src
}

func TestStateSyncer(t *testing.T) {
	s, src := newSyncer(t, change.SyncerOptions[string, route, backend]{})
	if d := s.Resync(); len(d) != 2 || d[0].Kind != change.DriftMissing {
		t.Fatalf("first Resync() = %+v, want 2 missing", d)
	}
	if d := s.Check(); len(d) != 0 {
		t.Fatalf("Check() after Resync = %+v", d)
	}
	if got := s.Snapshot(); len(got) != 2 {
		t.Fatalf("Snapshot() = %v", got)
	}

	// Semantically equal state is no drift: 1000m is 1 CPU, and times are
	// instants.
	a, _ := s.Get("a")
	a.CPU = resource.MustParse("1000m")
	a.Since = epoch
	s.Set("a", a)
	if d := s.Check(); len(d) != 0 {
		t.Fatalf("Check() with equal quantities and times = %+v", d)
	}

	// Inject drift of every kind.
	a.Weight = 10
	s.Set("a", a)                                                       // changed
	s.Delete("b")                                                       // missing
	s.Set("z", backend{Host: "10.9.9.9", CPU: resource.MustParse("1")}) // extra
	drift := s.Check()
	slices.SortFunc(drift, func(x, y change.Drift[string, backend]) int { return strings.Compare(x.Key, y.Key) })
	want := []struct {
		key   string
		kind  change.DriftKind
		paths []string
	}{
		{"a", change.DriftChanged, []string{"weight"}},
		{"b", change.DriftMissing, []string{""}},
		{"z", change.DriftExtra, []string{""}},
	}
	if len(drift) != len(want) {
		t.Fatalf("Check() = %+v, want %d drifts", drift, len(want))
	}
	for i, w := range want {
		d := drift[i]
		if d.Key != w.key || d.Kind != w.kind || !slices.Equal(d.Diff.Paths(), w.paths) {
			t.Errorf("drift %d = %s %s %q, want %s %s %q", i, d.Key, d.Kind, d.Diff.Paths(), w.key, w.kind, w.paths)
		}
	}
	if c := drift[0].Diff.Changes(); c[0].Old != int64(10) || c[0].New != int64(1) {
		t.Errorf("drift of a: %+v, want weight 10 -> 1", c)
	}
	s.Repair("a", "b", "z")
	if d := s.Check(); len(d) != 0 {
		t.Fatalf("Check() after Repair = %+v", d)
	}

	// Sync follows the source.
	src.put(route{Name: "b", Host: "10.0.0.2", Weight: 3, CPU: "2"})
	src.put(route{Name: "a", Off: true})
	s.Sync("b")
	s.Sync("a")
	if b, _ := s.Get("b"); b.Weight != 3 {
		t.Errorf("after Sync(b), weight = %d, want 3", b.Weight)
	}
	if _, ok := s.Get("a"); ok {
		t.Errorf("after Sync(a) of a route switched off, state remains")
	}
}

func TestStateSyncerRun(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	drifts := make(chan []change.Drift[string, backend], 1)
	s, _ := newSyncer(t, change.SyncerOptions[string, route, backend]{
		Interval: time.Minute,
		Clock:    clk,
		Repair:   true,
		OnDrift:  func(d []change.Drift[string, backend]) { drifts <- d },
	})
	s.Resync()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}

	a, _ := s.Get("a")
	a.Host = "10.6.6.6"
	s.Set("a", a)
	clk.Step(time.Minute)
	d := <-drifts
	if len(d) != 1 || d[0].Key != "a" || !slices.Equal(d[0].Diff.Paths(), []string{"host"}) {
		t.Errorf("OnDrift(%+v), want a's host", d)
	}
	// Repair runs after OnDrift returned; the next check finds nothing.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if a, _ := s.Get("a"); a.Host == "10.0.0.1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("drift not repaired")
		}
		time.Sleep(time.Millisecond)
	}
	clk.Step(time.Minute)
	select {
	case d := <-drifts:
		t.Errorf("OnDrift(%+v) after repair", d)
	case <-time.After(20 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() = %v", err)
	}
}

// TestStateSyncerRace: a check racing with updates that Sync follows
// reports no drift, and never installs stale state.
func TestStateSyncerRace(t *testing.T) {
	s, src := newSyncer(t, change.SyncerOptions[string, route, backend]{})
	s.Resync()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for w := 0; ; w++ {
			select {
			case <-stop:
				return
			default:
			}
			src.put(route{Name: "a", Host: "10.0.0.1", Weight: w, CPU: "1"})
			s.Sync("a")
		}
	})
	for range 200 {
		for _, d := range s.Check() {
			// Between the recheck's read of the source and of the state an
			// update may land; it is then reported, and Repair re-reads.
			s.Repair(d.Key)
		}
	}
	close(stop)
	wg.Wait()
	if d := s.Check(); len(d) != 0 {
		t.Errorf("Check() at rest = %+v", d)
	}
}

func TestStateSyncerOptions(t *testing.T) {
	if _, err := change.NewStateSyncer(change.SyncerOptions[string, route, backend]{}); err == nil {
		t.Errorf("NewStateSyncer without Source, Key, Derive = nil error")
	}
}
