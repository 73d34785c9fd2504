package ctrlbench

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/controller"
	"github.com/objwatch/objwatch/client/informer"
)

// startObjwatch runs the controller on objwatch's client/controller, with
// a decoded or a compact (informer.Options.Compact) cache.
func startObjwatch(compact bool) startFunc {
	return func(ctx context.Context, o Options, rec *recorder) (side, error) {
		cfg, err := client.FromKubeconfig(o.Kubeconfig, "")
		if err != nil {
			return side{}, err
		}
		rest, err := client.New(cfg)
		if err != nil {
			return side{}, err
		}
		api := client.For[*corev1.ConfigMap](rest, configMaps)
		inf, err := informer.New(api, informer.Options[*corev1.ConfigMap]{Namespace: o.Namespace, Compact: compact})
		if err != nil {
			return side{}, err
		}
		var cms *controller.Client[*corev1.ConfigMap]
		ctrl, err := controller.NewBuilder("bench").For(controller.Watch(inf)).
			WithOptions(controller.Options{MaxConcurrentReconciles: o.Workers}).
			Complete(controller.Func[controller.Request](func(ctx context.Context, req controller.Request) (controller.Result, error) {
				cm, ok, err := cms.Get(ctx, req.Namespace, req.Name)
				if err != nil || !ok {
					return controller.Result{}, err
				}
				gen, write := rec.reconcile(cm)
				if !write {
					return controller.Result{}, nil
				}
				if !compact { // a compact cache's reads are the caller's own
					cm = cm.DeepCopy()
				}
				annotate(cm, gen)
				if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
					rec.errors.Add(1)
					return controller.Result{}, fmt.Errorf("update: %w", err)
				}
				rec.wrote(cm)
				return controller.Result{}, nil
			}))
		if err != nil {
			return side{}, err
		}
		cms = controller.ClientFor(ctrl, api, inf)
		ctx, cancel := context.WithCancel(ctx)
		infDone, ctrlDone := make(chan error, 1), make(chan error, 1)
		go func() { infDone <- inf.Run(ctx) }()
		go func() { ctrlDone <- ctrl.Run(ctx) }()
		return side{stop: func() error {
			cancel()
			err := errors.Join(<-ctrlDone, ignoreCanceled(<-infDone))
			rest.CloseIdleConnections()
			return err
		}}, nil
	}
}

func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
