package change

import (
	"maps"
	"reflect"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Predicate decides whether an update from old to new is worth handling.
// Objects are typed Kubernetes objects, *unstructured.Unstructured, or
// maps as decoded from JSON. A nil old stands for "no previous state" (an
// add): every *Changed predicate is true for it.
//
// Predicates are plain functions, so they fit any informer's update
// callback:
//
//	Update: func(old, new *appsv1.Deployment) {
//		if !change.Or(change.GenerationChanged, change.LabelsChanged)(old, new) {
//			return
//		}
//		...
//	}
type Predicate func(old, new any) bool

// And is true when every predicate is (and for none).
func And(ps ...Predicate) Predicate {
	return func(old, new any) bool {
		for _, p := range ps {
			if !p(old, new) {
				return false
			}
		}
		return true
	}
}

// Or is true when any predicate is (not for none).
func Or(ps ...Predicate) Predicate {
	return func(old, new any) bool {
		for _, p := range ps {
			if p(old, new) {
				return true
			}
		}
		return false
	}
}

// Not is true when p is false.
func Not(p Predicate) Predicate {
	return func(old, new any) bool { return !p(old, new) }
}

// GenerationChanged: metadata.generation differs, which for most
// resources means the spec changed.
func GenerationChanged(old, new any) bool {
	if isNil(old) {
		return true
	}
	return generation(old) != generation(new)
}

// ResourceVersionChanged: metadata.resourceVersion differs, so new is a
// later state and not a resync of the same one.
func ResourceVersionChanged(old, new any) bool {
	if isNil(old) {
		return true
	}
	return resourceVersion(old) != resourceVersion(new)
}

// LabelsChanged: metadata.labels differ (no labels and empty labels are
// the same).
func LabelsChanged(old, new any) bool {
	return metaChanged(old, new, "labels", func(o, n metav1.Object) bool { return !maps.Equal(o.GetLabels(), n.GetLabels()) })
}

// AnnotationsChanged: metadata.annotations differ (no annotations and
// empty annotations are the same).
func AnnotationsChanged(old, new any) bool {
	return metaChanged(old, new, "annotations", func(o, n metav1.Object) bool { return !maps.Equal(o.GetAnnotations(), n.GetAnnotations()) })
}

// FieldsChanged is true when a field the patterns name changed (see
// Pattern). It panics if a pattern is malformed; use NewFilter and
// Filter.Changed to handle that as an error.
func FieldsChanged(patterns ...string) Predicate {
	return MustFilter(patterns...).Changed
}

// OnlyFieldsChanged is true when something changed and every change is
// at or below a field the patterns name (see Pattern), leaving the Noise
// fields out: OnlyFieldsChanged("metadata.labels") is a label-only update.
// It is false for an add (no old: the whole object is new) and for
// objects that cannot be compared. It panics if a pattern is malformed.
func OnlyFieldsChanged(patterns ...string) Predicate {
	ps := mustPatterns(patterns)
	return func(old, new any) bool {
		d := Between(old, new)
		if d.Err() != nil || d.Empty() {
			return false
		}
		for _, c := range d.Changes() {
			if !slices.ContainsFunc(ps, func(p Pattern) bool { return p.covers(c) }) {
				return false
			}
		}
		return true
	}
}

// FieldsChangedExcept is true when a field other than those the patterns
// name (and the Noise fields) changed: "anything but these". To ignore
// updates that change only the labels:
//
//	change.FieldsChangedExcept("metadata.labels")
//
// It is true for an add (no old) and for objects that cannot be compared
// (when in doubt, deliver). It panics if a pattern is malformed.
func FieldsChangedExcept(patterns ...string) Predicate {
	mustPatterns(patterns)
	d := Differ{Exclude: slices.Clone(patterns)}
	return func(old, new any) bool { return !d.Between(old, new).Empty() }
}

// LabelsMatch is true when the object's labels match sel: for an add,
// new's; for an update, old's or new's, so that an object whose labels
// stop matching is seen once more, leaving. It picks primaries out of a
// resource whose other objects are not, such as ConfigMaps that mirror
// labelled ConfigMaps:
//
//	controller.NewSource(cms, change.LabelsMatch(labels.SelectorFromSet(labels.Set{"mirror": "true"})))
//
// An object enters or leaves the selection by a label-only update: And
// it with FieldsChangedExcept("metadata.labels") and those updates are
// filtered out too.
func LabelsMatch(sel labels.Selector) Predicate {
	return func(old, new any) bool {
		return sel.Matches(labels.Set(labelsOf(new))) || (!isNil(old) && sel.Matches(labels.Set(labelsOf(old))))
	}
}

// labelsOf returns obj's metadata.labels (nil if it has none).
func labelsOf(obj any) map[string]string {
	if isNil(obj) {
		return nil
	}
	if o, ok := obj.(metav1.Object); ok {
		return o.GetLabels()
	}
	n, ok := at(obj, "metadata", "labels")
	if !ok || n.k != kindObject {
		return nil
	}
	out := map[string]string{}
	_ = n.each(func(k string, v node) bool {
		if v.k == kindString {
			out[k] = v.str()
		}
		return true
	})
	return out
}

// mustPatterns parses patterns, panicking on a malformed one.
func mustPatterns(patterns []string) []Pattern {
	if len(patterns) == 0 {
		panic("change: no patterns")
	}
	ps := make([]Pattern, len(patterns))
	for i, s := range patterns {
		ps[i] = MustPattern(s)
	}
	return ps
}

// NeedsReconcile: new is a fresh state (its resourceVersion differs from
// old's) whose metadata.generation is not yet status.observedGeneration,
// so its controller has not acted on its spec yet. Objects without
// status.observedGeneration count as never observed.
func NeedsReconcile(old, new any) bool {
	if !ResourceVersionChanged(old, new) {
		return false
	}
	return generation(new) != int64At(new, "status", "observedGeneration")
}

// DeletionStarted: new is being deleted (metadata.deletionTimestamp is
// set) and old was not, or there is no old: the moment a controller that
// holds a finalizer on the object runs its clean-up.
func DeletionStarted(old, new any) bool {
	return deleting(new) && (isNil(old) || !deleting(old))
}

// FinalizersChanged: metadata.finalizers differ (their order too; none
// and an empty list are the same).
func FinalizersChanged(old, new any) bool {
	return metaChanged(old, new, "finalizers", func(o, n metav1.Object) bool { return !slices.Equal(o.GetFinalizers(), n.GetFinalizers()) })
}

// OwnerReferencesChanged: metadata.ownerReferences differ (none and an
// empty list are the same): the object was adopted, orphaned (as an Orphan
// deletion of its owner does) or given another owner.
func OwnerReferencesChanged(old, new any) bool {
	return metaChanged(old, new, "ownerReferences", func(o, n metav1.Object) bool {
		a, b := o.GetOwnerReferences(), n.GetOwnerReferences()
		return (len(a) > 0 || len(b) > 0) && !reflect.DeepEqual(a, b)
	})
}

// metaChanged is true for an add (no old); for typed objects it asks
// typed, and otherwise compares metadata.<member> (see metaMemberChanged).
func metaChanged(old, new any, member string, typed func(o, n metav1.Object) bool) bool {
	if isNil(old) {
		return true
	}
	if o, ok := old.(metav1.Object); ok {
		if n, ok := new.(metav1.Object); ok {
			return typed(o, n)
		}
	}
	return metaMemberChanged(old, new, member)
}

func deleting(obj any) bool {
	if isNil(obj) {
		return false
	}
	if o, ok := obj.(metav1.Object); ok {
		return o.GetDeletionTimestamp() != nil
	}
	n, ok := at(obj, "metadata", "deletionTimestamp")
	return ok && n.k != kindNull
}

func isNil(obj any) bool {
	if obj == nil {
		return true
	}
	v := reflect.ValueOf(obj)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Interface, reflect.Slice:
		return v.IsNil()
	}
	return false
}

