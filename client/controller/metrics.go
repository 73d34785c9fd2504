package controller

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrDuplicateName is the error (wrapped) of New for a controller whose
// name another controller already uses on the same prometheus.Registerer.
var ErrDuplicateName = errors.New("another controller of that name exports its metrics to this registerer")

// metrics are one controller's, named as controller-runtime's
// (pkg/internal/controller/metrics), its name a constant label.
type metrics struct {
	total                              *prometheus.CounterVec
	errors, terminal, panics, timeouts prometheus.Counter
	staleSkips                         prometheus.Counter
	duration                           prometheus.Histogram
	active, maxConcurrent              prometheus.Gauge
	unregister                         func()
}

// Describe and Collect make the metrics one collector, registered and
// unregistered as one.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(m, ch) }

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.total.Collect(ch)
	for _, c := range []prometheus.Metric{m.errors, m.terminal, m.panics, m.timeouts, m.staleSkips, m.duration, m.active, m.maxConcurrent} {
		ch <- c
	}
}

func newMetrics(name string, reg prometheus.Registerer) (*metrics, error) {
	l := prometheus.Labels{"controller": name}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: l})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: l})
	}
	m := &metrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "controller_runtime_reconcile_total", Help: "Total number of reconciliations per controller", ConstLabels: l,
		}, []string{"result"}),
		errors:   counter("controller_runtime_reconcile_errors_total", "Total number of reconciliation errors per controller"),
		terminal: counter("controller_runtime_terminal_reconcile_errors_total", "Total number of terminal reconciliation errors per controller"),
		panics:   counter("controller_runtime_reconcile_panics_total", "Total number of reconciliation panics per controller"),
		timeouts: counter("controller_runtime_reconcile_timeouts_total",
			"Total number of reconciliations that timed out due to the ReconciliationTimeout context timeout"),
		staleSkips: counter("objwatch_controller_stale_cache_skips_total",
			"Reconciles put off because the cache was older than the controller's last write of the object"),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "controller_runtime_reconcile_time_seconds", Help: "Length of time per reconciliation per controller", ConstLabels: l,
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
				1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60},
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  100,
			NativeHistogramMinResetDuration: time.Hour,
		}),
		active:        gauge("controller_runtime_active_workers", "Number of currently used workers per controller"),
		maxConcurrent: gauge("controller_runtime_max_concurrent_reconciles", "Maximum number of concurrent reconciles per controller"),
	}
	for _, r := range []string{"success", "error", "requeue", "requeue_after"} {
		m.total.WithLabelValues(r)
	}
	if err := reg.Register(m); err != nil {
		if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
			return nil, fmt.Errorf("controller %s: metrics: %w (%w)", name, ErrDuplicateName, err)
		}
		return nil, fmt.Errorf("controller %s: metrics: %w", name, err)
	}
	m.unregister = func() { reg.Unregister(m) }
	return m, nil
}
