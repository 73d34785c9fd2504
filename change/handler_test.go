package change_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client/informer"
)

// calls records handler calls as strings.
type calls []string

func (c *calls) OnAdd(obj *corev1.ConfigMap, _ bool) {
	*c = append(*c, "add "+obj.ResourceVersion)
}

func (c *calls) OnUpdate(old, new *corev1.ConfigMap) {
	*c = append(*c, "update "+old.ResourceVersion+">"+new.ResourceVersion)
}

func (c *calls) OnDelete(obj *corev1.ConfigMap, _ bool) {
	*c = append(*c, "delete "+obj.ResourceVersion)
}

func cm(rv string, data ...string) *corev1.ConfigMap {
	c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm", ResourceVersion: rv}, Data: map[string]string{}}
	for i := 0; i < len(data); i += 2 {
		c.Data[data[i]] = data[i+1]
	}
	return c
}

func TestDedupHandler(t *testing.T) {
	d, err := change.NewDedup[informer.Key](change.DedupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got calls
	h := change.DedupHandler[*corev1.ConfigMap](&got, d)
	v1, v2 := cm("1", "a", "1"), cm("2", "a", "2")
	v3 := cm("3", "a", "2") // v2's content
	v3.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "other"}}
	v4 := cm("4", "a", "1") // v1's content, after v2's
	h.OnAdd(v1, true)
	h.OnUpdate(v1, v1) // resync
	h.OnUpdate(v1, v2)
	h.OnUpdate(v2, v3)
	h.OnUpdate(v3, v4)
	h.OnDelete(v4, false)
	h.OnAdd(cm("5", "a", "1"), false) // re-created with the same content
	want := calls{"add 1", "update 1>2", "update 3>4", "delete 4", "add 5"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("calls = %q, want %q", got, want)
	}
	if d.Dropped() != 2 {
		t.Errorf("Dropped() = %d, want 2", d.Dropped())
	}
}

func TestCategoryHandler(t *testing.T) {
	cats, err := change.NewCategories("other", map[string]string{"data.b": "b"})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	cc, err := change.NewCategoryCounter(cats, reg, "cms")
	if err != nil {
		t.Fatal(err)
	}
	var got calls
	h := change.CategoryHandler[*corev1.ConfigMap](&got, cc)
	v1 := cm("1", "a", "1")
	v2 := cm("2", "a", "1", "b", "1")
	v3 := cm("3", "a", "2", "b", "2")
	v4 := cm("4", "a", "2", "b", "2") // only the resourceVersion changed
	h.OnAdd(v1, true)
	for _, u := range [][2]*corev1.ConfigMap{{v1, v2}, {v2, v3}, {v3, v4}, {v4, v4}} {
		h.OnUpdate(u[0], u[1])
	}
	h.OnDelete(v4, false)
	if len(got) != 6 {
		t.Errorf("calls = %q, want every call passed on", got)
	}
	want := `
# HELP objwatch_change_events_total Changes by the categories of fields they touched (a change touching several counts for each).
# TYPE objwatch_change_events_total counter
objwatch_change_events_total{category="b",counter="cms"} 2
objwatch_change_events_total{category="other",counter="cms"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if got := cc.Count(change.Between(v3, v4)); got != nil {
		t.Errorf("Count(resourceVersion change only) = %v, want nil", got)
	}
}
