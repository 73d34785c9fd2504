package controller_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client/controller"
	"github.com/objwatch/objwatch/client/informer"
)

// TestDifferExcludeAsPredicate: change.Differ's Exclude ignores paths of
// typed objects as a real server writes them (new resourceVersions,
// managedFields time stamps): a label-only patch does not reconcile, a
// data change does.
func TestDifferExcludeAsPredicate(t *testing.T) {
	e := startEnv(t)
	ctx := testContext(t)
	e.create(t, "default", "a", map[string]string{"k": "v"})
	ignore := change.Differ{Exclude: []string{"metadata.labels", "metadata.annotations"}}
	changed := func(old, new any) bool { return old == nil || !ignore.Between(old, new).Empty() }
	f := informer.NewFactory(e.rest, informer.FactoryOptions{})
	cms := informer.Shared[CM](f, configMaps, informer.Selection{Namespace: "default"})
	rec := newRecorder(nil)
	ctrl, err := controller.NewBuilder("differ").For(controller.NewSource(cms, changed)).Complete(rec)
	if err != nil {
		t.Fatal(err)
	}
	run(t, f)
	run(t, ctrl)
	a := controller.Request{Namespace: "default", Name: "a"}
	rec.waitFor(t, a, 1)
	patch := func(body string) *corev1.ConfigMap {
		t.Helper()
		cm, err := e.cms.Patch(ctx, "default", "a", types.MergePatchType, []byte(body), metav1.PatchOptions{FieldManager: "test"})
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}
	labelled := patch(`{"metadata":{"labels":{"seen":"yes"},"annotations":{"note":"x"}}}`)
	// The informer has the labelled state before the next write.
	for v, ok := cms.Lister().Get("default", "a"); !ok || v.ResourceVersion != labelled.ResourceVersion; v, ok = cms.Lister().Get("default", "a") {
		select {
		case <-ctx.Done():
			t.Fatal("the informer never saw the labels")
		case <-time.After(time.Millisecond):
		}
	}
	rec.never(t, a, 1)
	patch(`{"data":{"k":"v2"}}`)
	rec.waitFor(t, a, 2)
}
