package informer

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/client"
)

// RefusedError is a list or watch of an informer that the server refused:
// 403 Forbidden (the caller may not do it; with RBAC, no role grants the
// verb on the resource in that namespace) or 401 Unauthorized (the
// credentials were not accepted). errors.Is(err, client.ErrForbidden),
// or client.ErrUnauthorized, tells which; Err is the server's
// *client.StatusError.
//
// The informer keeps retrying, with its backoff, since access may be
// granted later; LastError and the objwatch_informer_refused gauge report
// the refusal until a list or watch of that namespace is accepted.
type RefusedError struct {
	Informer  string                      // the informer's name
	Resource  schema.GroupVersionResource // what it lists and watches
	Namespace string                      // "" for all namespaces (the cluster scope)
	Verb      string                      // "list" or "watch" (a streaming list is a watch)
	Err       error
}

func (e *RefusedError) Error() string {
	scope := "at the cluster scope"
	if e.Namespace != "" {
		scope = fmt.Sprintf("in namespace %q", e.Namespace)
	}
	return fmt.Sprintf("informer %s: %s %s %s refused: %v", e.Informer, e.Verb, client.Resource{GVR: e.Resource}, scope, e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// refusal returns err as a *RefusedError if the server refused the
// request r was making, else nil.
func (r *reflector[T]) refusal(err error) *RefusedError {
	var se *client.StatusError
	if !errors.As(err, &se) || !errors.Is(se, client.ErrForbidden) && !errors.Is(se, client.ErrUnauthorized) {
		return nil
	}
	return &RefusedError{Informer: r.name, Resource: r.client.Resource().GVR, Namespace: r.namespace, Verb: r.verb, Err: se}
}

// refuse records a refusal: the informer's visible state, and its log
// line when the state is new.
func (r *reflector[T]) refuse(e *RefusedError) {
	var err error = e
	r.lastErr.Store(&err)
	if old := r.refused.Swap(e); old == nil || old.Verb != e.Verb || old.Err.Error() != e.Err.Error() {
		r.log.Warn("access refused, retrying with backoff", "resource", client.Resource{GVR: e.Resource}.String(),
			"namespace", e.Namespace, "verb", e.Verb, "err", e.Err)
		return
	}
	r.log.Debug("access still refused", "namespace", e.Namespace, "verb", e.Verb, "err", e.Err)
}

// accepted clears the last error, and a refusal, once the server accepted
// a list or watch.
func (r *reflector[T]) accepted() {
	r.lastErr.Store(nil)
	if r.refused.Swap(nil) != nil {
		r.log.Info("access granted", "namespace", r.namespace, "verb", r.verb)
	}
}
