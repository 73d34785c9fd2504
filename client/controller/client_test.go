package controller_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/controller"
	"github.com/objwatch/objwatch/client/workqueue"
)

// TestReadYourWrites: every item adds one to a counter ConfigMap it reads
// from the cache. Read-your-writes makes each read see the previous
// item's write: no conflict, and the count is exact. Without it, reads
// right after a write see the old counter and the update conflicts.
func TestReadYourWrites(t *testing.T) {
	e := startEnv(t)
	for _, ryw := range []bool{true, false} {
		t.Run(fmt.Sprint("ryw=", ryw), func(t *testing.T) {
			ns := "default"
			if !ryw {
				ns = "kube-public"
			}
			const items = 20
			e.create(t, ns, "total", map[string]string{"n": "0"})
			for i := range items {
				e.create(t, ns, fmt.Sprint("item-", i), nil)
			}
			inf := e.configMapInformer(t, ns)
			var (
				cl        *controller.Client[CM]
				mu        sync.Mutex
				counted   = map[string]bool{}
				conflicts atomic.Int32
			)
			c, err := controller.NewBuilder("ryw").For(controller.NewSource(inf)).
				WithOptions(controller.Options{DisableReadYourWrites: !ryw, Queue: workqueue.Options{BaseDelay: time.Millisecond}}).
				Complete(controller.Func[controller.Request](func(ctx context.Context, r controller.Request) (controller.Result, error) {
					mu.Lock()
					done := r.Name == "total" || counted[r.Name]
					mu.Unlock()
					if done {
						return controller.Result{}, nil
					}
					total, ok, err := cl.Get(ctx, ns, "total")
					if err != nil || !ok {
						return controller.Result{}, fmt.Errorf("get total: %v %w", ok, err)
					}
					n, _ := strconv.Atoi(total.Data["n"])
					total = total.DeepCopy()
					total.Data["n"] = strconv.Itoa(n + 1)
					if _, err := cl.Update(ctx, total, metav1.UpdateOptions{}); err != nil {
						if errors.Is(err, client.ErrConflict) {
							conflicts.Add(1)
						}
						return controller.Result{}, err
					}
					mu.Lock()
					counted[r.Name] = true
					mu.Unlock()
					return controller.Result{}, nil
				}))
			if err != nil {
				t.Fatal(err)
			}
			cl = controller.NewClient(c, e.cms, inf)
			run(t, c)
			deadline := time.Now().Add(20 * time.Second)
			for {
				mu.Lock()
				n := len(counted)
				mu.Unlock()
				if n == items {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d items counted, want %d", n, items)
				}
				time.Sleep(5 * time.Millisecond)
			}
			total, err := e.cms.Get(testContext(t), ns, "total", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if total.Data["n"] != strconv.Itoa(items) {
				t.Errorf("total = %s, want %d", total.Data["n"], items)
			}
			switch n := conflicts.Load(); {
			case ryw && n != 0:
				t.Errorf("with read-your-writes: %d conflicts, want 0", n)
			case !ryw && n == 0:
				t.Errorf("without read-your-writes: no conflicts; the test no longer shows what it guards against")
			}
			t.Logf("read-your-writes %v: %d conflicts", ryw, conflicts.Load())
		})
	}
}

// TestStaleCacheGuard: a reconcile writes its object and asks to be
// called again at once; it reads the object straight from the informer's
// cache, which is stale right after the write. The guard puts the next
// reconcile off until the cache has the write (counted); without it, the
// reconcile acts on the stale object and conflicts.
func TestStaleCacheGuard(t *testing.T) {
	e := startEnv(t)
	for _, guard := range []bool{true, false} {
		t.Run(fmt.Sprint("guard=", guard), func(t *testing.T) {
			name := fmt.Sprint("x-", guard)
			e.create(t, "default", name, map[string]string{"step": "0"})
			inf := e.configMapInformer(t, "default")
			var (
				cl        *controller.Client[CM]
				conflicts atomic.Int32
				finished  = make(chan struct{})
			)
			const steps = 10
			reg := prometheus.NewPedanticRegistry()
			c, err := controller.NewBuilder("guard").For(controller.NewSource(inf)).
				WithOptions(controller.Options{DisableReadYourWrites: !guard, Metrics: reg, Queue: workqueue.Options{BaseDelay: time.Millisecond}}).
				Complete(controller.Func[controller.Request](func(ctx context.Context, r controller.Request) (controller.Result, error) {
					if r.Name != name {
						return controller.Result{}, nil
					}
					cm, ok := inf.Lister().Get(r.Namespace, r.Name) // no read-your-writes wait here
					if !ok {
						return controller.Result{}, errors.New("not cached")
					}
					n, _ := strconv.Atoi(cm.Data["step"])
					if n == steps {
						select {
						case <-finished:
						default:
							close(finished)
						}
						return controller.Result{}, nil
					}
					cm = cm.DeepCopy()
					cm.Data["step"] = strconv.Itoa(n + 1)
					if _, err := cl.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
						if errors.Is(err, client.ErrConflict) {
							conflicts.Add(1)
						}
						return controller.Result{}, err
					}
					return controller.Result{RequeueAfter: time.Microsecond}, nil
				}))
			if err != nil {
				t.Fatal(err)
			}
			cl = controller.NewClient(c, e.cms, inf)
			run(t, c)
			select {
			case <-finished:
			case <-time.After(20 * time.Second):
				t.Fatal("the object never reached the last step")
			}
			skips := counter(t, reg, "objwatch_controller_stale_cache_skips_total")
			t.Logf("guard %v: %d conflicts, %v skips", guard, conflicts.Load(), skips)
			if guard && (conflicts.Load() != 0 || skips == 0) {
				t.Errorf("with the guard: %d conflicts, %v skips; want 0 and some", conflicts.Load(), skips)
			}
			if !guard && (conflicts.Load() == 0 || skips != 0) {
				t.Errorf("without the guard: %d conflicts, %v skips; want some and 0", conflicts.Load(), skips)
			}
		})
	}
}

