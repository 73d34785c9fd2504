package informer_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

// TestDedupScenario: the same content arrives by PATCH, by UPDATE (another
// writer PUTting what the PATCH produced) and again by a relist after
// 410 Gone (the object was changed and changed back while the watch was
// down). A handler behind change.DedupHandler sees the content once; a
// plain handler sees every state the informer delivered.
func TestDedupScenario(t *testing.T) {
	e := startEnv(t, compacting(100*time.Millisecond)...)
	ctx := testContext(t, 60*time.Second)
	for _, n := range []string{"x", "y"} {
		if _, err := e.writer.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: n},
			Data: map[string]string{"a": "1"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	inf, err := informer.New(client.NewClient[CM](e.reader, configMaps), informer.Options[CM]{Metrics: reg, Name: "cms", InitialBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	dedup, err := change.NewDedup[informer.Key](change.DedupOptions{Registerer: reg, Name: "cms"})
	if err != nil {
		t.Fatal(err)
	}
	cats, err := change.NewCategories("other", map[string]string{"data.b": "b"})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := change.NewCategoryCounter(cats, reg, "cms")
	if err != nil {
		t.Fatal(err)
	}
	plain, deduped := &counting{}, &counting{}
	if _, err := inf.AddHandler(plain, informer.HandlerOptions{Name: "plain"}); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddHandler(change.DedupHandler(change.CategoryHandler[CM](deduped, cc), dedup), informer.HandlerOptions{Name: "dedup"}); err != nil {
		t.Fatal(err)
	}
	run(t, inf)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	// step writes and waits until the plain handler saw updates updates.
	step := func(name string, updates int, write func() (CM, error)) {
		t.Helper()
		out, err := write()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		waitFor(t, name, func() bool {
			cur, ok := inf.Lister().Get("default", "x")
			return ok && cur.ResourceVersion == out.ResourceVersion && plain.counts()[1] == updates
		})
	}

	step("PATCH", 1, func() (CM, error) {
		return e.writer.Patch(ctx, "default", "x", types.MergePatchType, []byte(`{"data":{"b":"2"}}`), metav1.PatchOptions{}, "")
	})
	step("UPDATE to the same content", 2, func() (CM, error) {
		cur, err := e.writer.Get(ctx, "default", "x", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		// Another writer's view: the same data, built afresh, with its
		// own field ownership. The server writes a new resourceVersion
		// (a PUT that changed nothing at all would be a no-op).
		out, err := e.writer.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: "x", ResourceVersion: cur.ResourceVersion,
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "other-writer", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
				FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:data":{"f:a":{},"f:b":{}}}`),
			}},
		}, Data: map[string]string{"b": "2", "a": "1"}}, metav1.UpdateOptions{})
		if err == nil && out.ResourceVersion == cur.ResourceVersion {
			t.Fatalf("UPDATE: resourceVersion %s unchanged: the server took it for a no-op", out.ResourceVersion)
		}
		return out, err
	})
	step("relist", 3, func() (CM, error) {
		e.cut.Cut(1500 * time.Millisecond)
		if _, err := e.writer.Patch(ctx, "default", "x", types.MergePatchType, []byte(`{"data":{"b":"3"}}`), metav1.PatchOptions{}, ""); err != nil {
			return nil, err
		}
		time.Sleep(300 * time.Millisecond) // let the history go
		return e.writer.Patch(ctx, "default", "x", types.MergePatchType, []byte(`{"data":{"b":"2"}}`), metav1.PatchOptions{}, "")
	})
	if n := counter(t, reg, "objwatch_informer_relists_total"); n != 1 {
		t.Errorf("relists = %v, want 1", n)
	}
	if n := counter(t, reg, "objwatch_informer_watch_restarts_total"); n < 1 {
		t.Errorf("watch restarts = %v, want at least 1", n)
	}
	step("PATCH to new content", 4, func() (CM, error) {
		return e.writer.Patch(ctx, "default", "x", types.MergePatchType, []byte(`{"data":{"b":"4"}}`), metav1.PatchOptions{}, "")
	})
	waitFor(t, "the dedup handler", func() bool { return deduped.counts()[1] == 2 })
	time.Sleep(100 * time.Millisecond) // room for unwanted calls

	if got, want := plain.counts(), [3]int{2, 4, 0}; got != want {
		t.Errorf("plain handler: adds, updates, deletes = %v, want %v", got, want)
	}
	if got, want := deduped.counts(), [3]int{2, 2, 0}; got != want {
		t.Errorf("dedup handler: adds, updates, deletes = %v, want %v", got, want)
	}
	if got := dedup.Dropped(); got != 2 {
		t.Errorf("Dropped() = %d, want 2 (the UPDATE and the relist)", got)
	}
	if got := counterWith(t, reg, "objwatch_change_dedup_events_total", "result", "duplicate"); got != 2 {
		t.Errorf("objwatch_change_dedup_events_total{result=duplicate} = %v, want 2", got)
	}
	if got := counterWith(t, reg, "objwatch_change_events_total", "category", "b"); got != 2 {
		t.Errorf(`objwatch_change_events_total{category="b"} = %v, want 2`, got)
	}
	if got := counterWith(t, reg, "objwatch_change_events_total", "category", "other"); got != 0 {
		t.Errorf(`objwatch_change_events_total{category="other"} = %v, want 0`, got)
	}
}
