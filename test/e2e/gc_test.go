package e2e_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/objwatch/objwatch/testenv"
)

// A Foreground deletion through client-go, watched through client-go: the
// owner is first marked (deletionTimestamp and the foregroundDeletion
// finalizer), every dependent that blocks it is deleted before it, and its
// own deletion is the last event.
func TestForegroundDeletionEvents(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t)
	cs := typedClient(t, env)
	ctx := t.Context()
	const ns = "default"
	owner := createConfigMap(ctx, t, cs, ns, "owner", map[string]string{"family": "f"}, nil)
	block := true
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, BlockOwnerDeletion: &block}
	deps := names("dep", 5)
	for _, n := range deps {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"family": "f"}, OwnerReferences: []metav1.OwnerReference{ref}}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", n, err)
		}
	}
	list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: "family=f"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "family=f", ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	fg := metav1.DeletePropagationForeground
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, "owner", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatalf("delete owner: %v", err)
	}
	deleted := map[string]bool{}
	marked := false
	for !deleted["owner"] {
		var ev watch.Event
		select {
		case ev = <-w.ResultChan():
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if !ok {
			t.Fatalf("watch event %s of %T", ev.Type, ev.Object)
		}
		switch {
		case ev.Type == watch.Modified && cm.Name == "owner":
			if cm.DeletionTimestamp == nil || len(cm.Finalizers) == 0 || cm.Finalizers[0] != metav1.FinalizerDeleteDependents {
				t.Fatalf("owner modified to deletionTimestamp %v, finalizers %v", cm.DeletionTimestamp, cm.Finalizers)
			}
			marked = true
		case ev.Type == watch.Deleted:
			if cm.Name == "owner" && len(deleted) != len(deps) {
				t.Fatalf("owner deleted after %d of %d dependents", len(deleted), len(deps))
			}
			if !marked {
				t.Fatalf("%s deleted before the owner was marked", cm.Name)
			}
			deleted[cm.Name] = true
		}
	}
}
