package leaderelection

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Errors. Test them with errors.Is.
var (
	// ErrInvalidConfig wraps every reason New rejects a Config.
	ErrInvalidConfig = errors.New("invalid leader election config")
	// ErrLost is returned by Run when this candidate stopped leading
	// because it could not renew the lease within RenewDeadline or found
	// it held by another.
	ErrLost = errors.New("leadership lost")
	// ErrRunning is returned by Run when the Elector is already running.
	ErrRunning = errors.New("elector already running")
)

// Defaults, those of client-go and of Kubernetes' own components.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Config is one candidate's part in one election. It is plain data; New
// copies it.
type Config struct {
	// Namespace and Name name the coordination.k8s.io/v1 Lease. Both are
	// required. The Lease is created if missing.
	Namespace, Name string

	// Identity is this candidate's holderIdentity; it must differ from
	// every other candidate's, as a candidate that finds its own identity
	// in the lease takes it at once. Default: hostname_random.
	Identity string

	// LeaseDuration is how long the others wait, after they last saw the
	// lease change, before they take it over (default 15s). It is written
	// to the lease as leaseDurationSeconds, rounded up to whole seconds.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps leading without a
	// successful renewal (default 10s). It must be less than
	// LeaseDuration; the difference is the margin for clock rate skew and
	// for OnStartedLeading to stop.
	RenewDeadline time.Duration
	// RetryPeriod is the time between renewals, and between attempts to
	// acquire (with up to 120% jitter added, as client-go does) (default
	// 2s). It must be less than RenewDeadline.
	RetryPeriod time.Duration

	// ReleaseOnCancel releases the lease when Run ends — after
	// OnStartedLeading has returned — so that another candidate takes over
	// at once instead of after LeaseDuration.
	ReleaseOnCancel bool

	Callbacks Callbacks

	// Metrics, if set, gets leader_election_master_status{name} (1 while
	// this candidate leads the lease Name, else 0) and
	// leader_election_slowpath_total{name} (renewals that had to read the
	// lease first), client-go's metrics. Electors may share a registry.
	Metrics prometheus.Registerer

	// Log receives the elector's logs: leadership changes at Info, failed
	// requests at Warn (default: discarded).
	Log *slog.Logger

	// Clock, if set, replaces the real clock for every judgment and wait
	// (tests use it to skew time). Request timeouts use the durations it
	// yields in real time.
	Clock Clock
}

// Callbacks are how Run tells the program what happens.
type Callbacks struct {
	// OnStartedLeading is called on its own goroutine when this candidate
	// becomes leader. ctx is cancelled when leadership ends: at once when
	// Run's context ends, when RenewDeadline passes without a successful
	// renewal, or when another candidate is found holding the lease. It
	// must stop acting as leader promptly once ctx is done: the guarantee
	// that there is only one leader lasts only LeaseDuration-RenewDeadline
	// past a failed renewal. Run returns only after it has returned; if it
	// returns on its own, leadership ends. Required.
	OnStartedLeading func(ctx context.Context)
	// OnStoppedLeading, if set, is called by Run's goroutine after
	// OnStartedLeading has returned and the lease was released (with
	// ReleaseOnCancel), only if this candidate led. Unlike client-go's,
	// it is not called when Run ends without having led.
	OnStoppedLeading func()
	// OnNewLeader, if set, is called with each new holder of the lease
	// this candidate observes, itself included, never with "". Calls come
	// one at a time from one goroutine that Run owns, so a slow callback
	// delays no renewal; it may then skip holders that came and went
	// meanwhile, and one still pending when Run returns is dropped.
	OnNewLeader func(identity string)
}

// Clock is the time source of an Elector. Its After must deliver once the
// clock has advanced by d.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// withDefaults validates c and fills in its defaults.
func (c Config) withDefaults() (Config, error) {
	if c.Namespace == "" || c.Name == "" {
		return c, fmt.Errorf("%w: lease namespace and name are required", ErrInvalidConfig)
	}
	if c.Identity == "" {
		host, _ := os.Hostname()
		c.Identity = host + "_" + rand.Text()
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = DefaultRenewDeadline
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = DefaultRetryPeriod
	}
	switch {
	case c.LeaseDuration < 0 || c.RenewDeadline < 0 || c.RetryPeriod < 0:
		return c, fmt.Errorf("%w: negative duration", ErrInvalidConfig)
	case c.RenewDeadline >= c.LeaseDuration:
		return c, fmt.Errorf("%w: renewDeadline %v must be less than leaseDuration %v", ErrInvalidConfig, c.RenewDeadline, c.LeaseDuration)
	case c.RetryPeriod >= c.RenewDeadline:
		return c, fmt.Errorf("%w: retryPeriod %v must be less than renewDeadline %v", ErrInvalidConfig, c.RetryPeriod, c.RenewDeadline)
	case c.Callbacks.OnStartedLeading == nil:
		return c, fmt.Errorf("%w: OnStartedLeading is required", ErrInvalidConfig)
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	return c, nil
}

// leaseSeconds is LeaseDuration as written to the lease: rounded up, so
// that others never wait less than this candidate assumes.
func (c Config) leaseSeconds() int32 {
	return int32((c.LeaseDuration + time.Second - 1) / time.Second)
}
