package change_test

import (
	"context"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

// Change intelligence on an objwatch informer: handlers see each new
// content once, react to the fields they care about with the diff at
// hand, and local state derived from the cache is checked for drift.
// (Compiled, not run: it needs a server.)
func Example_informer() {
	ctx := context.Background()
	cfg, err := client.Default()
	if err != nil {
		panic(err)
	}
	rc, err := client.New(cfg)
	if err != nil {
		panic(err)
	}
	pods := client.NewClient[*corev1.Pod](rc, client.Resource{
		GVR: corev1.SchemeGroupVersion.WithResource("pods"), Namespaced: true, Kind: "Pod",
	})
	inf, err := informer.New(pods, informer.Options[*corev1.Pod]{})
	if err != nil {
		panic(err)
	}

	reg := prometheus.NewRegistry()
	dedup, err := change.NewDedup[informer.Key](change.DedupOptions{Registerer: reg, Name: "pods"})
	if err != nil {
		panic(err)
	}
	images := change.MustFilter("spec.containers[*].image")

	// Local state: which node each pod runs on.
	lister := inf.Lister()
	nodes, err := change.NewStateSyncer(change.SyncerOptions[informer.Key, *corev1.Pod, string]{
		Source: change.SourceFuncs[informer.Key, *corev1.Pod]{
			ListFunc: func() []*corev1.Pod { return lister.List("", nil) },
			GetFunc:  func(k informer.Key) (*corev1.Pod, bool) { return lister.Get(k.Namespace, k.Name) },
		},
		Key:    func(p *corev1.Pod) informer.Key { return informer.KeyOf(p) },
		Derive: func(p *corev1.Pod) (string, bool) { return p.Spec.NodeName, p.Spec.NodeName != "" },
		OnDrift: func(drift []change.Drift[informer.Key, string]) {
			for _, d := range drift {
				slog.Warn("drift", "pod", d.Key, "kind", d.Kind, "paths", d.Diff.Paths())
			}
		},
		Repair: true,
	})
	if err != nil {
		panic(err)
	}

	_, err = inf.AddHandler(informer.HandlerFuncs[*corev1.Pod]{
		Add: func(p *corev1.Pod, _ bool) {
			dedup.Fresh(informer.KeyOf(p), p)
			nodes.Sync(informer.KeyOf(p))
		},
		Update: func(old, new *corev1.Pod) {
			if !dedup.Fresh(informer.KeyOf(new), new) {
				return // a resync, a relist replay, a write that changed nothing
			}
			nodes.Sync(informer.KeyOf(new))
			d := change.Between(old, new)
			for _, c := range images.Changes(d) {
				slog.Info("image", "pod", informer.KeyOf(new), "path", c.Path.String(), "old", c.Old, "new", c.New)
			}
		},
		Delete: func(p *corev1.Pod, _ bool) {
			dedup.Forget(informer.KeyOf(p))
			nodes.Sync(informer.KeyOf(p))
		},
	}, informer.HandlerOptions{Name: "images"})
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = nodes.Run(ctx) })
	_ = inf.Run(ctx) // until ctx ends
	wg.Wait()
}
