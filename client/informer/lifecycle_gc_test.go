package informer_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

// An Orphan deletion seen through an informer with the change package's
// lifecycle predicates: the owner's deletion starts, its dependent loses
// the owner reference, then the owner goes; the dependent stays.
func TestOrphanDeletionThroughInformer(t *testing.T) {
	e := startEnv(t)
	ctx := testContext(t, 30*time.Second)
	owner, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: "default"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dep", Namespace: "default", OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID},
	}}}
	if _, err := e.writer.Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var seen []string
	note := func(s string) { mu.Lock(); seen = append(seen, s); mu.Unlock() }
	inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddHandler(informer.HandlerFuncs[CM]{
		Add: func(CM, bool) {},
		Update: func(old, new CM) {
			if change.DeletionStarted(old, new) {
				note("deletion started: " + new.Name)
			}
			if change.OwnerReferencesChanged(old, new) {
				note("owners changed: " + new.Name)
			}
		},
		Delete: func(o CM, _ bool) { note("deleted: " + o.Name) },
	}, informer.HandlerOptions{Name: "lifecycle"}); err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	orphan := metav1.DeletePropagationOrphan
	if err := e.writer.Delete(ctx, "default", "owner", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	want := []string{"deletion started: owner", "owners changed: dep", "deleted: owner"}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		got := slices.Clone(seen)
		mu.Unlock()
		if slices.Equal(got, want) {
			break
		}
		if len(got) >= len(want) || time.Now().After(deadline) {
			t.Fatalf("events %q, want %q", got, want)
		}
	}
	if d, ok := inf.Lister().Get("default", "dep"); !ok || len(d.OwnerReferences) != 0 {
		t.Fatalf("dep in the cache: %v, %v; want it kept without owners", d, ok)
	}
}
