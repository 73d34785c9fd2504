package workqueue

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrDuplicateName is the error (wrapped) of New for a queue whose name
// another queue already uses on the same prometheus.Registerer.
var ErrDuplicateName = errors.New("another queue of that name exports its metrics to this registerer")

// metrics are one queue's collectors. Counters and histograms are updated
// as things happen (atomically, under the queue's lock only because it is
// held anyway); gauges are computed when the registry is scraped.
type metrics struct {
	adds, retries prometheus.Counter
	latency, work prometheus.Histogram
	unregister    func()
}

// collectors is a set of collectors registered, and unregistered, as one.
type collectors []prometheus.Collector

func (cs collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

func (cs collectors) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}

// registerMetrics makes q's metrics, named as client-go's workqueue
// metrics (k8s.io/component-base/metrics/prometheus/workqueue, which
// controller-runtime copies) with the label name=<name>, and registers
// them with reg.
func registerMetrics[K comparable](q *Queue[K], name string, reg prometheus.Registerer) (*metrics, error) {
	labels := prometheus.Labels{"name": name}
	buckets := prometheus.ExponentialBuckets(10e-9, 10, 12) // 10 ns to 1000 s, as client-go
	m := &metrics{
		adds: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "workqueue", Name: "adds_total", ConstLabels: labels,
			Help: "Total number of adds handled by workqueue",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "workqueue", Name: "retries_total", ConstLabels: labels,
			Help: "Total number of items added to the workqueue with a non-zero delay (rate-limited requeues, explicit RequeueAfter or AddAfter calls)",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "workqueue", Name: "queue_duration_seconds", ConstLabels: labels, Buckets: buckets,
			Help: "How long in seconds an item stays in workqueue before being requested",
		}),
		work: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "workqueue", Name: "work_duration_seconds", ConstLabels: labels, Buckets: buckets,
			Help: "How long in seconds processing an item from workqueue takes.",
		}),
	}
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Subsystem: "workqueue", Name: "depth", ConstLabels: labels,
		Help: "Current depth of workqueue",
	}, func() float64 { return float64(q.Len()) })
	unfinished := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Subsystem: "workqueue", Name: "unfinished_work_seconds", ConstLabels: labels,
		Help: "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. " +
			"Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
	}, func() float64 { total, _ := q.inFlightTimes(); return total.Seconds() })
	longest := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Subsystem: "workqueue", Name: "longest_running_processor_seconds", ConstLabels: labels,
		Help: "How many seconds has the longest running processor for workqueue been running.",
	}, func() float64 { _, longest := q.inFlightTimes(); return longest.Seconds() })

	cs := collectors{m.adds, m.retries, m.latency, m.work, depth, unfinished, longest}
	if err := reg.Register(cs); err != nil {
		if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
			return nil, fmt.Errorf("workqueue %s: metrics: %w (%w)", name, ErrDuplicateName, err)
		}
		return nil, fmt.Errorf("workqueue %s: metrics: %w", name, err)
	}
	m.unregister = func() { reg.Unregister(cs) }
	return m, nil
}

// inFlightTimes returns how long the keys in flight have been processed,
// in total and the longest. It walks every key: it runs only on scrapes.
func (q *Queue[K]) inFlightTimes() (total, longest time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inFlight == 0 {
		return 0, 0
	}
	now := q.clock.Now()
	for _, e := range q.items {
		if e.state == stateProcessing {
			d := now.Sub(e.since)
			total += d
			longest = max(longest, d)
		}
	}
	return total, longest
}
