package server

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/encryption"
	"github.com/objwatch/objwatch/server/history"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/health"
	"github.com/objwatch/objwatch/storage/shard"
)

// StorageOverride puts one resource's objects on an etcd cluster of its
// own, as kube-apiserver's --etcd-servers-overrides does: its objects,
// watch cache, consistent reads' revisions and resourceVersions, author
// notes and the garbage collector's reads and watch of it go to Storage.
type StorageOverride struct {
	// Resource is a built-in resource ("" group for the core one).
	Resource schema.GroupResource
	Storage  storage.Interface
}

// cluster is one etcd cluster the server stores objects on: the main one
// (name "") or an override's.
type cluster struct {
	name    string // "" for the main cluster, else the resource ("events", "leases.coordination.k8s.io")
	raw     storage.Interface
	monitor *health.Monitor
	// shared runs the cluster's shared etcd watch (nil: none, see
	// Config.NoSharedWatch).
	shared func(ctx context.Context)
}

// suffix names c in a component's name: "" for the main cluster.
func (c *cluster) suffix() string {
	if c.name == "" {
		return ""
	}
	return " of " + c.name
}

// share makes the watches of c's stores without previous values share
// one etcd watch of prefix, if its raw store can (storage.WatchSharer).
func (c *cluster) share(cfg *Config, prefix string) {
	if ws, ok := c.raw.(storage.WatchSharer); ok && !cfg.NoSharedWatch {
		c.shared = ws.SharedWatch(prefix, cfg.Log)
	}
}

// check is the readiness check of c: its monitor's verdict, naming the
// cluster.
func (c *cluster) check() error {
	if err := c.monitor.Err(); err != nil {
		if c.name == "" {
			return err
		}
		return fmt.Errorf("the etcd cluster of %s: %w", c.name, err)
	}
	return nil
}

// openClusters builds each cluster's chain (the encrypting store, then
// the guard of its own health monitor, so that losing one cluster refuses
// only the requests that go to it) and the store every layer uses: the
// main cluster's guarded store, or with overrides a shard.Router over the
// guarded stores.
func (s *Server) openClusters(reg *registry.Registry) (store storage.Interface, atRest storage.RestReader, err error) {
	cfg := s.cfg
	monitor := func(st storage.Interface, log *slog.Logger) *health.Monitor {
		return health.New(st, health.Config{Interval: cfg.StorageProbeInterval, UnhealthyAfter: cfg.StorageUnhealthyAfter, Log: log})
	}
	mainEnc, err := encryption.Store(cfg.Storage, cfg.EncryptionProviderConfig)
	if err != nil {
		return nil, nil, err
	}
	s.clusters = []*cluster{{raw: cfg.Storage, monitor: monitor(mainEnc, cfg.Log)}}
	// The history recorder watches every key of the main cluster; the
	// watch caches, the objects' keys.
	mainPrefix := registry.Root
	if cfg.History.Dir != "" {
		mainPrefix = history.Prefix
	}
	s.clusters[0].share(&cfg, mainPrefix)
	atRest, _ = mainEnc.(storage.RestReader)
	if len(cfg.StorageOverrides) == 0 {
		return s.clusters[0].monitor.Store(), atRest, nil
	}
	var routes []shard.Route
	for _, o := range cfg.StorageOverrides {
		prefix, err := overridePrefix(reg, o.Resource)
		if err != nil {
			return nil, nil, err
		}
		if o.Storage == nil {
			return nil, nil, fmt.Errorf("etcd servers override of %s: no storage", o.Resource)
		}
		enc, err := encryption.Store(o.Storage, cfg.EncryptionProviderConfig)
		if err != nil {
			return nil, nil, fmt.Errorf("etcd servers override of %s: %w", o.Resource, err)
		}
		c := &cluster{name: o.Resource.String(), raw: o.Storage, monitor: monitor(enc, cfg.Log.With("etcd", o.Resource.String()))}
		c.share(&cfg, registry.Root)
		s.clusters = append(s.clusters, c)
		routes = append(routes, shard.Route{Name: c.name, Prefix: prefix, Store: c.monitor.Store()})
	}
	r, err := shard.New(s.clusters[0].monitor.Store(), routes...)
	if err != nil {
		return nil, nil, err
	}
	return r, r, nil
}

// overridePrefix is the storage prefix of gr, a built-in resource.
func overridePrefix(reg *registry.Registry, gr schema.GroupResource) (string, error) {
	for _, res := range reg.Resources() {
		if res.GVR().GroupResource() == gr && !res.Review {
			return res.StoragePrefix, nil
		}
	}
	return "", fmt.Errorf("etcd servers override: the server has no resource %q", gr)
}

// storageChecks are the readiness checks of the clusters: "etcd" for the
// main one and, as kube-apiserver names them, "etcd-override-N" for the
// Nth override's.
func (s *Server) storageChecks() []readyCheck {
	checks := make([]readyCheck, len(s.clusters))
	for i, c := range s.clusters {
		checks[i] = readyCheck{"etcd", c.check}
		if i > 0 {
			checks[i].name = fmt.Sprintf("etcd-override-%d", i-1)
		}
	}
	return checks
}

// healthMetrics are the storage monitors' metrics: those of the main
// cluster without a label, each override's with its resource.
func (s *Server) healthMetrics() []prometheus.Collector {
	var cs []prometheus.Collector
	for _, c := range s.clusters {
		var labels prometheus.Labels
		which := "the server's etcd"
		if c.name != "" {
			labels, which = prometheus.Labels{"resource": c.name}, "the etcd cluster of the resource"
		}
		suffix := ""
		if c.name != "" {
			suffix = "_override"
		}
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "objwatch_storage" + suffix + "_available",
				Help:        "1 while " + which + " answers its probes, 0 while it counts as lost (requests get 503, watches end).",
				ConstLabels: labels,
			}, func() float64 {
				if c.monitor.Err() != nil {
					return 0
				}
				return 1
			}),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name:        "objwatch_storage" + suffix + "_outages_total",
				Help:        "Times " + which + " became unavailable (its probes failed for StorageUnhealthyAfter).",
				ConstLabels: labels,
			}, func() float64 { return float64(c.monitor.Outages()) }),
		)
	}
	return append(cs, s.alarms.Collector())
}
