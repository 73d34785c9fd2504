package change_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/change"
)

// patched returns a ConfigMap and the state one `kubectl patch` of its
// data.mode makes of it: a new resourceVersion, a new managedFields time.
func patched() (old, new *corev1.ConfigMap) {
	t0 := metav1.NewTime(time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC))
	old = &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "default", ResourceVersion: "10",
			Labels: map[string]string{"app": "web"},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubectl-create", Operation: metav1.ManagedFieldsOperationUpdate, Time: &t0},
				{Manager: "kubectl-patch", Operation: metav1.ManagedFieldsOperationUpdate, Time: &t0},
			}},
		Data: map[string]string{"mode": "fast", "size": "1"},
	}
	new = old.DeepCopy()
	new.ResourceVersion = "11"
	t1 := metav1.NewTime(t0.Add(time.Minute))
	new.ManagedFields[1].Time = &t1
	new.Data["mode"] = "safe"
	return old, new
}

func TestBetweenLeavesNoiseOut(t *testing.T) {
	old, new := patched()
	if got := change.Between(old, new).Paths(); !slices.Equal(got, []string{"data.mode"}) {
		t.Errorf("Between(typed).Paths() = %q, want [data.mode]", got)
	}
	if got := change.Between(toMap(t, old), toMap(t, new)).Paths(); !slices.Equal(got, []string{"data.mode"}) {
		t.Errorf("Between(maps).Paths() = %q, want [data.mode]", got)
	}
	want := []string{"data.mode", "metadata.managedFields[1].time", "metadata.resourceVersion"}
	if got := (change.Differ{KeepNoise: true}).Between(old, new).Paths(); !slices.Equal(got, want) {
		t.Errorf("KeepNoise: Paths() = %q, want %q", got, want)
	}
	// The patch leaves the noise out too.
	if p := change.Between(old, new).Patch(); len(p) != 1 || p[0].Path != "/data/mode" {
		t.Errorf("Patch() = %+v, want one replace of /data/mode", p)
	}
	// A write that changed nothing but the noise is no change.
	same := old.DeepCopy()
	same.ResourceVersion = "12"
	if d := change.Between(old, same); !d.Empty() {
		t.Errorf("noise-only write: Changes() = %v, want none", d.Changes())
	}
}

func TestDifferExclude(t *testing.T) {
	old, new := patched()
	new.Labels["tier"] = "edge"
	new.Data["size"] = "2"
	for _, tt := range []struct {
		exclude []string
		want    []string
	}{
		{[]string{"metadata.labels"}, []string{"data.mode", "data.size"}},
		{[]string{"metadata.labels.*", "data.mode"}, []string{"data.size"}},
		{[]string{"data"}, []string{"metadata.labels.tier"}},
		{[]string{"status"}, []string{"data.mode", "data.size", "metadata.labels.tier"}},
	} {
		d := change.Differ{Exclude: tt.exclude}.Between(old, new)
		if got := d.Paths(); !slices.Equal(got, tt.want) {
			t.Errorf("Exclude %q: Paths() = %q, want %q", tt.exclude, got, tt.want)
		}
		if len(d.Patch()) != len(tt.want) {
			t.Errorf("Exclude %q: Patch() = %+v, want %d operations", tt.exclude, d.Patch(), len(tt.want))
		}
	}
	// Items of a keyed list, by key and by wildcard.
	a := map[string]any{"spec": map[string]any{"containers": []any{
		map[string]any{"name": "web", "image": "a"}, map[string]any{"name": "proxy", "image": "b"}}}}
	b := map[string]any{"spec": map[string]any{"containers": []any{
		map[string]any{"name": "web", "image": "a2"}, map[string]any{"name": "proxy", "image": "b2"}}}}
	if got := (change.Differ{Exclude: []string{"spec.containers[name=proxy]"}}).Between(a, b).Paths(); !slices.Equal(got, []string{"spec.containers[name=web].image"}) {
		t.Errorf("Exclude one item: Paths() = %q", got)
	}
	if got := (change.Differ{Exclude: []string{"spec.containers[*].image"}}).Between(a, b).Paths(); len(got) != 0 {
		t.Errorf("Exclude every image: Paths() = %q, want none", got)
	}
	// A malformed pattern is the diff's error, not a panic.
	d := change.Differ{Exclude: []string{"spec..x"}}.Between(a, b)
	if !errors.Is(d.Err(), change.ErrPattern) || d.Empty() || d.Changes() != nil {
		t.Errorf("bad Exclude: Err() = %v, Empty() = %v, Changes() = %v; want ErrPattern, not empty, none", d.Err(), d.Empty(), d.Changes())
	}
}

