package informer_test

import (
	"context"
	"fmt"
	"log"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

func ExampleSharedInformer() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, _ := client.Default()
	rc, _ := client.New(cfg)
	pods := client.NewClient[*corev1.Pod](rc, client.Resource{
		GVR: corev1.SchemeGroupVersion.WithResource("pods"), Namespaced: true, Kind: "Pod",
	})
	inf, err := informer.New(pods, informer.Options[*corev1.Pod]{
		Indexers: informer.Indexers[*corev1.Pod]{
			"node": func(p *corev1.Pod) []string { return []string{p.Spec.NodeName} },
			"owner": func(p *corev1.Pod) []string {
				var uids []string
				for _, ref := range p.OwnerReferences {
					uids = append(uids, string(ref.UID))
				}
				return uids
			},
		},
		Metrics: prometheus.DefaultRegisterer,
	})
	if err != nil {
		log.Fatal(err)
	}
	reg, err := inf.AddHandler(informer.HandlerFuncs[*corev1.Pod]{
		Update: func(old, new *corev1.Pod) {
			if old.Status.Phase != new.Status.Phase {
				fmt.Println(new.Name, old.Status.Phase, "->", new.Status.Phase)
			}
		},
		Delete: func(p *corev1.Pod, finalStateUnknown bool) { fmt.Println(p.Name, "gone") },
	}, informer.HandlerOptions{Name: "phases", Bound: 10000})
	if err != nil {
		log.Fatal(err)
	}
	go inf.Run(ctx) // returns after ctx ends, once its goroutines ended
	if err := informer.WaitForSync(ctx, reg.HasSynced); err != nil {
		log.Fatal(err)
	}
	onNode, _ := inf.Lister().ByIndex("node", "node-1")
	web := inf.Lister().List("default", labels.SelectorFromSet(labels.Set{"app": "web"}))
	fmt.Println(len(onNode), len(web))
}

func ExampleFactory() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, _ := client.Default()
	rc, _ := client.New(cfg)
	f := informer.NewFactory(rc, informer.FactoryOptions{})
	cms := client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespaced: true, Kind: "ConfigMap"}
	// Two parts of a program asking for the same resource and selection
	// share one informer: one watch, one cache.
	a := informer.Shared[*corev1.ConfigMap](f, cms, informer.Selection{Namespace: "default"})
	b := informer.Shared[*corev1.ConfigMap](f, cms, informer.Selection{Namespace: "default"})
	fmt.Println(a == b)
	go f.Run(ctx)
	if err := f.WaitForSync(ctx); err != nil {
		log.Fatal(err)
	}
}
