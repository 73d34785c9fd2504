package policy

import (
	"context"
	"fmt"
	"sort"
	"sync"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/client-go/informers"

	"github.com/objwatch/objwatch/server/mirror"
	"github.com/objwatch/objwatch/server/objects"
)

// state is what the mirrors have seen of the stored policies and
// bindings, with each policy's evaluator compiled for its resourceVersion.
type state struct {
	vaps  map[string]*admissionv1.ValidatingAdmissionPolicy
	vapbs map[string]*admissionv1.ValidatingAdmissionPolicyBinding
	maps  map[string]*admissionv1.MutatingAdmissionPolicy
	mapbs map[string]*admissionv1.MutatingAdmissionPolicyBinding

	compiledV map[string]compiled[validating.Validator]
	compiledM map[string]compiled[mutating.PolicyEvaluator]
}

type compiled[E any] struct {
	rv string
	e  E
}

func newState() state {
	return state{
		vaps: map[string]*admissionv1.ValidatingAdmissionPolicy{}, vapbs: map[string]*admissionv1.ValidatingAdmissionPolicyBinding{},
		maps: map[string]*admissionv1.MutatingAdmissionPolicy{}, mapbs: map[string]*admissionv1.MutatingAdmissionPolicyBinding{},
		compiledV: map[string]compiled[validating.Validator]{}, compiledM: map[string]compiled[mutating.PolicyEvaluator]{},
	}
}

func vaps(s *state) map[string]*admissionv1.ValidatingAdmissionPolicy         { return s.vaps }
func vapbs(s *state) map[string]*admissionv1.ValidatingAdmissionPolicyBinding { return s.vapbs }
func maps(s *state) map[string]*admissionv1.MutatingAdmissionPolicy           { return s.maps }
func mapbs(s *state) map[string]*admissionv1.MutatingAdmissionPolicyBinding   { return s.mapbs }

// Run keeps the enforced policies current from mirrors of the four policy
// resources until ctx ends. Synced is closed once each was listed.
func (p *Policies) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { p.runStatus(ctx) })
	wg.Go(func() {
		mirror.RunAll(ctx, func() {
			// Under mu, so that no change falls between the first rebuild
			// and the updates that rebuild.
			p.mu.Lock()
			defer p.mu.Unlock()
			p.rebuild()
			close(p.synced)
		},
			feed(p, "validatingadmissionpolicies", vaps, p.statusDue),
			feed(p, "validatingadmissionpolicybindings", vapbs, nil),
			feed(p, "mutatingadmissionpolicies", maps, nil),
			feed(p, "mutatingadmissionpolicybindings", mapbs, nil))
	})
	wg.Wait()
}

// feed is the mirror of one policy resource, whose objects are kept by
// name in the state's map m; seen, if set, is called on each new or
// changed object.
func feed[E any, T interface {
	*E
	metav1.Object
}](p *Policies, plural string, m func(*state) map[string]T, seen func(T)) *mirror.Mirror[T] {
	res, ok := p.cfg.Registry.Get(schema.GroupVersionResource{Group: admissionv1.GroupName, Version: "v1", Resource: plural})
	if !ok {
		panic("admission policy: " + plural + " not served")
	}
	return mirror.New(p.objects, mirror.Config[T]{Resource: res, Log: p.cfg.Log, Decode: mirror.Convert[E, T],
		Apply: func(changes []mirror.Change[T]) {
			p.update(func(s *state) {
				for _, c := range changes {
					if c.Type == objects.Deleted {
						delete(m(s), c.Value.GetName())
					} else {
						m(s)[c.Value.GetName()] = c.Value
					}
				}
			})
			for _, c := range changes {
				if seen != nil && c.Type != objects.Deleted {
					seen(c.Value)
				}
			}
		}})
}

// update changes the state and, once synced, publishes the new hooks.
func (p *Policies) update(change func(s *state)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	change(&p.state)
	select {
	case <-p.synced:
		p.rebuild()
	default: // Run publishes the first set once every resource is listed.
	}
}

