package ctrlbench

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// startControllerRuntime runs the controller on controller-runtime: a
// manager whose cache holds the namespace's ConfigMaps, its default
// (cached) client, the builder's controller with its default priority
// queue.
func startControllerRuntime(ctx context.Context, o Options, rec *recorder) (side, error) {
	ctrllog.SetLogger(logr.Discard())
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return side{}, err
	}
	cfg.QPS = -1 // no client-side rate limit, as objwatch's client
	skip := true
	mgr, err := manager.New(cfg, manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{o.Namespace: {}}},
		Controller:             config.Controller{SkipNameValidation: &skip},
		Logger:                 logr.Discard(),
	})
	if err != nil {
		return side{}, err
	}
	cl := mgr.GetClient()
	err = builder.ControllerManagedBy(mgr).For(&corev1.ConfigMap{}).Named("bench").
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: o.Workers}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			var cm corev1.ConfigMap
			if err := cl.Get(ctx, req.NamespacedName, &cm); err != nil {
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			gen, write := rec.reconcile(&cm)
			if !write {
				return reconcile.Result{}, nil
			}
			annotate(&cm, gen) // the cached client's Get made cm a copy
			if err := cl.Update(ctx, &cm); err != nil {
				rec.errors.Add(1)
				return reconcile.Result{}, fmt.Errorf("update: %w", err)
			}
			rec.wrote(&cm)
			return reconcile.Result{}, nil
		}))
	if err != nil {
		return side{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return side{stop: func() error { cancel(); return <-done }}, nil
}
