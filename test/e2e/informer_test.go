package e2e_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/objwatch/objwatch/testenv"
)

// informerTarget is a resource the informer test drives through one client
// and watches through an informer.
type informerTarget struct {
	name string
	// start starts an informer on namespace ns; stop stops it and waits
	// for its goroutines.
	start func(t *testing.T, ns string) (inf cache.SharedIndexInformer, run func(stop <-chan struct{}), stop func())
	// create, update and delete change one object; update i must change it.
	create func(ctx context.Context, ns, name string) error
	update func(ctx context.Context, ns, name string, i int) error
	delete func(ctx context.Context, ns, name string) error
	// list returns name -> resourceVersion from a fresh list.
	list func(ctx context.Context, ns string) (map[string]string, error)
}

// eventCounts is what the handlers saw for one object.
type eventCounts struct{ Adds, Updates, Deletes int }

// recorder counts handler calls per object and checks that each update
// continues from the state the previous event delivered. Handlers run on
// the informer's goroutine, so the test reads it only under mu.
type recorder struct {
	mu       sync.Mutex
	counts   map[string]eventCounts
	lastRV   map[string]string
	problems []string
}

func newRecorder() *recorder {
	return &recorder{counts: map[string]eventCounts{}, lastRV: map[string]string{}}
}

func (r *recorder) handler() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			r.mu.Lock()
			defer r.mu.Unlock()
			m := mustMeta(obj)
			c := r.counts[m.GetName()]
			c.Adds++
			r.counts[m.GetName()] = c
			r.lastRV[m.GetName()] = m.GetResourceVersion()
		},
		UpdateFunc: func(oldObj, newObj any) {
			r.mu.Lock()
			defer r.mu.Unlock()
			o, n := mustMeta(oldObj), mustMeta(newObj)
			if last := r.lastRV[n.GetName()]; o.GetResourceVersion() != last {
				r.problems = append(r.problems, fmt.Sprintf("update of %s from rv %s, but the last event left it at %s", n.GetName(), o.GetResourceVersion(), last))
			}
			if o.GetResourceVersion() == n.GetResourceVersion() {
				r.problems = append(r.problems, fmt.Sprintf("update of %s without a new rv (%s)", n.GetName(), n.GetResourceVersion()))
			}
			c := r.counts[n.GetName()]
			c.Updates++
			r.counts[n.GetName()] = c
			r.lastRV[n.GetName()] = n.GetResourceVersion()
		},
		DeleteFunc: func(obj any) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				// Only a relist produces these; the script never forces one.
				r.problems = append(r.problems, fmt.Sprintf("delete of %s seen only as a tombstone", tomb.Key))
				obj = tomb.Obj
			}
			m := mustMeta(obj)
			c := r.counts[m.GetName()]
			c.Deletes++
			r.counts[m.GetName()] = c
			delete(r.lastRV, m.GetName())
		},
	}
}

func (r *recorder) snapshot() (map[string]eventCounts, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.counts), append([]string(nil), r.problems...)
}

func mustMeta(obj any) metav1.Object {
	m, err := meta.Accessor(obj)
	if err != nil {
		panic(fmt.Sprintf("informer delivered %T: %v", obj, err))
	}
	return m
}

// storeRVs returns name -> resourceVersion of an informer's store.
func storeRVs(inf cache.SharedIndexInformer) map[string]string {
	out := map[string]string{}
	for _, obj := range inf.GetStore().List() {
		m := mustMeta(obj)
		out[m.GetName()] = m.GetResourceVersion()
	}
	return out
}

