package health

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/objwatch/objwatch/storage"
)

// Alarms follows the alarms of a store's cluster (etcd's NOSPACE when its
// database reached its quota, CORRUPT): Run asks every Interval, Err says
// which are raised (for /readyz), Collector exports them. A store that
// cannot report alarms (not a storage.AlarmLister) has none. Safe for
// concurrent use; Run's goroutine is its caller's.
type Alarms struct {
	lister   storage.AlarmLister
	interval time.Duration
	log      *slog.Logger
	raised   atomic.Pointer[[]storage.Alarm]
}

// NewAlarms follows store's alarms every interval (default 5 s).
func NewAlarms(store storage.Interface, interval time.Duration, log *slog.Logger) *Alarms {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	if log == nil {
		log = slog.Default()
	}
	a := &Alarms{interval: interval, log: log}
	a.lister, _ = store.(storage.AlarmLister)
	a.raised.Store(&[]storage.Alarm{})
	return a
}

// Run asks for the alarms every interval until ctx ends (at once without
// a lister). A failed ask keeps the last answer: losing etcd is the
// health Monitor's to report.
func (a *Alarms) Run(ctx context.Context) {
	if a.lister == nil {
		return
	}
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		a.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (a *Alarms) poll(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, a.interval)
	defer cancel()
	got, err := a.lister.Alarms(pctx)
	if err != nil {
		return
	}
	was := *a.raised.Load()
	a.raised.Store(&got)
	switch {
	case len(got) > 0 && describe(got) != describe(was):
		a.log.Error("etcd alarms raised", "alarms", describe(got))
	case len(got) == 0 && len(was) > 0:
		a.log.Info("etcd alarms cleared")
	}
}

// Raised is the alarms of the last answer.
func (a *Alarms) Raised() []storage.Alarm { return *a.raised.Load() }

// Err is nil while no alarm is raised, else what they mean.
func (a *Alarms) Err() error {
	got := a.Raised()
	if len(got) == 0 {
		return nil
	}
	msg := "etcd alarm " + describe(got)
	for _, al := range got {
		if al.Kind == "NOSPACE" {
			msg += ": the database reached its quota and etcd refuses writes (reads and watches go on) until it is compacted, defragmented and the alarm disarmed"
			break
		}
	}
	return fmt.Errorf("%s", msg)
}

func describe(as []storage.Alarm) string {
	parts := make([]string, 0, len(as))
	for _, al := range as {
		parts = append(parts, fmt.Sprintf("%s on member %x", al.Kind, al.Member))
	}
	return strings.Join(parts, ", ")
}

// Collector exports objwatch_etcd_alarms: 1 for each kind raised on some
// member (NOSPACE, CORRUPT), 0 otherwise.
func (a *Alarms) Collector() prometheus.Collector {
	return alarmCollector{a}
}

type alarmCollector struct{ a *Alarms }

var alarmDesc = prometheus.NewDesc("objwatch_etcd_alarms", "etcd alarms raised in the cluster (1: raised on some member), by kind.", []string{"alarm"}, nil)

func (c alarmCollector) Describe(ch chan<- *prometheus.Desc) { ch <- alarmDesc }

func (c alarmCollector) Collect(ch chan<- prometheus.Metric) {
	raised := map[string]bool{"NOSPACE": false, "CORRUPT": false}
	for _, al := range c.a.Raised() {
		raised[al.Kind] = true
	}
	for kind, on := range raised {
		v := 0.0
		if on {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(alarmDesc, prometheus.GaugeValue, v, kind)
	}
}
