package objects

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Admission operations, as admission.k8s.io/v1 names them.
const (
	OpCreate = "CREATE"
	OpUpdate = "UPDATE"
	OpDelete = "DELETE"
)

// Attempt is one attempt of a write as admission sees it (Hooks.Mutate and
// Hooks.Validate). An update or delete retried after a conflict is a new
// Attempt, with the new current object: admission runs again, as in
// Kubernetes. An Attempt belongs to the request that makes it; steps run
// one after another, never concurrently.
type Attempt struct {
	Request *Request
	// Operation is OpCreate, OpUpdate (updates, patches, applies, and an
	// update that removes a deleted object's last finalizer) or OpDelete.
	Operation string
	// Object is the object to write; Mutate steps may change it in place
	// or replace it. nil for OpDelete.
	Object *unstructured.Unstructured
	// Old is the stored object the write replaces; nil for OpCreate.
	Old *unstructured.Unstructured
	// Options are a create's or update's options; Delete a delete's.
	Options WriteOptions
	Delete  *metav1.DeleteOptions

	warnings []string
	reinv    Reinvocation
}

// Reinvocation is an attempt's reinvocation context, as kube-apiserver's
// admission chain keeps one per request (it satisfies
// k8s.io/apiserver/pkg/admission.ReinvocationContext): a Mutate hook that
// changed the object calls SetShouldReinvoke, and the object service then
// runs every Mutate hook once more with IsReinvoke true; each hook keeps
// its own state under Value/SetValue and calls again only those of its
// plugins with reinvocationPolicy IfNeeded that ran before a later change.
// It belongs to its Attempt and is not safe for concurrent use.
type Reinvocation struct {
	isReinvoke, shouldReinvoke bool
	values                     map[string]any
}

func (r *Reinvocation) IsReinvoke() bool        { return r.isReinvoke }
func (r *Reinvocation) SetIsReinvoke()          { r.isReinvoke = true }
func (r *Reinvocation) ShouldReinvoke() bool    { return r.shouldReinvoke }
func (r *Reinvocation) SetShouldReinvoke()      { r.shouldReinvoke = true }
func (r *Reinvocation) Value(plugin string) any { return r.values[plugin] }

// SetValue keeps v as plugin's state for the attempt.
func (r *Reinvocation) SetValue(plugin string, v any) {
	if r.values == nil {
		r.values = map[string]any{}
	}
	r.values[plugin] = v
}

// Reinvocation returns the attempt's reinvocation context.
func (a *Attempt) Reinvocation() *Reinvocation { return &a.reinv }

// Warn adds a warning for the client (a Warning header on the response),
// sent whether or not the write then succeeds.
func (a *Attempt) Warn(msg string) { a.warnings = append(a.warnings, msg) }

// Warnings returns the warnings added so far.
func (a *Attempt) Warnings() []string { return a.warnings }
