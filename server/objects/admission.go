package objects

import (
	"context"

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
}

// Warn adds a warning for the client (a Warning header on the response),
// sent whether or not the write then succeeds.
func (a *Attempt) Warn(msg string) { a.warnings = append(a.warnings, msg) }

// Warnings returns the warnings added so far.
func (a *Attempt) Warnings() []string { return a.warnings }

// mutate runs Hooks.Mutate on a create or update attempt: after the
// change is recorded in managedFields and before the object is prepared
// and validated, as kube-apiserver runs mutating admission.
func (s *Service) mutate(ctx context.Context, a *Attempt) error {
	for _, h := range s.cfg.Hooks.Mutate {
		if err := h(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// validate runs Hooks.Validate after Hooks.Admit: the last word before
// the write.
func (s *Service) validate(ctx context.Context, a *Attempt) error {
	for _, h := range s.cfg.Hooks.Validate {
		if err := h(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// operation is the admission operation of a create or update request.
func operation(old *unstructured.Unstructured) string {
	if old == nil {
		return OpCreate
	}
	return OpUpdate
}
