package informer

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/objwatch/objwatch/client"
)

// metrics counts what one informer does. The hot path only touches
// atomics; the collector reads them, and the handler queues' lengths, when
// the registry is scraped.
type metrics struct {
	added, modified, deleted, bookmarks atomic.Uint64
	lists, watches, errors              atomic.Uint64
	relists, restarts                   atomic.Uint64
	deltas, deltaFailures               atomic.Uint64

	// Per-handler histograms, nil without Options.Metrics. Handlers
	// observe them directly (a histogram observation is atomic too).
	lag, latency *prometheus.HistogramVec
}

// newHistograms makes the per-handler histograms of the informer name.
func (m *metrics) newHistograms(name string) {
	m.lag = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "objwatch_informer_event_lag_seconds",
		Help: "Time from a change to the start of the handler call that delivers it. " +
			`source="commit": from when the server committed it (objwatch servers stamp watch events); ` +
			`source="receive": from when the informer read it (other servers, lists). ` +
			"A merged notification counts from its oldest change.",
		ConstLabels: prometheus.Labels{"informer": name},
		Buckets:     prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms to 16 s
	}, []string{"handler", "source"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:        "objwatch_informer_handler_duration_seconds",
		Help:        "Time spent in one handler call.",
		ConstLabels: prometheus.Labels{"informer": name},
		Buckets:     prometheus.ExponentialBuckets(0.00005, 4, 10), // 50 µs to 13 s
	}, []string{"handler"})
}

// handlerMetrics are one handler's observers, used only by its goroutine.
type handlerMetrics struct {
	vecs    *metrics
	name    string
	removed <-chan struct{}        // the handler's Registration.Remove was called
	lag     [2]prometheus.Observer // by stamp.commit, made on first use
	latency prometheus.Observer
}

func (m *metrics) forHandler(name string, removed <-chan struct{}) *handlerMetrics {
	if m.lag == nil {
		return nil
	}
	return &handlerMetrics{vecs: m, name: name, removed: removed, latency: m.latency.WithLabelValues(name)}
}

// observeLag records the lag of a notification delivered at now.
func (h *handlerMetrics) observeLag(st stamp, now time.Time) {
	if st.at.IsZero() {
		return // a replay or resync: no change to measure
	}
	i := 0
	if st.commit {
		i = 1
	}
	if h.lag[i] == nil {
		select {
		case <-h.removed:
			return // its series are deleted: do not bring them back
		default:
		}
		h.lag[i] = h.vecs.lag.WithLabelValues(h.name, [2]string{"receive", "commit"}[i])
	}
	// Clamp: a server clock ahead of ours would make commit lag negative.
	h.lag[i].Observe(max(now.Sub(st.at), 0).Seconds())
}

// removeHandler deletes a removed handler's series, so that they do not
// linger and a handler added later under the same name starts afresh.
func (m *metrics) removeHandler(name string) {
	m.lag.DeleteLabelValues(name, "receive")
	m.lag.DeleteLabelValues(name, "commit")
	m.latency.DeleteLabelValues(name)
}

func (m *metrics) event(t client.EventType) {
	switch t {
	case client.Added:
		m.added.Add(1)
	case client.Modified:
		m.modified.Add(1)
	case client.Deleted:
		m.deleted.Add(1)
	case client.Bookmark:
		m.bookmarks.Add(1)
	}
}

// ErrDuplicateName is the error (wrapped) of New, and of Factory.Err, for
// an informer whose name another informer already uses on the same
// prometheus.Registerer (Options.Name, Options.Metrics).
var ErrDuplicateName = errors.New("another informer of that name exports its metrics to this registerer")

// descs are one informer's descriptors: its name is a constant label, so
// that any number of informers export to one registry, each with its own
// series, and a registry refuses a second informer of the same name.
type descs struct {
	objects, events, lists, watches, relists, restarts, errors *prometheus.Desc
	backlog, delivered, coalesced                              *prometheus.Desc
	refused, deltas, deltaFailures                             *prometheus.Desc
}