func generation(obj any) int64 {
	if o, ok := obj.(metav1.Object); ok {
		return o.GetGeneration()
	}
	return int64At(obj, "metadata", "generation")
}

func resourceVersion(obj any) string {
	if o, ok := obj.(metav1.Object); ok {
		return o.GetResourceVersion()
	}
	n, ok := at(obj, "metadata", "resourceVersion")
	if !ok || n.k != kindString {
		return ""
	}
	return n.str()
}

// at returns the node at the member path of obj.
func at(obj any, path ...string) (node, bool) {
	n, err := nodeOf(obj)
	if err != nil {
		return null, false
	}
	for _, name := range path {
		if n.k != kindObject {
			return null, false
		}
		var ok bool
		if n, ok, err = n.member(name); err != nil || !ok {
			return null, false
		}
	}
	return n, true
}

func int64At(obj any, path ...string) int64 {
	n, ok := at(obj, path...)
	if !ok || n.k != kindNumber {
		return 0
	}
	if num := n.num(); num.isInt {
		return num.i
	}
	return 0
}

// metaMemberChanged compares metadata.<name> of two objects, taking an
// absent, null, empty object or empty list as the same.
func metaMemberChanged(old, new any, name string) bool {
	a, aok := at(old, "metadata", name)
	b, bok := at(new, "metadata", name)
	empty := func(n node, ok bool) bool {
		if !ok || n.k == kindNull {
			return true
		}
		if n.k == kindArray {
			return n.size() == 0
		}
		if n.k != kindObject {
			return false
		}
		e := true
		_ = n.each(func(string, node) bool { e = false; return false })
		return e
	}
	if empty(a, aok) || empty(b, bok) {
		return empty(a, aok) != empty(b, bok)
	}
	eq, err := equal(a, b)
	return !eq || err != nil
}
