package objects

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/server/registry"
)

// Hooks are the named places where authorization, lifecycle, admission
// and audit plug into every request (see the package doc). Each runs
// synchronously in the request that calls it; nil fields do nothing.
type Hooks struct {
	// Authorize decides whether req may proceed; an error (a 403 Status)
	// refuses it. nil allows everything.
	Authorize func(ctx context.Context, req *Request) error
	// AuthorizationChanged, if set, returns a context that is done when
	// Authorize's decision on req may have changed (a role or binding
	// changed), or nil when it cannot change (the server itself, an
	// unrestricted user). An open watch then asks Authorize again, and a
	// refusal ends it with that error as an ERROR event: a revoked
	// permission does not keep streaming until the watch's timeout.
	AuthorizationChanged func(req *Request) context.Context
	// Admit run in order before a create or update (each attempt of it)
	// is written, with the object to write and, for an update, the
	// current one. An error refuses the write. undo, if not nil, is
	// called when a create's write then fails (an update's undo is not
	// called: no hook takes anything for one yet). Admit runs for dry
	// runs too (req.DryRun): it must take nothing then.
	Admit []func(ctx context.Context, req *Request, obj, old *unstructured.Unstructured) (undo func(), err error)
	// Mutate run in order on every create and update attempt, after the
	// change is recorded in managedFields and before the object is
	// prepared, defaulted and validated (mutating admission: policies,
	// then webhooks). They may change a.Object; an error refuses the
	// write. They run for dry runs too (a.Request.DryRun).
	Mutate []func(ctx context.Context, a *Attempt) error
	// Validate run in order after Admit on every create, update and
	// delete attempt (validating admission: policies, then webhooks);
	// they must not change the object. An error refuses the write.
	Validate []func(ctx context.Context, a *Attempt) error
	// Written run in order after every successful write.
	Written []func(ctx context.Context, w Write)
	// Review answers a create of a Review resource (req.Resource.Review)
	// or of a review subresource (req.Resource.Reviews[req.Subresource]):
	// obj is the decoded request, the result the answer. Nothing is
	// stored. nil answers every review with 405.
	Review func(ctx context.Context, req *Request, obj *unstructured.Unstructured) (*unstructured.Unstructured, error)
}

// hookPoints runs a Service's Hooks, each at its place in a request.
// It only reads the hooks, which are set once at New: safe for
// concurrent use.
type hookPoints struct{ h Hooks }

// authorize is the one authorization point (Hooks.Authorize).
func (p *hookPoints) authorize(ctx context.Context, req *Request) error {
	if p.h.Authorize == nil {
		return nil
	}
	return p.h.Authorize(ctx, req)
}

// review answers a create of a review: decoded with the review's schema
// (unknown fields per fieldValidation), answered by Hooks.Review, stored
// nowhere.
func (p *hookPoints) review(ctx context.Context, req *Request, rr *registry.Resource, obj *unstructured.Unstructured, opts WriteOptions) (Result, error) {
	warnings, err := normalize(rr, obj, nil, opts)
	out := Result{Warnings: warnings}
	if err != nil {
		return out, err
	}
	if p.h.Review == nil {
		return out, apierrors.NewMethodNotSupported(gr(req.Resource), "create")
	}
	out.Object, err = p.h.Review(ctx, req, obj)
	return out, err
}

// mutate runs Hooks.Mutate on a create or update attempt: after the
// change is recorded in managedFields and before the object is prepared
// and validated, as kube-apiserver runs mutating admission. When a hook
// asked for it (Reinvocation.SetShouldReinvoke), every hook runs once
// more, as kube-apiserver's admission chain reinvokes itself.
func (p *hookPoints) mutate(ctx context.Context, a *Attempt) error {
	for pass := range 2 {
		if pass == 1 {
			if !a.reinv.shouldReinvoke {
				break
			}
			a.reinv.isReinvoke = true
		}
		for _, h := range p.h.Mutate {
			if err := h(ctx, a); err != nil {
				return err
			}
		}
	}
	return nil
}

// admit runs Hooks.Admit, then Hooks.Validate, on a's object; the undos
// release what the hooks took.
func (p *hookPoints) admit(ctx context.Context, a *Attempt) (undos, error) {
	var us undos
	for _, h := range p.h.Admit {
		u, err := h(ctx, a.Request, a.Object, a.Old)
		if err != nil {
			us.run()
			return nil, err
		}
		if u != nil {
			us = append(us, u)
		}
	}
	if err := p.validate(ctx, a); err != nil {
		us.run()
		return nil, err
	}
	return us, nil
}

// validate runs Hooks.Validate after Hooks.Admit: the last word before
// the write.
func (p *hookPoints) validate(ctx context.Context, a *Attempt) error {
	for _, h := range p.h.Validate {
		if err := h(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// written runs Hooks.Written: the one place that sees every successful
// write's stored old and new object.
func (p *hookPoints) written(ctx context.Context, req *Request, old, new *unstructured.Unstructured, rev int64) {
	for _, h := range p.h.Written {
		h(ctx, Write{Request: req, Old: old, New: new, Revision: rev})
	}
}

// undos release what admission took for a write that then failed.
type undos []func()

func (us undos) run() {
	for _, u := range us {
		u()
	}
}