func TestInformers(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t)
	ctx := t.Context()
	cs := typedClient(t, env)
	dc := dynamicClient(t, env)
	createWidgetCRD(ctx, t, env)

	targets := []informerTarget{{
		name: "ConfigMaps/typed",
		start: func(t *testing.T, ns string) (cache.SharedIndexInformer, func(<-chan struct{}), func()) {
			f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
			return f.Core().V1().ConfigMaps().Informer(), f.Start, f.Shutdown
		},
		create: func(ctx context.Context, ns, name string) error {
			_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err
		},
		update: func(ctx context.Context, ns, name string, i int) error {
			cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cm.Data = map[string]string{"i": fmt.Sprint(i)}
			_, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
			return err
		},
		delete: func(ctx context.Context, ns, name string) error {
			return cs.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
		},
		list: func(ctx context.Context, ns string) (map[string]string, error) {
			l, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			out := map[string]string{}
			for _, it := range l.Items {
				out[it.Name] = it.ResourceVersion
			}
			return out, nil
		},
	}, {
		name: "Widgets/dynamic",
		start: func(t *testing.T, ns string) (cache.SharedIndexInformer, func(<-chan struct{}), func()) {
			f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dc, 0, ns, nil)
			return f.ForResource(widgetGVR).Informer(), f.Start, f.Shutdown
		},
		create: func(ctx context.Context, ns, name string) error {
			_, err := dc.Resource(widgetGVR).Namespace(ns).Create(ctx, widget(name, map[string]any{"size": int64(1)}), metav1.CreateOptions{})
			return err
		},
		update: func(ctx context.Context, ns, name string, i int) error {
			patch := fmt.Sprintf(`{"spec":{"size":%d}}`, i+2)
			_, err := dc.Resource(widgetGVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			return err
		},
		delete: func(ctx context.Context, ns, name string) error {
			return dc.Resource(widgetGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
		},
		list: func(ctx context.Context, ns string) (map[string]string, error) {
			l, err := dc.Resource(widgetGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			out := map[string]string{}
			for _, it := range l.Items {
				out[it.GetName()] = it.GetResourceVersion()
			}
			return out, nil
		},
	}}

	for i, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			ns := fmt.Sprintf("informer-%d", i)
			createNamespace(ctx, t, cs, ns)
			// An object in another namespace must stay invisible.
			if err := tg.create(ctx, "default", "elsewhere"); err != nil {
				t.Fatalf("create(default/elsewhere) = %v", err)
			}
			want := map[string]eventCounts{}
			for _, n := range names("pre", 3) {
				if err := tg.create(ctx, ns, n); err != nil {
					t.Fatalf("create(%s) = %v", n, err)
				}
				want[n] = eventCounts{Adds: 1}
			}

			inf, run, shutdown := tg.start(t, ns)
			rec := newRecorder()
			reg, err := inf.AddEventHandler(rec.handler())
			if err != nil {
				t.Fatalf("AddEventHandler() = %v", err)
			}
			stop := make(chan struct{})
			run(stop)
			t.Cleanup(func() {
				close(stop)
				shutdown()
			})
			syncCtx, cancel := context.WithTimeout(ctx, waitTimeout)
			defer cancel()
			if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced, reg.HasSynced) {
				t.Fatalf("WaitForCacheSync() = false after %v", waitTimeout)
			}
			if got, want := len(inf.GetStore().List()), 3; got != want {
				t.Errorf("store after sync = %d objects, want %d", got, want)
			}

			// The script: creates, updates (object i gets i%3+1 of them,
			// pre-00 two), deletes of every other object and pre-01.
			objs := names("obj", 6)
			for _, n := range objs {
				if err := tg.create(ctx, ns, n); err != nil {
					t.Fatalf("create(%s) = %v", n, err)
				}
				want[n] = eventCounts{Adds: 1}
			}
			step := 0
			for round := range 3 {
				for i, n := range objs {
					if round > i%3 {
						continue
					}
					if err := tg.update(ctx, ns, n, step); err != nil {
						t.Fatalf("update(%s) = %v", n, err)
					}
					step++
					c := want[n]
					c.Updates++
					want[n] = c
				}
				if round < 2 {
					if err := tg.update(ctx, ns, "pre-00", step); err != nil {
						t.Fatalf("update(pre-00) = %v", err)
					}
					step++
					c := want["pre-00"]
					c.Updates++
					want["pre-00"] = c
				}
			}
			for _, n := range []string{"obj-00", "obj-02", "obj-04", "pre-01"} {
				if err := tg.delete(ctx, ns, n); err != nil {
					t.Fatalf("delete(%s) = %v", n, err)
				}
				c := want[n]
				c.Deletes++
				want[n] = c
			}
			// Events arrive in order: once the sentinel is seen, every
			// earlier change has been delivered.
			if err := tg.create(ctx, ns, "sentinel"); err != nil {
				t.Fatalf("create(sentinel) = %v", err)
			}
			want["sentinel"] = eventCounts{Adds: 1}
			poll(ctx, t, "the informer to see the sentinel", func(context.Context) (bool, error) {
				counts, _ := rec.snapshot()
				return counts["sentinel"].Adds > 0, nil
			})

			counts, problems := rec.snapshot()
			if diff := cmp.Diff(want, counts); diff != "" {
				t.Errorf("handler calls per object (-want +got):\n%s", diff)
			}
			for _, p := range problems {
				t.Errorf("handler: %s", p)
			}
			fresh, err := tg.list(ctx, ns)
			if err != nil {
				t.Fatalf("list() = %v", err)
			}
			if diff := cmp.Diff(fresh, storeRVs(inf)); diff != "" {
				t.Errorf("informer store differs from a fresh list (name -> rv, -list +store):\n%s", diff)
			}
		})
	}
}
