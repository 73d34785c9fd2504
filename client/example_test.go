package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/client"
)

func Example() {
	ctx := context.Background()
	cfg, err := client.Default() // KUBECONFIG, ~/.kube/config, or in-cluster
	if err != nil {
		log.Fatal(err)
	}
	rc, err := client.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	cms := client.NewClient[*corev1.ConfigMap](rc, client.Resource{
		GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap",
	})
	cm, err := cms.Get(ctx, "default", "settings", metav1.GetOptions{})
	switch {
	case errors.Is(err, client.ErrNotFound):
		cm, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"},
			Data:       map[string]string{"mode": "fast"},
		}, metav1.CreateOptions{})
	case err == nil:
		_, err = cms.Patch(ctx, "default", "settings", types.MergePatchType, []byte(`{"data":{"mode":"fast"}}`), metav1.PatchOptions{}, "")
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cm.Name)
}

// A custom resource with a Go type of your own: no code generation.
func ExampleNewClient_customResource() {
	type WidgetSpec struct {
		Size string `json:"size"`
	}
	type Widget struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              WidgetSpec `json:"spec"`
	}
	ctx := context.Background()
	cfg, _ := client.Default()
	rc, _ := client.New(cfg)
	// Resolve the resource through discovery.
	res, err := rc.ResourceFor(ctx, schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"})
	if err != nil {
		log.Fatal(err)
	}
	widgets := client.NewClient[*Widget](rc, res)
	list, err := widgets.List(ctx, "", metav1.ListOptions{LabelSelector: "tier=gold"})
	if err != nil {
		log.Fatal(err)
	}
	for _, w := range list.Items {
		fmt.Println(w.Name, w.Spec.Size)
	}
}

func ExampleWatcher() {
	ctx := context.Background()
	cfg, _ := client.Default()
	rc, _ := client.New(cfg)
	cms := client.NewClient[*corev1.ConfigMap](rc, client.Resource{
		GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap",
	})
	w, err := cms.Watch(ctx, "default", metav1.ListOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
	for ev, err := range w.Events() {
		if errors.Is(err, client.ErrGone) {
			break // too old: list again, then watch from the list's resourceVersion
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ev.Type, ev.Object.Name, ev.Object.ResourceVersion)
	}
}

func ExampleRetryOnConflict() {
	ctx := context.Background()
	cfg, _ := client.Default()
	rc, _ := client.New(cfg)
	cms := client.NewClient[*corev1.ConfigMap](rc, client.Resource{
		GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap",
	})
	err := client.RetryOnConflict(ctx, func() error {
		cm, err := cms.Get(ctx, "default", "counter", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cm.Data["n"] += "1"
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}
