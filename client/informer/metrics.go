package informer

import (
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

var (
	descObjects = prometheus.NewDesc("objwatch_informer_objects",
		"Objects in the informer's cache.", []string{"informer"}, nil)
	descEvents = prometheus.NewDesc("objwatch_informer_watch_events_total",
		"Watch events received, by type.", []string{"informer", "type"}, nil)
	descLists = prometheus.NewDesc("objwatch_informer_lists_total",
		"Lists (initial and relists after 410 Gone) started.", []string{"informer"}, nil)
	descWatches = prometheus.NewDesc("objwatch_informer_watches_total",
		"Watch requests started.", []string{"informer"}, nil)
	descRelists = prometheus.NewDesc("objwatch_informer_relists_total",
		"Lists after the first: relists because the server had compacted the history the watch needed (410 Gone).", []string{"informer"}, nil)
	descRestarts = prometheus.NewDesc("objwatch_informer_watch_restarts_total",
		"Watch requests after the first: resumptions after a disconnect or the server's timeout, and watches after a relist.", []string{"informer"}, nil)
	descErrors = prometheus.NewDesc("objwatch_informer_errors_total",
		"Failed lists and watches (each is retried after a backoff).", []string{"informer"}, nil)
	descBacklog = prometheus.NewDesc("objwatch_informer_handler_backlog",
		"Notifications queued for a handler and not yet delivered.", []string{"informer", "handler"}, nil)
	descDelivered = prometheus.NewDesc("objwatch_informer_handler_delivered_total",
		"Notifications delivered to a handler.", []string{"informer", "handler"}, nil)
	descCoalesced = prometheus.NewDesc("objwatch_informer_handler_coalesced_total",
		"Notifications merged into an older one for the same object because the handler's backlog was over its bound.",
		[]string{"informer", "handler"}, nil)
)

// collector exports one informer's metrics.
type collector[T client.Object] struct {
	inf *SharedInformer[T]
}

func (c collector[T]) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descObjects, descEvents, descLists, descWatches, descRelists, descRestarts, descErrors, descBacklog, descDelivered, descCoalesced} {
		ch <- d
	}
	if m := &c.inf.metrics; m.lag != nil {
		m.lag.Describe(ch)
		m.latency.Describe(ch)
	}
}

func (c collector[T]) Collect(ch chan<- prometheus.Metric) {
	i := c.inf
	name := i.name
	m := &i.metrics
	ch <- prometheus.MustNewConstMetric(descObjects, prometheus.GaugeValue, float64(i.store.Len()), name)
	for t, v := range map[string]*atomic.Uint64{"ADDED": &m.added, "MODIFIED": &m.modified, "DELETED": &m.deleted, "BOOKMARK": &m.bookmarks} {
		ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(v.Load()), name, t)
	}
	ch <- prometheus.MustNewConstMetric(descLists, prometheus.CounterValue, float64(m.lists.Load()), name)
	ch <- prometheus.MustNewConstMetric(descWatches, prometheus.CounterValue, float64(m.watches.Load()), name)
	ch <- prometheus.MustNewConstMetric(descRelists, prometheus.CounterValue, float64(m.relists.Load()), name)
	ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(m.restarts.Load()), name)
	ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(m.errors.Load()), name)
	for _, r := range i.registrations() {
		s := r.q.stats()
		ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, float64(s.backlog), name, r.name)
		ch <- prometheus.MustNewConstMetric(descDelivered, prometheus.CounterValue, float64(s.delivered), name, r.name)
		ch <- prometheus.MustNewConstMetric(descCoalesced, prometheus.CounterValue, float64(s.coalesced), name, r.name)
	}
	if m.lag != nil {
		m.lag.Collect(ch)
		m.latency.Collect(ch)
	}
}
