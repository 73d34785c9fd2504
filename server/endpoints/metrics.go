package endpoints

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/objwatch/objwatch/server/watchstream"
)

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	watches  *prometheus.GaugeVec
	events   *prometheus.CounterVec
}

// newMetrics registers the server's metrics with reg (none when nil);
// window reports the current watch flush window, reads and mutations the
// in-flight limits, seats the execution seats, gate the delivery gate
// (nil: none).
func newMetrics(reg prometheus.Registerer, window func() time.Duration, reads, mutations *inFlight, seats *fairQueue, gate *watchstream.Gate) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "objwatch_apiserver_requests_total",
			Help: "API requests by verb, group, version, resource, subresource and HTTP code.",
		}, []string{"verb", "group", "version", "resource", "subresource", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "objwatch_apiserver_request_duration_seconds",
			Help:    "API request latency by verb, group, version, resource and subresource (watches: time to the first byte).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"verb", "group", "version", "resource", "subresource"}),
		watches: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "objwatch_apiserver_open_watches",
			Help: "Watches currently open, by group and resource.",
		}, []string{"group", "resource"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "objwatch_apiserver_watch_events_total",
			Help: "Watch events sent, by group, resource and type.",
		}, []string{"group", "resource", "type"}),
	}
	flushWindow := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "objwatch_apiserver_watch_flush_window_seconds",
		Help: "How long a busy watch's output currently waits to be batched (grows while the machine's CPUs are saturated).",
	}, func() float64 { return window().Seconds() })
	// kube-apiserver's name and labels for the same count.
	inflight := prometheus.NewDesc("apiserver_current_inflight_requests",
		"Requests holding a slot of the read-only or mutating in-flight limit.", []string{"request_kind"}, nil)
	current := collectorFunc{desc: inflight, collect: func(ch chan<- prometheus.Metric) {
		ch <- prometheus.MustNewConstMetric(inflight, prometheus.GaugeValue, float64(len(reads.slots)), "readOnly")
		ch <- prometheus.MustNewConstMetric(inflight, prometheus.GaugeValue, float64(len(mutations.slots)), "mutating")
	}}
	executing := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "objwatch_apiserver_executing_seats",
		Help: "Execution seats taken, by requests executing and by writes whose watch events the server is still delivering (--watch-event-cpu).",
	}, func() float64 { return float64(seats.taken()) })
	collectors := []prometheus.Collector{m.requests, m.latency, m.watches, m.events, flushWindow, current, executing}
	if gate != nil {
		collectors = append(collectors, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "objwatch_apiserver_watch_writer_slots",
			Help: "How many watches may write at once now (--watch-writers; by default one per CPU, one fewer while several users' requests share the server).",
		}, func() float64 { return float64(gate.Open()) }))
	}
	if reg != nil {
		for _, c := range collectors {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// collectorFunc is a collector of one metric family computed when
// gathered.
type collectorFunc struct {
	desc    *prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

type statusRecorder struct {
	http.ResponseWriter
	code  int
	start time.Time
	first time.Duration
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
		r.first = time.Since(r.start)
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.WriteHeader(http.StatusOK)
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (a *API) instrument(w http.ResponseWriter, info requestInfo, serve func(http.ResponseWriter)) {
	rec := &statusRecorder{ResponseWriter: w, start: time.Now()}
	serve(rec)
	if rec.code == 0 {
		rec.code = http.StatusOK
		rec.first = time.Since(rec.start)
	}
	d := time.Since(rec.start)
	if info.verb == "watch" {
		d = rec.first
	}
	g, v, r := info.gvr.Group, info.gvr.Version, info.gvr.Resource
	a.metrics.requests.WithLabelValues(info.verb, g, v, r, info.subresource, strconv.Itoa(rec.code)).Inc()
	a.metrics.latency.WithLabelValues(info.verb, g, v, r, info.subresource).Observe(d.Seconds())
}
