package registry

import (
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Lifecycle is what a resource adds to the generic object rules: to
// creation, updates and deletion (an object with finalizers gets a
// deletionTimestamp and stays until they are gone). Every field may be
// nil or zero.
type Lifecycle struct {
	// PrepareCreate sets what the server keeps on a new object (a
	// namespace's phase, spec finalizer and name label).
	PrepareCreate func(obj *unstructured.Unstructured)
	// PrepareUpdate keeps, on an update of cur to obj through subresource
	// ("" for the main resource), what the resource lets only its own
	// subresource change. done means obj is the whole result (an update
	// through the resource's own subresource, see UpdateSubresource), and
	// the generic rules are not applied.
	PrepareUpdate func(obj, cur *unstructured.Unstructured, subresource string) (done bool)
	// UpdateSubresource is a subresource of the resource's own, which only
	// takes updates (a namespace's "finalize").
	UpdateSubresource string
	// Undeletable are the names of objects that cannot be deleted (the
	// namespaces Kubernetes keeps).
	Undeletable []string
	// NoDeleteCollection: the resource has no deletecollection.
	NoDeleteCollection bool

	// DeletionStarts marks obj when its deletion starts (a status phase or
	// condition) and adds the finalizers whose work must come first.
	DeletionStarts func(obj *unstructured.Unstructured)
	// Finalizers returns the finalizers obj keeps outside
	// metadata.finalizers (a namespace's spec.finalizers): a deleted
	// object goes only once these are gone too.
	Finalizers func(obj *unstructured.Unstructured) []string
}

// Finalizers that the server's own controllers (package gc) carry out.
const (
	// NamespaceFinalizer, in a namespace's spec.finalizers: its content is
	// deleted first.
	NamespaceFinalizer = "kubernetes"
	// CRDCleanupFinalizer: a definition's objects are deleted first.
	CRDCleanupFinalizer = apiextensionsv1.CustomResourceCleanupFinalizer
)

// namespaceLifecycle: a deleted namespace is Terminating and keeps its
// spec finalizer until its content is gone. A namespace created before
// objwatch set that finalizer gets it when its deletion starts, so that
// its content is deleted too (Kubernetes would delete such a namespace at
// once).
var namespaceLifecycle = &Lifecycle{
	PrepareCreate: func(obj *unstructured.Unstructured) {
		unstructured.SetNestedField(obj.Object, "Active", "status", "phase")
		if fs := NamespaceFinalizers(obj); !slices.Contains(fs, NamespaceFinalizer) {
			SetNamespaceFinalizers(obj, append(fs, NamespaceFinalizer))
		}
		SetNamespaceNameLabel(obj)
	},
	PrepareUpdate: func(obj, cur *unstructured.Unstructured, subresource string) bool {
		// Only /finalize changes spec.finalizers, and nothing else.
		if subresource == "finalize" {
			// The value is copied as sent, so that decoding rejects one of
			// the wrong type rather than dropping it.
			fresh := cur.DeepCopy()
			if v, found, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "finalizers"); found {
				unstructured.SetNestedField(fresh.Object, v, "spec", "finalizers")
			} else {
				SetNamespaceFinalizers(fresh, nil)
			}
			*obj = *fresh
			return true
		}
		SetNamespaceFinalizers(obj, NamespaceFinalizers(cur))
		SetNamespaceNameLabel(obj)
		return false
	},
	UpdateSubresource: "finalize",
	// As Kubernetes' NamespaceLifecycle admission.
	Undeletable:        []string{"default", "kube-system", "kube-public"},
	NoDeleteCollection: true,
	DeletionStarts: func(obj *unstructured.Unstructured) {
		unstructured.SetNestedField(obj.Object, "Terminating", "status", "phase")
		if fs := NamespaceFinalizers(obj); !slices.Contains(fs, NamespaceFinalizer) {
			SetNamespaceFinalizers(obj, append(fs, NamespaceFinalizer))
		}
	},
	Finalizers: NamespaceFinalizers,
}

// crdLifecycle: a deleted definition has the Terminating condition and
// the cleanup finalizer until its objects are gone.
var crdLifecycle = &Lifecycle{
	DeletionStarts: func(obj *unstructured.Unstructured) {
		if fs := obj.GetFinalizers(); !slices.Contains(fs, CRDCleanupFinalizer) {
			obj.SetFinalizers(append(fs, CRDCleanupFinalizer))
		}
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		conds = SetCondition(conds, map[string]any{
			"type": string(apiextensionsv1.Terminating), "status": string(apiextensionsv1.ConditionTrue),
			"reason": "InstanceDeletionPending", "message": "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
		})
		unstructured.SetNestedSlice(obj.Object, conds, "status", "conditions")
	},
}

// NamespaceFinalizers returns a namespace's spec.finalizers.
func NamespaceFinalizers(obj *unstructured.Unstructured) []string {
	fs, _, _ := unstructured.NestedStringSlice(obj.Object, "spec", "finalizers")
	return fs
}

// SetNamespaceFinalizers sets a namespace's spec.finalizers (none removes
// the field, and spec when it is left empty).
func SetNamespaceFinalizers(obj *unstructured.Unstructured, fs []string) {
	if len(fs) == 0 {
		unstructured.RemoveNestedField(obj.Object, "spec", "finalizers")
		if spec, ok := obj.Object["spec"].(map[string]any); ok && len(spec) == 0 {
			delete(obj.Object, "spec")
		}
		return
	}
	unstructured.SetNestedStringSlice(obj.Object, fs, "spec", "finalizers")
}

// SetCondition replaces the condition of c's type in conds (status
// conditions as decoded from JSON) or appends it, setting its
// lastTransitionTime to now unless its status did not change.
func SetCondition(conds []any, c map[string]any) []any {
	c["lastTransitionTime"] = time.Now().UTC().Truncate(time.Second).Format(time.RFC3339)
	for i, old := range conds {
		o, ok := old.(map[string]any)
		if !ok || o["type"] != c["type"] {
			continue
		}
		if o["status"] == c["status"] && o["lastTransitionTime"] != nil {
			c["lastTransitionTime"] = o["lastTransitionTime"]
		}
		conds[i] = c
		return conds
	}
	return append(conds, c)
}

// NamespaceNameLabel holds every namespace's name, for selectors.
const NamespaceNameLabel = "kubernetes.io/metadata.name"

// SetNamespaceNameLabel gives a namespace the kubernetes.io/metadata.name
// label with its name, which Kubernetes keeps on every namespace.
func SetNamespaceNameLabel(obj *unstructured.Unstructured) {
	labels := obj.GetLabels()
	if labels[NamespaceNameLabel] == obj.GetName() {
		return
	}
	if labels == nil {
		labels = map[string]string{}
	}
	labels[NamespaceNameLabel] = obj.GetName()
	obj.SetLabels(labels)
}