// TestReadYourWritesListDelete: a List right after the controller's
// create includes the new object, and a Get right after its delete no
// longer finds the object; without read-your-writes the cache, a watch
// event behind, answers with the state before the write.
func TestReadYourWritesListDelete(t *testing.T) {
	e := startEnv(t)
	for _, ryw := range []bool{true, false} {
		t.Run(fmt.Sprint("ryw=", ryw), func(t *testing.T) {
			ns := "default"
			if !ryw {
				ns = "kube-public"
			}
			inf := e.configMapInformer(t, ns)
			c, err := controller.NewBuilder(fmt.Sprint("ryw-list-", ryw)).For(controller.NewSource(inf)).
				WithOptions(controller.Options{DisableReadYourWrites: !ryw}).
				Complete(controller.Func[controller.Request](func(context.Context, controller.Request) (controller.Result, error) {
					return controller.Result{}, nil
				}))
			if err != nil {
				t.Fatal(err)
			}
			cl := controller.NewClient(c, e.cms, inf)
			ctx := testContext(t)
			waitUntil(t, "the informer's first list", func() bool { return inf.LastResourceVersion() != "" })
			const rounds = 10
			staleLists, staleGets := 0, 0
			for i := range rounds {
				name := fmt.Sprint("child-", i)
				if _, err := cl.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				list, err := cl.List(ctx, ns, labels.Everything())
				if err != nil {
					t.Fatal(err)
				}
				if !slices.ContainsFunc(list, func(cm CM) bool { return cm.Name == name }) {
					staleLists++
				}
				waitUntil(t, "the object in the cache (so that Delete knows its uid)", func() bool {
					_, ok := inf.Lister().Get(ns, name)
					return ok
				})
				if err := cl.Delete(ctx, ns, name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				if _, ok, err := cl.Get(ctx, ns, name); err != nil {
					t.Fatal(err)
				} else if ok {
					staleGets++
				}
			}
			t.Logf("read-your-writes %v: %d of %d lists and %d of %d gets stale", ryw, staleLists, rounds, staleGets, rounds)
			switch {
			case ryw && (staleLists != 0 || staleGets != 0):
				t.Errorf("with read-your-writes: %d stale lists, %d stale gets, want none", staleLists, staleGets)
			case !ryw && staleLists == 0 && staleGets == 0:
				t.Errorf("without read-your-writes nothing was stale; the test no longer shows what it guards against")
			}
		})
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
