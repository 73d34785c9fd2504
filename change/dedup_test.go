package change_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/objwatch/objwatch/change"
)

func newDedup(t testing.TB, opts change.DedupOptions) *change.Dedup[string] {
	t.Helper()
	d, err := change.NewDedup[string](opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDedup(t *testing.T) {
	d := newDedup(t, change.DedupOptions{})
	v1 := deployment()
	noise := deployment()
	noise.ResourceVersion = "5000"
	noise.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "other"}}
	v2 := deployment()
	v2.ResourceVersion = "5001"
	*v2.Spec.Replicas = 7
	steps := []struct {
		key  string
		obj  any
		want bool
	}{
		{"a", v1, true},
		{"a", v1, false},                    // resync
		{"a", noise, false},                 // a write that changed nothing but noise
		{"b", v1, true},                     // another key
		{"a", v2, true},                     // new content
		{"a", v1, true},                     // back to old content: new again
		{"a", toUnstructured(t, v1), false}, // same content in another form
	}
	for i, s := range steps {
		if got := d.Fresh(s.key, s.obj); got != s.want {
			t.Errorf("step %d: Fresh(%s) = %v, want %v", i, s.key, got, s.want)
		}
	}
	if got := d.Dropped(); got != 3 {
		t.Errorf("Dropped() = %d, want 3", got)
	}
	d.Forget("a")
	if !d.Fresh("a", v1) {
		t.Errorf("Fresh after Forget = false, want true")
	}
	if got := d.Len(); got != 2 {
		t.Errorf("Len() = %d, want 2", got)
	}
	if !d.Fresh("c", map[string]any{"f": func() {}}) {
		t.Errorf("Fresh(unencodable) = false, want true")
	}
}

func TestDedupBounds(t *testing.T) {
	t.Run("lru", func(t *testing.T) {
		d := newDedup(t, change.DedupOptions{MaxKeys: 2})
		o := obj(`{"a":1}`)
		d.Fresh("a", o)
		d.Fresh("b", o)
		d.Fresh("a", o) // a is now the most recent
		d.Fresh("c", o) // evicts b
		if got := d.Len(); got != 2 {
			t.Errorf("Len() = %d, want 2", got)
		}
		if d.Fresh("a", o) {
			t.Errorf("Fresh(a) = true: a was evicted, b should have been")
		}
		if !d.Fresh("b", o) {
			t.Errorf("Fresh(b) = false: b should have been evicted")
		}
	})
	t.Run("ttl", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
		d := newDedup(t, change.DedupOptions{TTL: time.Minute, Clock: clk})
		o := obj(`{"a":1}`)
		d.Fresh("a", o)
		clk.SetTime(clk.Now().Add(30 * time.Second))
		d.Fresh("b", o)
		if d.Fresh("a", o) {
			t.Errorf("Fresh(a) after 30s = true, want false")
		}
		clk.SetTime(clk.Now().Add(59 * time.Second))
		if d.Fresh("a", o) {
			t.Errorf("Fresh(a) 59s after it was seen = true, want false")
		}
		clk.SetTime(clk.Now().Add(time.Minute))
		d.Fresh("c", o) // expires a and b
		if got := d.Len(); got != 1 {
			t.Errorf("Len() = %d, want 1 (expired keys dropped)", got)
		}
		if !d.Fresh("b", o) {
			t.Errorf("Fresh(b) after TTL = false, want true")
		}
	})
}

func TestDedupMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	d := newDedup(t, change.DedupOptions{Registerer: reg, Name: "pods"})
	o := obj(`{"a":1}`)
	d.Fresh("a", o)
	d.Fresh("a", o)
	d.Fresh("a", o)
	want := `
# HELP objwatch_change_dedup_events_total Events checked for new content, by result: new (delivered) or duplicate (dropped).
# TYPE objwatch_change_dedup_events_total counter
objwatch_change_dedup_events_total{dedup="pods",result="duplicate"} 2
objwatch_change_dedup_events_total{dedup="pods",result="new"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if _, err := change.NewDedup[string](change.DedupOptions{Registerer: reg, Name: "pods"}); !errors.As(err, &prometheus.AlreadyRegisteredError{}) {
		t.Errorf("second NewDedup with the same name = %v, want AlreadyRegisteredError", err)
	}
	if _, err := change.NewDedup[string](change.DedupOptions{Registerer: reg, Name: "other"}); err != nil {
		t.Errorf("NewDedup with another name = %v", err)
	}
}

func TestDedupConcurrent(t *testing.T) {
	d := newDedup(t, change.DedupOptions{MaxKeys: 50})
	var wg sync.WaitGroup
	fresh := make([]int, 8)
	for w := range fresh {
		wg.Go(func() {
			for i := range 1000 {
				if d.Fresh(fmt.Sprint(i%100), obj(fmt.Sprintf(`{"v":%d}`, i/100))) {
					fresh[w]++
				}
			}
		})
	}
	wg.Wait()
	if d.Len() > 50 {
		t.Errorf("Len() = %d, want at most 50", d.Len())
	}
	total := 0
	for _, n := range fresh {
		total += n
	}
	if uint64(total)+d.Dropped() != 8000 {
		t.Errorf("fresh %d + dropped %d != 8000", total, d.Dropped())
	}
}

// TestDedupScenario replays what an informer delivers when one logical
// change reaches it three times: as the update a PATCH made, again as an
// update by another writer that changed nothing but the bookkeeping
// (resourceVersion, managedFields), and once more when a relist after a
// 410 replays the object. A handler behind a Dedup sees the change once;
// a plain handler sees all three.
func TestDedupScenario(t *testing.T) {
	v1 := deployment()
	patched := deployment()
	patched.ResourceVersion = "5000"
	*patched.Spec.Replicas = 5
	updated := deployment()
	updated.ResourceVersion = "5001"
	*updated.Spec.Replicas = 5
	updated.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate}}
	relisted := updated.DeepCopy()

	type update struct{ old, new *appsv1.Deployment }
	delivered := []update{{v1, patched}, {patched, updated}, {updated, relisted}}

	d := newDedup(t, change.DedupOptions{})
	key := func(o *appsv1.Deployment) string { return o.Namespace + "/" + o.Name }
	d.Fresh(key(v1), v1) // the add
	var plain, deduped []string
	for _, u := range delivered {
		plain = append(plain, u.new.ResourceVersion)
		if d.Fresh(key(u.new), u.new) {
			deduped = append(deduped, u.new.ResourceVersion)
		}
	}
	if len(plain) != 3 || len(deduped) != 1 || deduped[0] != "5000" {
		t.Errorf("plain handler saw %q, deduplicating handler %q; want 3 and [5000]", plain, deduped)
	}
}