func newDescs(name string) descs {
	informer := prometheus.Labels{"informer": name}
	desc := func(fqName, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(fqName, help, labels, informer)
	}
	return descs{
		objects: desc("objwatch_informer_objects", "Objects in the informer's cache."),
		events:  desc("objwatch_informer_watch_events_total", "Watch events received, by type.", "type"),
		lists:   desc("objwatch_informer_lists_total", "Lists (initial and relists after 410 Gone) started."),
		watches: desc("objwatch_informer_watches_total", "Watch requests started."),
		relists: desc("objwatch_informer_relists_total",
			"Lists after the first: relists because the server had compacted the history the watch needed (410 Gone)."),
		restarts: desc("objwatch_informer_watch_restarts_total",
			"Watch requests after the first: resumptions after a disconnect or the server's timeout, and watches after a relist."),
		errors: desc("objwatch_informer_errors_total", "Failed lists and watches (each is retried after a backoff)."),
		deltas: desc("objwatch_informer_delta_events_total",
			"Delta events (Options.Deltas): MODIFIED events carrying a JSON Patch, applied to the cached object."),
		deltaFailures: desc("objwatch_informer_delta_failures_total",
			"Delta events (Options.Deltas) that did not apply to the cached object, each followed by a relist."),
		backlog:   desc("objwatch_informer_handler_backlog", "Notifications queued for a handler and not yet delivered.", "handler"),
		delivered: desc("objwatch_informer_handler_delivered_total", "Notifications delivered to a handler.", "handler"),
		coalesced: desc("objwatch_informer_handler_coalesced_total",
			"Notifications merged into an older one for the same object because the handler's backlog was over its bound.", "handler"),
		refused: desc("objwatch_informer_refused",
			`1 while the server refuses the informer's list or watch (403 or 401) in a namespace ("" for all namespaces), else 0.`,
			"namespace", "verb"),
	}
}

// collector exports one informer's metrics. Its descriptors never change,
// so that Unregister finds it. Collect may run at any time, concurrently
// with the informer: it reads only atomics and what locks guard.
type collector[T client.Object] struct {
	inf *SharedInformer[T]
	d   descs
}

// exportMetrics makes i's metrics and registers them with reg; on error i
// is left without metrics. It must be called before i is shared.
func (i *SharedInformer[T]) exportMetrics(reg prometheus.Registerer) error {
	i.metrics.newHistograms(i.name)
	c := collector[T]{inf: i, d: newDescs(i.name)}
	if err := reg.Register(c); err != nil {
		i.metrics.lag, i.metrics.latency = nil, nil
		if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
			return fmt.Errorf("informer %s: metrics: %w (%w)", i.name, ErrDuplicateName, err)
		}
		return fmt.Errorf("informer %s: metrics: %w", i.name, err)
	}
	for _, r := range i.refls {
		r.stamps = true
	}
	i.unregister = func() { reg.Unregister(c) }
	return nil
}

func (c collector[T]) Describe(ch chan<- *prometheus.Desc) {
	d := &c.d
	for _, desc := range []*prometheus.Desc{d.objects, d.events, d.lists, d.watches, d.relists, d.restarts, d.errors, d.backlog, d.delivered, d.coalesced, d.refused, d.deltas, d.deltaFailures} {
		ch <- desc
	}
	m := &c.inf.metrics
	m.lag.Describe(ch)
	m.latency.Describe(ch)
}

func (c collector[T]) Collect(ch chan<- prometheus.Metric) {
	i, d := c.inf, &c.d
	m := &i.metrics
	ch <- prometheus.MustNewConstMetric(d.objects, prometheus.GaugeValue, float64(i.store.Len()))
	for t, v := range map[string]*atomic.Uint64{"ADDED": &m.added, "MODIFIED": &m.modified, "DELETED": &m.deleted, "BOOKMARK": &m.bookmarks} {
		ch <- prometheus.MustNewConstMetric(d.events, prometheus.CounterValue, float64(v.Load()), t)
	}
	ch <- prometheus.MustNewConstMetric(d.lists, prometheus.CounterValue, float64(m.lists.Load()))
	ch <- prometheus.MustNewConstMetric(d.watches, prometheus.CounterValue, float64(m.watches.Load()))
	ch <- prometheus.MustNewConstMetric(d.relists, prometheus.CounterValue, float64(m.relists.Load()))
	ch <- prometheus.MustNewConstMetric(d.restarts, prometheus.CounterValue, float64(m.restarts.Load()))
	ch <- prometheus.MustNewConstMetric(d.errors, prometheus.CounterValue, float64(m.errors.Load()))
	ch <- prometheus.MustNewConstMetric(d.deltas, prometheus.CounterValue, float64(m.deltas.Load()))
	ch <- prometheus.MustNewConstMetric(d.deltaFailures, prometheus.CounterValue, float64(m.deltaFailures.Load()))
	for _, r := range i.refls {
		e := r.refused.Load()
		for _, verb := range [...]string{"list", "watch"} {
			v := 0.0
			if e != nil && e.Verb == verb {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(d.refused, prometheus.GaugeValue, v, r.namespace, verb)
		}
	}
	for _, r := range i.registrations() {
		s := r.q.stats()
		ch <- prometheus.MustNewConstMetric(d.backlog, prometheus.GaugeValue, float64(s.backlog), r.name)
		ch <- prometheus.MustNewConstMetric(d.delivered, prometheus.CounterValue, float64(s.delivered), r.name)
		ch <- prometheus.MustNewConstMetric(d.coalesced, prometheus.CounterValue, float64(s.coalesced), r.name)
	}
	m.lag.Collect(ch)
	m.latency.Collect(ch)
}
