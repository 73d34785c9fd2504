// Command firsthour is what a newcomer writes in their first hour with
// objwatch's client library, and the README's quick-start. In one
// namespace it
//
//   - prints what users change in ConfigMaps, field by field, without the
//     fields every write changes (resourceVersion, managedFields) and
//     without updates that change only labels;
//   - mirrors every ConfigMap labelled mirror=true into a ConfigMap
//     <name>-mirror that it owns, so that deleting the original deletes the
//     mirror (the garbage collector follows the owner reference), and
//     removing the label removes it.
//
// It uses the kubeconfig of KUBECONFIG or ~/.kube/config (or the pod's
// service account); main_test.go runs it against testenv.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/controller"
	"github.com/objwatch/objwatch/client/informer"
)

// CM is the Go type of the objects watched.
type CM = *corev1.ConfigMap

var configMaps = client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap"}

// mirrored selects the ConfigMaps to mirror.
var mirrored = labels.SelectorFromSet(labels.Set{"mirror": "true"})

func main() {
	namespace := flag.String("namespace", "default", "the namespace to watch")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := client.Default() // KUBECONFIG, ~/.kube/config or in-cluster
	if err != nil {
		log.Fatal(err)
	}
	if err := Run(ctx, cfg, *namespace, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// Run prints the changes to the ConfigMaps of namespace to out and
// mirrors the labelled ones, until ctx ends.
func Run(ctx context.Context, cfg *client.Config, namespace string, out io.Writer) error {
	rc, err := client.New(cfg)
	if err != nil {
		return err
	}
	defer rc.CloseIdleConnections()
	cms := client.NewClient[CM](rc, configMaps)
	inf, err := informer.New(cms, informer.Options[CM]{Namespace: namespace})
	if err != nil {
		return err
	}

	// What users change, as diffs; label-only updates are left out.
	labelsOnly := change.OnlyFieldsChanged("metadata.labels")
	_, err = inf.AddHandler(informer.HandlerFuncs[CM]{
		Update: func(old, new CM) {
			if labelsOnly(old, new) {
				return
			}
			for _, c := range change.Between(old, new).Changes() {
				fmt.Fprintf(out, "%s/%s %s: %v -> %v\n", new.Namespace, new.Name, c.Path, c.Old, c.New)
			}
		},
	}, informer.HandlerOptions{Name: "print"})
	if err != nil {
		return err
	}

	// The mirrors: labelled ConfigMaps are the primaries; their mirrors,
	// ConfigMaps too, are owned and reconcile their owner.
	var mirrors *controller.Client[CM]
	ctrl, err := controller.NewBuilder("mirror").
		For(controller.NewSource(inf, change.LabelsMatch(mirrored))).
		Owns(controller.NewSource(inf)).
		Complete(controller.Func[controller.Request](func(ctx context.Context, req controller.Request) (controller.Result, error) {
			return controller.Result{}, reconcile(ctx, mirrors, req)
		}))
	if err != nil {
		return err
	}
	mirrors = controller.NewClient(ctrl, cms, inf)

	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	err = ctrl.Run(ctx)
	return errors.Join(err, <-done)
}

// reconcile makes the mirror of the ConfigMap req names match it: created
// or updated while the ConfigMap is labelled, deleted once it is not.
func reconcile(ctx context.Context, cms *controller.Client[CM], req controller.Request) error {
	src, ok, err := cms.Get(ctx, req.Namespace, req.Name)
	if err != nil {
		return err
	}
	name := req.Name + "-mirror"
	mirror, exists, err := cms.Get(ctx, req.Namespace, name)
	if err != nil {
		return err
	}
	if !ok || src.DeletionTimestamp != nil || !mirrored.Matches(labels.Set(src.Labels)) {
		if ok && exists && metav1.IsControlledBy(mirror, src) {
			err = cms.Delete(ctx, req.Namespace, name, metav1.DeleteOptions{})
		}
		return client.IgnoreNotFound(err) // gone already: nothing to do
	}
	if !exists {
		_, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: name,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(src, configMaps.GVK())}},
			Data: src.Data,
		}, metav1.CreateOptions{})
		return err
	}
	if maps.Equal(mirror.Data, src.Data) {
		return nil
	}
	mirror = mirror.DeepCopy() // the cache's copy is shared: never modify it
	mirror.Data = src.Data
	_, err = cms.Update(ctx, mirror, metav1.UpdateOptions{})
	return err
}
