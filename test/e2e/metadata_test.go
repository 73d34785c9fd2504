package e2e_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/objwatch/objwatch/testenv"
)

var configMapsGVR = corev1.SchemeGroupVersion.WithResource("configmaps")

// TestMetadataClient: client-go's metadata client (which asks for
// as=PartialObjectMetadata and PartialObjectMetadataList) gets, lists,
// watches and patches built-in and custom resources' metadata.
func TestMetadataClient(t *testing.T) {
	env := testenv.Start(t)
	ctx := t.Context()
	cs := typedClient(t, env)
	createWidgetCRD(ctx, t, env)
	createConfigMap(ctx, t, cs, "default", "meta-a", map[string]string{"app": "meta"}, map[string]string{"big": "data"})
	if _, err := dynamicClient(t, env).Resource(widgetGVR).Namespace("default").Create(ctx, widget("w1", map[string]any{"size": int64(3)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mc, err := metadata.NewForConfig(restConfig(t, env))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		gvr  schema.GroupVersionResource
		name string
	}{{configMapsGVR, "meta-a"}, {widgetGVR, "w1"}} {
		res := mc.Resource(c.gvr).Namespace("default")
		got, err := res.Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("metadata Get %s: %v", c.gvr.Resource, err)
		}
		if got.Name != c.name || got.UID == "" || got.ResourceVersion == "" || len(got.ManagedFields) == 0 {
			t.Errorf("metadata Get %s: %+v", c.gvr.Resource, got.ObjectMeta)
		}
		l, err := res.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("metadata List %s: %v", c.gvr.Resource, err)
		}
		if len(l.Items) != 1 || l.Items[0].Name != c.name || l.ResourceVersion == "" {
			t.Errorf("metadata List %s: %+v", c.gvr.Resource, l)
		}
		w, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
		if err != nil {
			t.Fatalf("metadata Watch %s: %v", c.gvr.Resource, err)
		}
		patched, err := res.Patch(ctx, c.name, types.MergePatchType, []byte(`{"metadata":{"labels":{"seen":"yes"}}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("metadata Patch %s: %v", c.gvr.Resource, err)
		}
		if patched.Labels["seen"] != "yes" {
			t.Errorf("metadata Patch %s: labels %v", c.gvr.Resource, patched.Labels)
		}
		select {
		case ev := <-w.ResultChan():
			p, ok := ev.Object.(*metav1.PartialObjectMetadata)
			if ev.Type != watch.Modified || !ok || p.Labels["seen"] != "yes" || p.ResourceVersion != patched.ResourceVersion {
				t.Errorf("metadata Watch %s: %s %#v", c.gvr.Resource, ev.Type, ev.Object)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("metadata Watch %s: no event", c.gvr.Resource)
		}
		w.Stop()
	}
}

// TestMetadataInformer: client-go's metadata informer syncs, and sees adds,
// updates and deletes, as PartialObjectMetadata.
func TestMetadataInformer(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithCancel(t.Context())
	cs := typedClient(t, env)
	createConfigMap(ctx, t, cs, "default", "before", nil, nil)
	mc, err := metadata.NewForConfig(restConfig(t, env))
	if err != nil {
		t.Fatal(err)
	}
	f := metadatainformer.NewSharedInformerFactory(mc, 0)
	inf := f.ForResource(configMapsGVR).Informer()
	var (
		mu     sync.Mutex
		events []string
	)
	record := func(what string, obj any) {
		p, ok := obj.(*metav1.PartialObjectMetadata)
		if !ok {
			t.Errorf("%s of a %T", what, obj)
			return
		}
		mu.Lock()
		events = append(events, what+" "+p.Name+" "+p.Labels["v"])
		mu.Unlock()
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { record("add", obj) },
		UpdateFunc: func(_, obj any) { record("update", obj) },
		DeleteFunc: func(obj any) { record("delete", obj) },
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	defer func() { cancel(); f.Shutdown() }()
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("metadata informer did not sync")
	}
	cm := createConfigMap(ctx, t, cs, "default", "after", map[string]string{"v": "1"}, nil)
	cm.Labels["v"] = "2"
	if _, err := cs.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps("default").Delete(ctx, "after", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"add before ", "add after 1", "update after 2", "delete after 2"}
	poll(ctx, t, "the metadata informer's events", func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(events) >= len(want), nil
	})
	mu.Lock()
	defer mu.Unlock()
	for i := range want {
		if events[i] != want[i] {
			t.Fatalf("events %q, want %q", events, want)
		}
	}
}

// TestControllerRuntimeOnlyMetadata: controller-runtime's client and cache
// read metadata only (PartialObjectMetadata, as builder.OnlyMetadata
// makes controllers watch), from objwatch's PartialObjectMetadata(List)
// answers and watches.
func TestControllerRuntimeOnlyMetadata(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithCancel(t.Context())
	cs := typedClient(t, env)
	createConfigMap(ctx, t, cs, "default", "cr-meta", map[string]string{"app": "cr"}, map[string]string{"k": "v"})
	cfg := restConfig(t, env)
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")

	c, err := ctrlclient.New(cfg, ctrlclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := &metav1.PartialObjectMetadata{}
	p.SetGroupVersionKind(gvk)
	if err := c.Get(ctx, ctrlclient.ObjectKey{Namespace: "default", Name: "cr-meta"}, p); err != nil {
		t.Fatalf("Get PartialObjectMetadata: %v", err)
	}
	if p.Labels["app"] != "cr" || p.UID == "" {
		t.Errorf("Get PartialObjectMetadata: %+v", p.ObjectMeta)
	}
	pl := &metav1.PartialObjectMetadataList{}
	pl.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if err := c.List(ctx, pl, ctrlclient.InNamespace("default"), ctrlclient.MatchingLabels{"app": "cr"}); err != nil {
		t.Fatalf("List PartialObjectMetadataList: %v", err)
	}
	if len(pl.Items) != 1 || pl.Items[0].Name != "cr-meta" {
		t.Errorf("List PartialObjectMetadataList: %+v", pl.Items)
	}

	ca, err := cache.New(cfg, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ca.Start(ctx) }()
	defer func() {
		// The server first: controller-runtime's metadata watches wrap
		// client-go's in a watch.Filter whose goroutine is stuck for ever
		// when the watch is stopped while its stream reports the
		// cancelled read as an ERROR event (a race in those libraries, with
		// any server). A server that ends the stream ends it cleanly.
		env.Stop()
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("cache.Start() = %v", err)
		}
	}()
	got := &metav1.PartialObjectMetadata{}
	got.SetGroupVersionKind(gvk)
	poll(ctx, t, "the metadata cache to have cr-meta", func(ctx context.Context) (bool, error) {
		err := ca.Get(ctx, ctrlclient.ObjectKey{Namespace: "default", Name: "cr-meta"}, got)
		return err == nil, nil
	})
	createConfigMap(ctx, t, cs, "default", "cr-meta-2", map[string]string{"app": "cr"}, nil)
	poll(ctx, t, "the metadata cache to see cr-meta-2 (a watch event)", func(ctx context.Context) (bool, error) {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
		if err := ca.List(ctx, l, ctrlclient.InNamespace("default"), ctrlclient.MatchingLabels{"app": "cr"}); err != nil {
			return false, err
		}
		return len(l.Items) == 2, nil
	})
}
