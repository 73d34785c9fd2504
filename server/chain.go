package server

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/server/objects"
)

// An admissionStep is one step of the admission chain: what it adds to
// the object service's hooks, and when it knows what it enforces.
type admissionStep struct {
	name  string
	hooks objects.Hooks
	// synced, if set, is closed once the step knows every object it
	// enforces (roles, policies, webhook configurations); the server is
	// not ready before.
	synced <-chan struct{}
	// settle, if set, waits (bounded) once every step is synced, for what
	// the step derives from them.
	settle func(ctx context.Context)
}

// admissionChain is the admission chain, in order: each of the object
// service's hook lists (Admit, Mutate, Validate, Written) runs its steps'
// entries in this order, and the server is ready once each step is
// synced. A new admission step is declared here, and only here.
func (s *Server) admissionChain() []admissionStep {
	chain := []admissionStep{
		// RBAC: authorization (Authorize, AuthorizationChanged, Review)
		// and the escalation check of role and binding writes.
		{name: "rbac", hooks: s.access.Hooks(), synced: s.access.Synced(),
			settle: func(ctx context.Context) { s.access.Settle(ctx, 5*time.Second) }},
		// Namespaces, CRDs and Services: their state checked, cluster IPs
		// allocated; after a write, deletions made visible, IPs released.
		{name: "lifecycle", hooks: s.lifecycle.Hooks()},
		// Admission policies before admission webhooks, as in
		// kube-apiserver's plugin order; Admit checks a policy's
		// paramKind permission.
		{name: "admission policies", synced: s.policies.Synced(), hooks: objects.Hooks{
			Admit:    []func(context.Context, *objects.Request, *unstructured.Unstructured, *unstructured.Unstructured) (func(), error){s.policies.Admit},
			Mutate:   []func(context.Context, *objects.Attempt) error{s.policies.Mutate},
			Validate: []func(context.Context, *objects.Attempt) error{s.policies.Validate},
		}},
		{name: "admission webhooks", synced: s.admissionWebhooks.Synced(), hooks: objects.Hooks{
			Mutate:   []func(context.Context, *objects.Attempt) error{s.admissionWebhooks.Mutate},
			Validate: []func(context.Context, *objects.Attempt) error{s.admissionWebhooks.Validate},
		}},
	}
	if s.audit != nil {
		// Last before the write: room for its record (a full disk refuses
		// the write before etcd has it); after it, its diff.
		chain = append(chain, admissionStep{name: "audit", hooks: objects.Hooks{
			Validate: []func(context.Context, *objects.Attempt) error{s.audit.Reserve},
			Written:  []func(context.Context, objects.Write){s.audit.Written},
		}})
	}
	return chain
}

// chainHooks joins the steps' hooks in order. The hooks that are not
// lists (Authorize, AuthorizationChanged, Review) are the one step's that
// sets them.
func chainHooks(chain []admissionStep) objects.Hooks {
	var h objects.Hooks
	for _, st := range chain {
		if st.hooks.Authorize != nil {
			h.Authorize, h.AuthorizationChanged = st.hooks.Authorize, st.hooks.AuthorizationChanged
		}
		if st.hooks.Review != nil {
			h.Review = st.hooks.Review
		}
		h.Admit = append(h.Admit, st.hooks.Admit...)
		h.Mutate = append(h.Mutate, st.hooks.Mutate...)
		h.Validate = append(h.Validate, st.hooks.Validate...)
		h.Written = append(h.Written, st.hooks.Written...)
	}
	return h
}

// chainSynced waits until every step of chain is synced, then settled:
// requests can then be authorized and admitted. It is false if ctx ended
// first.
func chainSynced(ctx context.Context, chain []admissionStep) bool {
	for _, st := range chain {
		if st.synced == nil {
			continue
		}
		select {
		case <-st.synced:
		case <-ctx.Done():
			return false
		}
	}
	for _, st := range chain {
		if st.settle != nil {
			st.settle(ctx)
		}
	}
	return ctx.Err() == nil
}
