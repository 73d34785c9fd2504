package informer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

// TestClientGoObjects: objects created and changed with client-go's typed
// clientset, cached by our informer as k8s.io/api structs (no code
// generation) and as unstructured objects.
func TestClientGoObjects(t *testing.T) { bothModes(t, testClientGoObjects) }

func testClientGoObjects(t *testing.T, compact bool) {
	e := startEnv(t)
	ctx := testContext(t, 60*time.Second)
	cfg, err := clientcmd.BuildConfigFromFlags("", e.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cgCMs := cs.CoreV1().ConfigMaps("default")
	want := map[string]*corev1.ConfigMap{}
	for i := range 20 {
		cm, err := cgCMs.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("cg-", i), Labels: map[string]string{"app": "cg", "i": fmt.Sprint(i)},
				Annotations: map[string]string{"note": strings.Repeat("x", i)}},
			Data:       map[string]string{"a": fmt.Sprint(i), "b": "B"},
			BinaryData: map[string][]byte{"bin": {0, 1, byte(i)}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want[cm.Name] = cm
	}
	typed, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{LabelSelector: "app=cg", Compact: compact})
	if err != nil {
		t.Fatal(err)
	}
	var updates sync.Map
	if _, err := typed.AddHandler(informer.HandlerFuncs[CM]{Update: func(_, new CM) { updates.Store(new.Name, new) }}, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn, err := informer.New(client.NewUnstructured(e.reader, configMaps), informer.Options[*unstructured.Unstructured]{Namespace: "default", Compact: compact})
	if err != nil {
		t.Fatal(err)
	}
	run(t, typed)
	run(t, dyn)
	if err := informer.WaitForSync(ctx, typed.HasSynced, dyn.HasSynced); err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		got, ok := typed.Lister().Get("default", name)
		if !ok {
			t.Errorf("typed Get(%s) not found", name)
			continue
		}
		// client-go's typed objects come back without TypeMeta; ours have it.
		g := got.DeepCopy()
		g.TypeMeta = metav1.TypeMeta{}
		if diff := cmp.Diff(w, g); diff != "" {
			t.Errorf("typed %s differs from client-go's (-client-go +ours):\n%s", name, diff)
		}
		u, ok := dyn.Lister().Get("default", name)
		if !ok {
			t.Errorf("unstructured Get(%s) not found", name)
			continue
		}
		if d, _, _ := unstructured.NestedStringMap(u.Object, "data"); d["a"] != w.Data["a"] || u.GetKind() != "ConfigMap" || u.GetResourceVersion() != w.ResourceVersion {
			t.Errorf("unstructured %s = %v, want data.a %s, kind ConfigMap, rv %s", name, u.Object, w.Data["a"], w.ResourceVersion)
		}
	}
	if got := typed.Lister().List("", labels.SelectorFromSet(labels.Set{"i": "3"})); len(got) != 1 || got[0].Name != "cg-3" {
		t.Errorf("List(i=3) = %v, want cg-3", got)
	}
	cm := want["cg-7"].DeepCopy()
	cm.Data["a"] = "changed"
	if _, err := cgCMs.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		if v, ok := updates.Load("cg-7"); ok && v.(CM).Data["a"] == "changed" {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("update made with client-go never seen")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSelectorLeaveAndEnter: an object that stops matching the selector is
// deleted from the cache (a real delete, not a tombstone); one that starts
// matching is added.
func TestSelectorLeaveAndEnter(t *testing.T) { bothModes(t, testSelectorLeaveAndEnter) }

func testSelectorLeaveAndEnter(t *testing.T, compact bool) {
	e := startEnv(t)
	ctx := testContext(t, 30*time.Second)
	cm, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s", Labels: map[string]string{"app": "in"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{LabelSelector: "app=in", Compact: compact})
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan string, 10)
	if _, err := inf.AddHandler(informer.HandlerFuncs[CM]{
		Add:    func(o CM, _ bool) { events <- "add " + o.Labels["app"] },
		Update: func(_, o CM) { events <- "update " + o.Labels["app"] },
		Delete: func(o CM, unknown bool) { events <- fmt.Sprintf("delete %s %v", o.Labels["app"], unknown) },
	}, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	expect := func(want string) {
		t.Helper()
		select {
		case got := <-events:
			if got != want {
				t.Errorf("event %q, want %q", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("no event, want %q", want)
		}
	}
	expect("add in")
	for _, app := range []string{"out", "in"} {
		cm.Labels["app"] = app
		if cm, err = e.writer.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	expect("delete in false")
	expect("add in")
}

func TestTransformAndIndexes(t *testing.T) { bothModes(t, testTransformAndIndexes) }

func testTransformAndIndexes(t *testing.T, compact bool) {
	e := startEnv(t)
	ctx := testContext(t, 30*time.Second)
	for i := range 6 {
		if _, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("t", i),
			Labels: map[string]string{"shard": fmt.Sprint(i % 3)}}, Data: map[string]string{"big": strings.Repeat("x", 1000)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	byShard := func(o CM) []string { return []string{o.Labels["shard"]} }
	inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{
		Transform: func(o CM) (CM, error) { o.Data = nil; o.ManagedFields = nil; return o, nil },
		Indexers:  informer.Indexers[CM]{"shard": byShard},
		Compact:   compact,
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, o := range inf.Lister().List("", nil) {
		if o.Data != nil {
			t.Errorf("%s has data after a transform dropping it", o.Name)
		}
	}
	got, err := inf.Lister().ByIndex("shard", "1")
	if err != nil || len(got) != 2 {
		t.Errorf("ByIndex(shard, 1) = %d objects, %v; want 2", len(got), err)
	}
	if err := inf.AddIndexers(informer.Indexers[CM]{"name": func(o CM) []string { return []string{o.Name} }}); err != nil {
		t.Fatal(err)
	}
	if got, _ := inf.Lister().ByIndex("name", "t4"); len(got) != 1 {
		t.Errorf("ByIndex(name, t4) after AddIndexers while running = %d objects, want 1", len(got))
	}
}

func TestResync(t *testing.T) { bothModes(t, testResync) }

func testResync(t *testing.T, compact bool) {
	e := startEnv(t)
	ctx := testContext(t, 30*time.Second)
	for i := range 3 {
		if _, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("r", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{Compact: compact})
	if err != nil {
		t.Fatal(err)
	}
	var resyncs, plain atomic.Int64
	if _, err := inf.AddHandler(informer.HandlerFuncs[CM]{Update: func(old, new CM) {
		if old == new {
			resyncs.Add(1)
		}
	}}, informer.HandlerOptions{Resync: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddHandler(informer.HandlerFuncs[CM]{Update: func(_, _ CM) { plain.Add(1) }}, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	for resyncs.Load() < 9 {
		if ctx.Err() != nil {
			t.Fatalf("resync deliveries = %d, want at least 9 (3 rounds of 3)", resyncs.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := plain.Load(); n != 0 {
		t.Errorf("handler without resync got %d updates, want 0", n)
	}
}

func TestMutationDetector(t *testing.T) {
	e := startEnv(t)
	ctx := testContext(t, 30*time.Second)
	if _, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "m"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var reported atomic.Int64
	inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{
		DetectMutations: true, OnMutation: func(error) { reported.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	if _, err := inf.AddHandler(informer.HandlerFuncs[CM]{Add: func(o CM, _ bool) {
		o.Data["k"] = "mutated" // forbidden
		close(done)
	}}, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	<-done
	if err := inf.CheckMutations(); err == nil || !strings.Contains(err.Error(), "default/m") {
		t.Errorf("CheckMutations() = %v, want an error naming default/m", err)
	}
	if reported.Load() == 0 {
		t.Errorf("OnMutation not called")
	}
}

func TestFactory(t *testing.T) {
	e := startEnv(t)
	ctx := testContext(t, 30*time.Second)
	for _, ns := range []string{"default", "kube-system"} {
		if _, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "f"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f := informer.NewFactory(e.reader, informer.FactoryOptions{})
	all := informer.Shared[CM](f, configMaps, informer.Selection{})
	if again := informer.Shared[CM](f, configMaps, informer.Selection{}); again != all {
		t.Errorf("For() twice returned two informers, want one shared")
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Factory.Run() = %v", err)
		}
	}()
	ns := informer.Shared[CM](f, configMaps, informer.Selection{Namespace: "kube-system"}) // made while running
	dyn := informer.Shared[*unstructured.Unstructured](f, configMaps, informer.Selection{})
	if err := f.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if all.Lister().Len() < 2 || ns.Lister().Len() != 1 || dyn.Lister().Len() != all.Lister().Len() {
		t.Errorf("cached %d, %d (kube-system), %d (unstructured); want >= 2, 1, same as the first", all.Lister().Len(), ns.Lister().Len(), dyn.Lister().Len())
	}
}

// TestCompactReadersOwnObjects: with a compact cache, what a Lister
// returns is the caller's to modify; the cache and later readers are
// unaffected. The mutation detector is off (there is nothing to detect).
func TestCompactReadersOwnObjects(t *testing.T) {
	e := startEnv(t)
	ctx := testContext(t, 30*time.Second)
	want := map[string]CM{}
	for i := range 4 {
		cm, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("own", i),
			Labels: map[string]string{"app": "own"}}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want[cm.Name] = cm
	}
	f := informer.NewFactory(e.reader, informer.FactoryOptions{Compact: true, DetectMutations: true})
	inf := informer.Shared[CM](f, configMaps, informer.Selection{Namespace: "default"})
	if err := inf.AddIndexers(informer.Indexers[CM]{"app": func(o CM) []string { return []string{o.Labels["app"]} }}); err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	if _, err := inf.AddHandler(informer.HandlerFuncs[CM]{Add: func(CM, bool) { handled.Add(1) }}, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	run(t, f)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	mutate := func(o CM) {
		o.Data["k"] = "mutated"
		o.Labels["app"] = "mutated"
		o.ResourceVersion = "1"
	}
	l := inf.Lister()
	a, _ := l.Get("default", "own0")
	b, _ := l.Get("default", "own0")
	if a == b {
		t.Errorf("two Gets returned the same object, want a new one each")
	}
	mutate(a)
	for _, o := range l.List("", labels.Everything()) {
		mutate(o)
	}
	byApp, err := l.ByIndex("app", "own")
	if err != nil || len(byApp) != 4 {
		t.Fatalf("ByIndex(app, own) = %d objects, %v; want 4", len(byApp), err)
	}
	for _, o := range byApp {
		mutate(o)
	}
	for name, w := range want {
		got, ok := l.Get("default", name)
		if !ok {
			t.Fatalf("Get(%s) not found", name)
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("Get(%s) after readers modified their copies (-want +got):\n%s", name, diff)
		}
	}
	if got := l.List("default", labels.SelectorFromSet(labels.Set{"app": "own"})); len(got) != 4 {
		t.Errorf("List(app=own) = %d objects, want 4", len(got))
	}
	if err := inf.CheckMutations(); err != nil {
		t.Errorf("CheckMutations() = %v, want nil (the detector is off in compact mode)", err)
	}
	if again := informer.Shared[CM](f, configMaps, informer.Selection{Namespace: "default"}); again != inf {
		t.Errorf("For() twice returned two informers, want one shared")
	}
}
