package rungroup_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/objwatch/objwatch/server/rungroup"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// log records what the components did, in order.
type log struct {
	mu     sync.Mutex
	events []string
}

func (l *log) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *log) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// component runs until its context ends, is ready once it has started,
// and records its start, its Run's end and its Stop.
func component(l *log, name string) rungroup.Component {
	running := make(chan struct{})
	return rungroup.Component{
		Name: name,
		Run: func(ctx context.Context) {
			l.add("start " + name)
			close(running)
			<-ctx.Done()
			l.add("end " + name)
		},
		Ready: func(context.Context) error { <-running; return nil },
		Stop:  func() { l.add("stop " + name) },
	}
}

func TestStartsInOrderStopsInReverse(t *testing.T) {
	var l log
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- rungroup.Run(ctx, component(&l, "a"), component(&l, "b"), component(&l, "c")) }()
	for len(l.get()) < 3 {
		time.Sleep(time.Millisecond)
	}
	if got := l.get(); !slices.Equal(got, []string{"start a", "start b", "start c"}) {
		t.Fatalf("started %v, want a, b, c in order", got)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run = %v", err)
	}
	// Their contexts end together; each is stopped, and waited for,
	// after the one started after it.
	stops := slices.DeleteFunc(l.get()[3:], func(e string) bool { return e[:3] == "end" })
	if !slices.Equal(stops, []string{"stop c", "stop b", "stop a"}) {
		t.Errorf("stopped %v, want c, b, a", stops)
	}
}

func TestFailedReadyStopsThoseStartedBefore(t *testing.T) {
	var l log
	boom := errors.New("boom")
	failing := rungroup.Component{Name: "bootstrap", Ready: func(context.Context) error { return boom }}
	never := rungroup.Component{Name: "never", Run: func(context.Context) { l.add("start never") }}
	err := rungroup.Run(t.Context(), component(&l, "a"), component(&l, "b"), failing, never)
	if !errors.Is(err, boom) || err.Error() != "bootstrap: boom" {
		t.Fatalf("Run = %v, want bootstrap: boom", err)
	}
	// The group's context did not end: each is stopped on its own, in
	// reverse, its Run ended before the one started before it is stopped.
	want := []string{"start a", "start b", "end b", "stop b", "end a", "stop a"}
	if got := l.get(); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

func TestDetachedOutlivesTheGroupsContext(t *testing.T) {
	var l log
	detached := component(&l, "probe")
	detached.Detached = true
	// "last" sees the group's context end while the probe still runs.
	var probeRunning bool
	last := rungroup.Component{Name: "last", Run: func(ctx context.Context) {
		<-ctx.Done()
		probeRunning = !slices.Contains(l.get(), "end probe")
	}}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := rungroup.Run(ctx, detached, last); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if !probeRunning {
		t.Error("a detached component's context ended with the group's")
	}
	if got := l.get(); !slices.Equal(got, []string{"start probe", "end probe", "stop probe"}) {
		t.Errorf("events %v", got)
	}
}
