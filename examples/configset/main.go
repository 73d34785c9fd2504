// Command configset is an example operator built on objwatch's client
// library: it keeps a ConfigSet's ConfigMaps in sync with its template.
// See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/controller"
	"github.com/objwatch/objwatch/client/informer"
	"github.com/objwatch/objwatch/client/leaderelection"
)

var configMaps = client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap"}

func main() {
	var o options
	flag.StringVar(&o.namespace, "namespace", "", "namespace to watch (default all)")
	flag.IntVar(&o.workers, "workers", 2, "concurrent reconciles")
	flag.BoolVar(&o.leaderElect, "leader-elect", false, "run only while holding the Lease kube-system/configset-operator (for several replicas)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	o.log = log

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := start(ctx, o); err != nil {
		log.Error("configset", "err", err)
		os.Exit(1)
	}
}

// options are the operator's settings.
type options struct {
	namespace   string
	workers     int
	leaderElect bool
	log         *slog.Logger
	// controller overrides the controller's options (tests); workers and
	// log above are filled in.
	controller controller.Options
}

// start connects (KUBECONFIG, ~/.kube/config or in-cluster), installs the
// CRD and runs the operator until ctx ends.
func start(ctx context.Context, o options) error {
	cfg, err := client.Default()
	if err != nil {
		return err
	}
	rest, err := client.New(cfg)
	if err != nil {
		return err
	}
	defer rest.CloseIdleConnections()
	if err := installCRD(ctx, rest); err != nil {
		return err
	}
	if !o.leaderElect {
		return run(ctx, rest, o)
	}
	// With several replicas, only the holder of the Lease reconciles: run
	// starts on gaining leadership and its context ends on losing it (run
	// stops all work before it returns), and the Lease is released on
	// shutdown so that another replica takes over at once.
	var runErr error
	err = leaderelection.Run(ctx, rest, leaderelection.Config{
		Namespace: "kube-system", Name: "configset-operator", ReleaseOnCancel: true, Log: o.log,
		Callbacks: leaderelection.Callbacks{OnStartedLeading: func(ctx context.Context) { runErr = run(ctx, rest, o) }},
	})
	return errors.Join(err, runErr)
}

// run runs the operator until ctx ends: two informers (the ConfigSets and
// the ConfigMaps carrying setLabel) and one controller. It returns once
// every goroutine it started has ended.
func run(ctx context.Context, rest *client.REST, o options) error {
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	factory := informer.NewFactory(rest, informer.FactoryOptions{Log: o.log})
	sets := informer.Shared[*ConfigSet](factory, configSets, informer.Selection{Namespace: o.namespace})
	// Caching is explicit: only the ConfigMaps of some ConfigSet.
	cms := informer.Shared[*corev1.ConfigMap](factory, configMaps, informer.Selection{Namespace: o.namespace, LabelSelector: setLabel})

	co := o.controller
	if o.workers > 0 {
		co.MaxConcurrentReconciles = o.workers
	}
	if co.Log == nil {
		co.Log = o.log
	}
	r := &reconciler{}
	ctrl, err := controller.NewBuilder("configset").
		For(controller.NewSource(sets)).
		Owns(controller.NewSource(cms)).
		WithOptions(co).
		Complete(r)
	if err != nil {
		return err
	}
	r.sets = controller.NewClient(ctrl, client.NewClient[*ConfigSet](rest, configSets), sets)
	r.cms = controller.NewClient(ctrl, client.NewClient[*corev1.ConfigMap](rest, configMaps), cms)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	factoryDone := make(chan error, 1)
	go func() { factoryDone <- factory.Run(ctx) }()
	o.log.Info("configset: running", "namespace", o.namespace, "workers", co.MaxConcurrentReconciles)
	err = ctrl.Run(ctx)
	cancel()
	if ferr := <-factoryDone; ferr != nil && !errors.Is(ferr, context.Canceled) {
		err = errors.Join(err, ferr)
	}
	return err
}

// installCRD creates the ConfigSet CRD if it is missing and waits until
// the server serves it (condition Established).
func installCRD(ctx context.Context, rest *client.REST) error {
	api := client.NewClient[*apiextensionsv1.CustomResourceDefinition](rest, crds)
	want := crd()
	if _, err := api.Create(ctx, want, metav1.CreateOptions{}); err != nil && !errors.Is(err, client.ErrAlreadyExists) {
		return fmt.Errorf("install crd: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		got, err := api.Get(ctx, "", want.Name, metav1.GetOptions{})
		if err == nil && established(got) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("crd %s not established: %w", want.Name, errors.Join(err, ctx.Err()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func established(c *apiextensionsv1.CustomResourceDefinition) bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}