func TestDefaultListsAreTheCallers(t *testing.T) {
	n := change.Noise()
	n[0] = "spec"
	if change.Noise()[0] == "spec" {
		t.Error("changing Noise()'s result changed the next one")
	}
	v := change.Volatile()
	_ = append(v[:1], "x")
	if change.Volatile()[1] == "x" {
		t.Error("appending to Volatile()'s result changed the next one")
	}
	ex := append(change.DefaultExclude, "status")                     //nolint:staticcheck // the deprecated variable's safety is what is tested
	ex2 := append(change.DefaultExclude, "spec")                      //nolint:staticcheck
	if ex[len(ex)-1] != "status" || len(change.DefaultExclude) != 3 { //nolint:staticcheck
		t.Errorf("append(DefaultExclude, ...) wrote into the package's slice: %q, %q", ex, ex2)
	}
	mk := append(change.DefaultMergeKeys, "id")
	_ = append(change.DefaultMergeKeys, "key")
	if mk[len(mk)-1] != "id" {
		t.Errorf("append(DefaultMergeKeys, ...) wrote into the package's slice: %q", mk)
	}
}

func TestOnlyFieldsChangedAndExcept(t *testing.T) {
	labelsOnly := change.OnlyFieldsChanged("metadata.labels")
	notLabelsOnly := change.FieldsChangedExcept("metadata.labels")
	base, _ := patched()
	relabeled := base.DeepCopy()
	relabeled.ResourceVersion = "11"
	relabeled.Labels["tier"] = "edge"
	_, dataChanged := patched()
	both := dataChanged.DeepCopy()
	both.Labels = nil
	noiseOnly := base.DeepCopy()
	noiseOnly.ResourceVersion = "12"
	for _, tt := range []struct {
		name                 string
		old, new             any
		wantOnly, wantExcept bool
	}{
		{"labels only", base, relabeled, true, false},
		{"labels only, maps", toMap(t, base), toMap(t, relabeled), true, false},
		{"data", base, dataChanged, false, true},
		{"labels and data", base, both, false, true},
		{"nothing but noise", base, noiseOnly, false, false},
		{"add", nil, base, false, true},
	} {
		if got := labelsOnly(tt.old, tt.new); got != tt.wantOnly {
			t.Errorf("%s: OnlyFieldsChanged = %v, want %v", tt.name, got, tt.wantOnly)
		}
		if got := notLabelsOnly(tt.old, tt.new); got != tt.wantExcept {
			t.Errorf("%s: FieldsChangedExcept = %v, want %v", tt.name, got, tt.wantExcept)
		}
		// Composed: a label-only update ignored, as one line.
		ignore := change.Not(change.OnlyFieldsChanged("metadata.labels"))
		if tt.name != "nothing but noise" && ignore(tt.old, tt.new) != tt.wantExcept {
			t.Errorf("%s: Not(OnlyFieldsChanged) = %v, want %v", tt.name, ignore(tt.old, tt.new), tt.wantExcept)
		}
	}
	// Patterns below and with wildcards.
	if !change.OnlyFieldsChanged("metadata.labels.*", "data.mode")(base, dataChanged) {
		t.Error("OnlyFieldsChanged(data.mode) of a data.mode change = false")
	}
	mustPanic(t, "OnlyFieldsChanged()", func() { change.OnlyFieldsChanged() })
	mustPanic(t, "FieldsChangedExcept(bad)", func() { change.FieldsChangedExcept("a[") })
}

func TestLabelsMatch(t *testing.T) {
	primary := change.LabelsMatch(labels.SelectorFromSet(labels.Set{"mirror": "true"}))
	cm := func(l map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: l}}
	}
	on, off := cm(map[string]string{"mirror": "true", "x": "y"}), cm(map[string]string{"mirror": "false"})
	for _, tt := range []struct {
		name     string
		old, new any
		want     bool
	}{
		{"add, matching", nil, on, true},
		{"add, not matching", nil, off, false},
		{"add, no labels", nil, cm(nil), false},
		{"update, both match", on, on, true},
		{"update, leaving", on, off, true},
		{"update, entering", off, on, true},
		{"update, neither", off, off, false},
		{"maps", toMap(t, off), toMap(t, on), true},
		{"maps, neither", nil, toMap(t, off), false},
	} {
		if got := primary(tt.old, tt.new); got != tt.want {
			t.Errorf("%s: LabelsMatch = %v, want %v", tt.name, got, tt.want)
		}
	}
	if !change.And(primary, change.Not(change.OnlyFieldsChanged("metadata.labels")))(nil, on) {
		t.Error("And(LabelsMatch, Not(OnlyFieldsChanged)) of a matching add = false")
	}
}

func mustPanic(t *testing.T, name string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", name)
		}
	}()
	f()
}

// toMap returns obj as a map decoded from its JSON.
func toMap(t *testing.T, obj any) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(mustJSON(t, obj), &m); err != nil {
		t.Fatal(err)
	}
	return m
}
