package leaderelection_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/leaderelection"
)

// Short timings, so that the package's tests take seconds.
const (
	leaseDuration = 2 * time.Second
	renewDeadline = 1500 * time.Millisecond
	retryPeriod   = 200 * time.Millisecond
	// maxWait is the longest a candidate waits between attempts to
	// acquire (RetryPeriod plus 120% jitter).
	maxWait = retryPeriod * 22 / 10
	// slack allows for requests and for goroutines to be scheduled on a
	// loaded test machine.
	slack = 500 * time.Millisecond
)

// newREST connects to the server of kubeconfig. A non-nil cut makes every request fail while
// it is set, as if the server had become unreachable.
func newREST(t *testing.T, kubeconfig string, cut *atomic.Bool) *client.REST {
	t.Helper()
	cfg, err := client.FromKubeconfig(kubeconfig, "")
	if err != nil {
		t.Fatalf("FromKubeconfig: %v", err)
	}
	if cut != nil {
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return cutTransport{rt: rt, cut: cut}
		}
	}
	rc, err := client.New(cfg)
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	t.Cleanup(rc.CloseIdleConnections)
	return rc
}

type cutTransport struct {
	rt  http.RoundTripper
	cut *atomic.Bool
}

var errCut = errors.New("connection cut by test")

// CloseIdleConnections lets REST.CloseIdleConnections reach the transport.
func (c cutTransport) CloseIdleConnections() {
	if ci, ok := c.rt.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

func (c cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.rt.RoundTrip(r)
}

// span is one candidate's time as leader, as its OnStartedLeading saw it:
// from the call until its context was done (to is zero while it leads).
type span struct {
	who      string
	from, to time.Time
}

// ledger records the leadership spans of all candidates of one election.
type ledger struct {
	mu    sync.Mutex
	spans []span
}

// lead is an OnStartedLeading for who: it records the span and holds it
// until ctx is done.
func (l *ledger) lead(who string) func(context.Context) {
	return func(ctx context.Context) {
		l.mu.Lock()
		i := len(l.spans)
		l.spans = append(l.spans, span{who: who, from: time.Now()})
		l.mu.Unlock()
		<-ctx.Done()
		l.mu.Lock()
		l.spans[i].to = time.Now()
		l.mu.Unlock()
	}
}

func (l *ledger) all() []span {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.spans)
}

// current is who leads now, per the ledger ("" if none).
func (l *ledger) current() (span, bool) {
	for _, s := range l.all() {
		if s.to.IsZero() {
			return s, true
		}
	}
	return span{}, false
}

// checkOneLeader fails the test if two spans overlap.
func (l *ledger) checkOneLeader(t *testing.T) {
	t.Helper()
	spans := l.all()
	slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
	for i := 1; i < len(spans); i++ {
		prev, cur := spans[i-1], spans[i]
		if prev.to.IsZero() || cur.from.Before(prev.to) {
			t.Errorf("two leaders: %s led from %v until %s, and %s from %v", prev.who, prev.from.Format(time.StampMicro), endString(prev), cur.who, cur.from.Format(time.StampMicro))
		}
	}
	if t.Failed() {
		t.Logf("spans: %s", spansString(spans))
	}
}

func endString(s span) string {
	if s.to.IsZero() {
		return "now"
	}
	return s.to.Format(time.StampMicro)
}

func spansString(spans []span) string {
	out := ""
	for _, s := range spans {
		out += fmt.Sprintf("\n  %s %s - %s", s.who, s.from.Format(time.StampMicro), endString(s))
	}
	return out
}

// waitLeader waits up to d for a candidate other than not to lead.
func (l *ledger) waitLeader(t *testing.T, not string, d time.Duration) span {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if s, ok := l.current(); ok && s.who != not {
			return s
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no leader but %q within %v; spans: %s", not, d, spansString(l.all()))
	return span{}
}

// candidate is one running leaderelection.Run.
type candidate struct {
	el     *leaderelection.Elector
	cancel context.CancelFunc
	done   chan error // Run's result, then closed
}

// config is a Config for the test's lease with the short timings, leading
// into l as who.
func config(t *testing.T, who string, l *ledger) leaderelection.Config {
	return leaderelection.Config{
		Namespace: "default", Name: "test-lease", Identity: who,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		Callbacks: leaderelection.Callbacks{OnStartedLeading: l.lead(who)},
		Log:       slog.New(slog.NewTextHandler(t.Output(), nil)).With("who", who),
	}
}

// start runs an elector for cfg until the test ends or stop is called.
func start(t *testing.T, rc *client.REST, cfg leaderelection.Config) *candidate {
	t.Helper()
	el, err := leaderelection.New(rc, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{el: el, cancel: cancel, done: make(chan error, 1)}
	go func() { defer close(c.done); c.done <- el.Run(ctx) }()
	t.Cleanup(func() { c.stop(t) })
	return c
}

// stop cancels Run's context and returns Run's result.
func (c *candidate) stop(t *testing.T) error {
	t.Helper()
	c.cancel()
	return c.wait(t, 10*time.Second)
}

// wait returns Run's result once it returned, within d.
func (c *candidate) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-c.done:
		return err
	case <-time.After(d):
		t.Fatalf("Run did not return within %v", d)
		return nil
	}
}
