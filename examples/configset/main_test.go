package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/controller"
	"github.com/objwatch/objwatch/client/workqueue"
	"github.com/objwatch/objwatch/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// api is the test's own view of the server, straight from the API.
type api struct {
	rest *client.REST
	sets *client.Client[*ConfigSet]
	cms  *client.Client[*corev1.ConfigMap]
}

func newAPI(t *testing.T, kubeconfig string, wrap func(http.RoundTripper) http.RoundTripper) *api {
	t.Helper()
	cfg, err := client.FromKubeconfig(kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg.WrapTransport = wrap
	rest, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rest.CloseIdleConnections)
	return &api{rest: rest, sets: client.NewClient[*ConfigSet](rest, configSets), cms: client.NewClient[*corev1.ConfigMap](rest, configMaps)}
}

// operator runs the operator on rest until the test ends (or the returned
// stop), and checks that it returned without error.
func operator(t *testing.T, rest *client.REST, o options) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if err := installCRD(ctx, rest); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run(ctx, rest, o) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("run() = %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("run did not return 30 s after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newSet(ns, name string, replicas int32, data map[string]string) *ConfigSet {
	return &ConfigSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: group + "/" + version, Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       ConfigSetSpec{Replicas: replicas, Template: ConfigMapTemplate{Labels: map[string]string{"app": name}, Data: data}},
	}
}

func (a *api) patchSpec(t *testing.T, ns, name, spec string) {
	t.Helper()
	if _, err := a.sets.Patch(testContext(t), ns, name, types.MergePatchType, []byte(`{"spec":`+spec+`}`), metav1.PatchOptions{}, ""); err != nil {
		t.Fatalf("patch %s spec %s: %v", name, spec, err)
	}
}

