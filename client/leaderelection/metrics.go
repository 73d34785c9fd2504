package leaderelection

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are one Elector's series; nil fields without Config.Metrics.
type metrics struct {
	status   prometheus.Gauge
	slowpath prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, name string) (metrics, error) {
	if reg == nil {
		return metrics{}, nil
	}
	status := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leader_election_master_status",
		Help: "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
	}, []string{"name"})
	slowpath := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leader_election_slowpath_total",
		Help: "Total number of slow path exercised in renewing leader leases. 'name' is the string used to identify the lease. Please make sure to group by name.",
	}, []string{"name"})
	var err error
	if status, err = register(reg, status); err != nil {
		return metrics{}, err
	}
	if slowpath, err = register(reg, slowpath); err != nil {
		return metrics{}, err
	}
	m := metrics{status: status.WithLabelValues(name), slowpath: slowpath.WithLabelValues(name)}
	m.status.Set(0)
	return m, nil
}

// register registers c, or returns the collector already registered under
// its name (another Elector's), so that electors can share a registry.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

func (m metrics) leading(on bool) {
	if m.status == nil {
		return
	}
	if on {
		m.status.Set(1)
	} else {
		m.status.Set(0)
	}
}

func (m metrics) slowpathTaken() {
	if m.slowpath != nil {
		m.slowpath.Inc()
	}
}
