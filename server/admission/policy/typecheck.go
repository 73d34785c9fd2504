package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// The status controller: what kube-controller-manager's
// validatingadmissionpolicy-status controller does, in the server. When a
// ValidatingAdmissionPolicy's generation is newer than its
// status.observedGeneration, Kubernetes' TypeChecker checks its
// expressions against the schemas of the kinds its matchConstraints name
// (and of its paramKind), and the result is applied to the status
// subresource (observedGeneration, typeChecking.expressionWarnings) with
// the controller's field manager, forced, as the controller applies it.
const (
	statusManager = "validatingadmissionpolicy-status"
	statusActor   = "system:serviceaccount:kube-system:validatingadmissionpolicy-status-controller"
	// statusRetry is how long a failed status write waits to be retried.
	statusRetry = time.Second
)

// statusQueue is the names of the policies whose status is due; it is
// safe for concurrent use.
type statusQueue struct {
	mu      sync.Mutex
	pending map[string]bool
	wake    chan struct{} // one token: something is pending
}

func newStatusQueue() *statusQueue {
	return &statusQueue{pending: map[string]bool{}, wake: make(chan struct{}, 1)}
}

func (q *statusQueue) add(name string) {
	q.mu.Lock()
	q.pending[name] = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *statusQueue) take() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := sortedKeys(q.pending)
	q.pending = map[string]bool{}
	return out
}

// statusDue queues a validating policy seen by the mirror whose
// generation its status has not observed.
func (p *Policies) statusDue(pol *admissionv1.ValidatingAdmissionPolicy) {
	if pol.Generation > pol.Status.ObservedGeneration {
		p.status.add(pol.Name)
	}
}

// runStatus writes the queued policies' status until ctx ends.
func (p *Policies) runStatus(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.status.wake:
		}
		failed := false
		for _, name := range p.status.take() {
			if err := p.writeStatus(ctx, name); err != nil {
				if ctx.Err() != nil {
					return
				}
				p.cfg.Log.Warn("admission policy: status", "policy", name, "err", err)
				p.status.mu.Lock()
				p.status.pending[name] = true
				p.status.mu.Unlock()
				failed = true
			}
		}
		if failed {
			select {
			case <-ctx.Done():
				return
			case <-time.After(statusRetry):
			}
			p.status.add("") // wake up for the retries
		}
	}
}

// writeStatus type-checks the policy as the feed last saw it and applies
// the result to its status.
func (p *Policies) writeStatus(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	p.mu.Lock()
	pol := p.state.vaps[name]
	p.mu.Unlock()
	if pol == nil || pol.Generation <= pol.Status.ObservedGeneration {
		return nil
	}
	tc := &validating.TypeChecker{SchemaResolver: schemaResolver{p}, RestMapper: restMapper(p.cfg.Registry)}
	warnings := tc.Check(pol)
	ws := make([]any, 0, len(warnings))
	for _, w := range warnings {
		ws = append(ws, map[string]any{"fieldRef": w.FieldRef, "warning": w.Warning})
	}
	patch := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": admissionv1.SchemeGroupVersion.String(), "kind": "ValidatingAdmissionPolicy",
		"metadata": map[string]any{"name": name},
		"status": map[string]any{
			"observedGeneration": pol.Generation,
			"typeChecking":       map[string]any{"expressionWarnings": ws},
		},
	}}
	if len(ws) == 0 {
		patch.Object["status"].(map[string]any)["typeChecking"] = map[string]any{}
	}
	res, _ := p.cfg.Registry.Get(admissionv1.SchemeGroupVersion.WithResource("validatingadmissionpolicies"))
	req := &objects.Request{Actor: statusActor, Verb: "patch", Resource: res, Name: name, Subresource: "status"}
	_, err := p.objects.Apply(ctx, req, patch, objects.WriteOptions{FieldManager: statusManager, Force: true})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// restMapper maps the served resources to their kinds, for the type
// checker's matchConstraints.
func restMapper(r *registry.Registry) meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, res := range r.Resources() {
		scope := meta.RESTScopeRoot
		if res.Namespaced {
			scope = meta.RESTScopeNamespace
		}
		m.AddSpecific(res.GVK(), res.GVR(), res.GVR().GroupVersion().WithResource(strings.ToLower(res.Kind)), scope)
	}
	return m
}

// schemaResolver resolves a kind's OpenAPI schema: a built-in's from the
// models the server publishes (Config.BuiltinModels), a custom
// resource's from its CRD's document.
type schemaResolver struct{ p *Policies }

func (s schemaResolver) ResolveSchema(gvk schema.GroupVersionKind) (*spec.Schema, error) {
	res, ok := s.p.cfg.Registry.ForKind(gvk.Group, gvk.Version, gvk.Kind)
	if !ok {
		return nil, fmt.Errorf("cannot resolve %v: %w", gvk, resolver.ErrSchemaNotFound)
	}
	var models map[string]*spec.Schema
	switch {
	case res.OpenAPIV3 != nil:
		doc, err := res.OpenAPIV3()
		if err != nil {
			return nil, err
		}
		if doc.Components != nil {
			models = doc.Components.Schemas
		}
	case s.p.cfg.BuiltinModels != nil:
		s.p.modelsOnce.Do(func() { s.p.models, s.p.modelsErr = s.p.cfg.BuiltinModels() })
		if s.p.modelsErr != nil {
			return nil, s.p.modelsErr
		}
		models = s.p.models
	}
	for name, m := range models {
		if hasGVK(m, gvk) {
			return resolver.PopulateRefs(func(ref string) (*spec.Schema, bool) {
				m, ok := models[strings.TrimPrefix(ref, "#/components/schemas/")]
				if !ok {
					return nil, false
				}
				c := *m
				return &c, true
			}, name)
		}
	}
	return nil, fmt.Errorf("cannot resolve %v: %w", gvk, resolver.ErrSchemaNotFound)
}

// hasGVK reports whether a model is tagged with gvk
// (x-kubernetes-group-version-kind).
func hasGVK(m *spec.Schema, gvk schema.GroupVersionKind) bool {
	v, ok := m.Extensions["x-kubernetes-group-version-kind"]
	if !ok {
		return false
	}
	var tags []struct{ Group, Version, Kind string }
	if b, err := json.Marshal(v); err != nil || json.Unmarshal(b, &tags) != nil {
		return false
	}
	for _, t := range tags {
		if t.Group == gvk.Group && t.Version == gvk.Version && t.Kind == gvk.Kind {
			return true
		}
	}
	return false
}
