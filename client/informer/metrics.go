package informer

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/objwatch/objwatch/client"
)

// metrics counts what one informer does. The hot path only touches
// atomics; the collector reads them, and the handler queues' lengths, when
// the registry is scraped.
type metrics struct {
	added, modified, deleted, bookmarks atomic.Uint64
	lists, watches, errors              atomic.Uint64
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
	for _, d := range []*prometheus.Desc{descObjects, descEvents, descLists, descWatches, descErrors, descBacklog, descDelivered, descCoalesced} {
		ch <- d
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
	ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(m.errors.Load()), name)
	for _, r := range i.registrations() {
		s := r.q.stats()
		ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, float64(s.backlog), name, r.name)
		ch <- prometheus.MustNewConstMetric(descDelivered, prometheus.CounterValue, float64(s.delivered), name, r.name)
		ch <- prometheus.MustNewConstMetric(descCoalesced, prometheus.CounterValue, float64(s.coalesced), name, r.name)
	}
}