// waitConverged waits until the set's status reports its current
// generation Ready with every ConfigMap, and exactly its ConfigMaps exist
// with the template's data, labels and the set as controller.
func (a *api) waitConverged(t *testing.T, ns, name string) *ConfigSet {
	t.Helper()
	ctx := testContext(t)
	var why string
	for {
		set, err := a.sets.Get(ctx, ns, name, metav1.GetOptions{})
		if err == nil {
			if why = converged(ctx, a, set); why == "" {
				return set
			}
		} else {
			why = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("ConfigSet %s/%s did not converge: %s", ns, name, why)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func converged(ctx context.Context, a *api, set *ConfigSet) string {
	ready := meta.FindStatusCondition(set.Status.Conditions, conditionReady)
	switch {
	case set.Status.ObservedGeneration != set.Generation:
		return fmt.Sprintf("observedGeneration %d, generation %d", set.Status.ObservedGeneration, set.Generation)
	case ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != set.Generation:
		return fmt.Sprintf("Ready condition %+v", ready)
	case set.Status.ReadyReplicas != set.Spec.Replicas:
		return fmt.Sprintf("readyReplicas %d, want %d", set.Status.ReadyReplicas, set.Spec.Replicas)
	case !hasFinalizer(set):
		return "no finalizer"
	}
	l, err := a.cms.List(ctx, set.Namespace, metav1.ListOptions{LabelSelector: labels.Set{setLabel: set.Name}.String()})
	if err != nil {
		return err.Error()
	}
	if len(l.Items) != int(set.Spec.Replicas) {
		return fmt.Sprintf("%d ConfigMaps, want %d", len(l.Items), set.Spec.Replicas)
	}
	for _, cm := range l.Items {
		want := desired(set, 0)
		if i, ok := index(set, cm.Name); !ok || i >= set.Spec.Replicas {
			return "unexpected ConfigMap " + cm.Name
		}
		if !maps.Equal(cm.Data, want.Data) || !maps.Equal(cm.Labels, want.Labels) {
			return fmt.Sprintf("ConfigMap %s has data %v labels %v, want %v %v", cm.Name, cm.Data, cm.Labels, want.Data, want.Labels)
		}
		if ref := metav1.GetControllerOf(cm); ref == nil || ref.UID != set.UID || ref.Kind != kind {
			return fmt.Sprintf("ConfigMap %s controller %+v", cm.Name, ref)
		}
	}
	return ""
}

// waitGone waits until the set and its ConfigMaps are gone.
func (a *api) waitGone(t *testing.T, ns, name string) {
	t.Helper()
	ctx := testContext(t)
	for {
		_, err := a.sets.Get(ctx, ns, name, metav1.GetOptions{})
		l, lerr := a.cms.List(ctx, ns, metav1.ListOptions{LabelSelector: labels.Set{setLabel: name}.String()})
		if err != nil && lerr == nil && len(l.Items) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("ConfigSet %s/%s: get %v, %d ConfigMaps left", ns, name, err, len(l.Items))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestConfigSet: create, scale up and down, edit the template, delete.
func TestConfigSet(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env.Kubeconfig, nil)
	operator(t, a.rest, options{})

	ns, name := "default", "web"
	if _, err := a.sets.Create(testContext(t), newSet(ns, name, 3, map[string]string{"color": "blue"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	set := a.waitConverged(t, ns, name)
	t.Logf("3 replicas: generation %d, status %+v", set.Generation, set.Status)

	a.patchSpec(t, ns, name, `{"replicas":5}`)
	a.waitConverged(t, ns, name)
	a.patchSpec(t, ns, name, `{"replicas":2}`)
	a.waitConverged(t, ns, name)
	a.patchSpec(t, ns, name, `{"template":{"data":{"color":"green","size":"xl"}}}`)
	set = a.waitConverged(t, ns, name)
	if set.Spec.Template.Data["color"] != "green" {
		t.Fatalf("template = %v, want the edit", set.Spec.Template.Data)
	}

	// A ConfigMap changed behind the operator's back is put back.
	cm, err := a.cms.Get(testContext(t), ns, name+"-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["color"] = "red"
	if _, err := a.cms.Update(testContext(t), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.waitConverged(t, ns, name)

	// Delete: the finalizer holds the set until the operator deleted its
	// ConfigMaps; then the set goes.
	if err := a.sets.Delete(testContext(t), ns, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	a.waitGone(t, ns, name)
}

// TestFinalizerWithoutOperator: the finalizer is what deletes: with the
// operator stopped, a deleted set stays (being deleted) with its
// ConfigMaps, and goes once the operator runs again.
func TestFinalizerWithoutOperator(t *testing.T) {
	env := testenv.Start(t)
	a := newAPI(t, env.Kubeconfig, nil)
	stop := operator(t, a.rest, options{})
	ns, name := "default", "held"
	if _, err := a.sets.Create(testContext(t), newSet(ns, name, 2, map[string]string{"k": "v"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.waitConverged(t, ns, name)
	stop()

	if err := a.sets.Delete(testContext(t), ns, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	set, err := a.sets.Get(testContext(t), ns, name, metav1.GetOptions{})
	if err != nil || set.DeletionTimestamp == nil {
		t.Fatalf("deleted set without its operator: %v, %v; want it held by the finalizer", set, err)
	}
	operator(t, a.rest, options{})
	a.waitGone(t, ns, name)
}

// countConflicts counts the server's 409 answers: AlreadyExists to a
// create (POST), Conflict to an update (PUT).
type countConflicts struct {
	next                http.RoundTripper
	duplicates, updates *atomic.Int64
}

func (c countConflicts) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusConflict {
		switch req.Method {
		case http.MethodPost:
			c.duplicates.Add(1)
		case http.MethodPut:
			c.updates.Add(1)
		}
	}
	return resp, err
}

// TestReadYourWrites: the operator's reconciles follow each other by
// milliseconds (each ConfigMap it creates queues its set again). With
// read-your-writes they see their own writes; without it they act on the
// cache from before them, and the server answers 409: ConfigMaps created
// twice (AlreadyExists) and status or finalizer updates from a stale
// resourceVersion (Conflict). Both ways converge; only one is clean.
func TestReadYourWrites(t *testing.T) {
	env := testenv.Start(t)
	for _, ryw := range []bool{true, false} {
		t.Run(fmt.Sprint("ryw=", ryw), func(t *testing.T) {
			var duplicates, conflicts atomic.Int64
			a := newAPI(t, env.Kubeconfig, nil)
			opRest := newAPI(t, env.Kubeconfig, func(rt http.RoundTripper) http.RoundTripper {
				return countConflicts{next: rt, duplicates: &duplicates, updates: &conflicts}
			}).rest
			ns := "default"
			if !ryw {
				ns = "kube-public"
			}
			operator(t, opRest, options{namespace: ns, workers: 4, controller: controller.Options{
				DisableReadYourWrites: !ryw, Queue: workqueue.Options{BaseDelay: time.Millisecond},
			}})
			const sets = 8
			for i := range sets {
				if _, err := a.sets.Create(testContext(t), newSet(ns, fmt.Sprint("s", i), 6, map[string]string{"i": fmt.Sprint(i)}), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range sets {
				a.waitConverged(t, ns, fmt.Sprint("s", i))
			}
			for i := range sets {
				a.patchSpec(t, ns, fmt.Sprint("s", i), `{"replicas":3,"template":{"data":{"v":"2"}}}`)
			}
			for i := range sets {
				a.waitConverged(t, ns, fmt.Sprint("s", i))
			}
			t.Logf("read-your-writes %v: %d duplicate creates, %d update conflicts", ryw, duplicates.Load(), conflicts.Load())
			d, c := duplicates.Load(), conflicts.Load()
			switch {
			case ryw && d+c != 0:
				t.Errorf("with read-your-writes: %d duplicate creates and %d conflicts, want none", d, c)
			case !ryw && d+c == 0:
				t.Errorf("without read-your-writes: no duplicate create or conflict; the test no longer shows what it guards against")
			}
		})
	}
}

// TestStart: the program's path, from KUBECONFIG: the CRD is installed
// (twice is fine) and the operator reconciles.
func TestStart(t *testing.T) {
	for _, elect := range []bool{false, true} {
		t.Run(fmt.Sprintf("leader-elect=%v", elect), func(t *testing.T) { testStart(t, elect) })
	}
}

func testStart(t *testing.T, leaderElect bool) {
	env := testenv.Start(t)
	t.Setenv("KUBECONFIG", env.Kubeconfig)
	a := newAPI(t, env.Kubeconfig, nil)
	if err := installCRD(testContext(t), a.rest); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- start(ctx, options{namespace: "default", workers: 1, leaderElect: leaderElect}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("start() = %v", err)
		}
	}()
	if _, err := a.sets.Create(testContext(t), newSet("default", "started", 1, map[string]string{"a": "b"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.waitConverged(t, "default", "started")
}