// rebuild publishes the hooks of the state's policies that have bindings,
// compiling what changed. Called with p.mu held.
func (p *Policies) rebuild() {
	s := &p.state
	set := &hookSet{}
	hooks(s.vaps, s.vapbs, s.compiledV, compileValidating,
		func(b *admissionv1.ValidatingAdmissionPolicyBinding) string { return b.Spec.PolicyName },
		func(pol *admissionv1.ValidatingAdmissionPolicy, bs []*admissionv1.ValidatingAdmissionPolicyBinding, e validating.Validator) {
			h := validating.PolicyHook{Policy: pol, Bindings: bs, Evaluator: e}
			h.ParamInformer, h.ParamScope, h.ConfigurationError = p.paramsFor(pol.Spec.ParamKind)
			set.validating = append(set.validating, h)
		})
	hooks(s.maps, s.mapbs, s.compiledM, compileMutating,
		func(b *admissionv1.MutatingAdmissionPolicyBinding) string { return b.Spec.PolicyName },
		func(pol *admissionv1.MutatingAdmissionPolicy, bs []*admissionv1.MutatingAdmissionPolicyBinding, e mutating.PolicyEvaluator) {
			h := mutating.PolicyHook{Policy: pol, Bindings: bs, Evaluator: e}
			h.ParamInformer, h.ParamScope, h.ConfigurationError = p.paramsFor(pol.Spec.ParamKind)
			if e.Error != nil && h.ConfigurationError == nil {
				h.ConfigurationError = e.Error
			}
			set.mutating = append(set.mutating, h)
		})
	p.hooks.Store(set)
}

// hooks calls add, in policy name order, for every stored policy with
// bindings (sorted by name, so which denies first does not depend on map
// order) and its evaluator, compiled again when the policy's
// resourceVersion changed; evaluators of deleted policies are dropped.
func hooks[P interface {
	*PT
	GetResourceVersion() string
}, PT any, B interface{ GetName() string }, E any](
	policies map[string]*PT, bindings map[string]B, cache map[string]compiled[E],
	compile func(P) E, policyName func(B) string, add func(P, []B, E),
) {
	byPolicy := map[string][]B{}
	for _, b := range bindings {
		byPolicy[policyName(b)] = append(byPolicy[policyName(b)], b)
	}
	for _, name := range sortedKeys(byPolicy) {
		pt, ok := policies[name]
		if !ok {
			continue // a binding of a policy not (or no longer) stored
		}
		pol := P(pt)
		c, ok := cache[name]
		if !ok || c.rv != pol.GetResourceVersion() {
			c = compiled[E]{rv: pol.GetResourceVersion(), e: compile(pol)}
			cache[name] = c
		}
		bs := byPolicy[name]
		sort.Slice(bs, func(i, j int) bool { return bs[i].GetName() < bs[j].GetName() })
		add(pol, bs, c.e)
	}
	for name := range cache {
		if _, ok := policies[name]; !ok {
			delete(cache, name)
		}
	}
}

// paramsFor is where a policy's params are read from, and the resource's
// scope; an unserved paramKind is the policy's configuration error, in
// Kubernetes' words.
func (p *Policies) paramsFor(pk *admissionv1.ParamKind) (informers.GenericInformer, meta.RESTScope, error) {
	if pk == nil {
		return nil, nil, nil
	}
	gvk, err := gvkOf(pk.APIVersion, pk.Kind)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to parse paramKind APIVersion: %w", err)
	}
	res, ok := p.cfg.Registry.ForKind(gvk.Group, gvk.Version, gvk.Kind)
	if !ok {
		return nil, nil, fmt.Errorf("failed to find resource referenced by paramKind: '%v'", gvk)
	}
	scope := meta.RESTScopeRoot
	if res.Namespaced {
		scope = meta.RESTScopeNamespace
	}
	return params{reader: reader{p}, res: res}, scope, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
