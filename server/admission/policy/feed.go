package policy

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/client-go/informers"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// feedWatchTimeout is how long one watch of a policy resource lasts
// before it is started again (from a fresh list).
const feedWatchTimeout = 10 * time.Minute

// state is what the feeds have seen of the stored policies and bindings,
// with each policy's evaluator compiled for its resourceVersion.
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

// feed is how one policy resource's objects enter and leave the state.
type feed struct {
	plural string
	set    func(s *state, u *unstructured.Unstructured) error
	delete func(s *state, name string)
}

func setter[T any](m func(s *state) map[string]*T) func(s *state, u *unstructured.Unstructured) error {
	return func(s *state, u *unstructured.Unstructured) error {
		v := new(T)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, v); err != nil {
			return err
		}
		m(s)[u.GetName()] = v
		return nil
	}
}

func deleter[T any](m func(s *state) map[string]*T) func(s *state, name string) {
	return func(s *state, name string) { delete(m(s), name) }
}

func vaps(s *state) map[string]*admissionv1.ValidatingAdmissionPolicy         { return s.vaps }
func vapbs(s *state) map[string]*admissionv1.ValidatingAdmissionPolicyBinding { return s.vapbs }
func maps(s *state) map[string]*admissionv1.MutatingAdmissionPolicy           { return s.maps }
func mapbs(s *state) map[string]*admissionv1.MutatingAdmissionPolicyBinding   { return s.mapbs }

var feeds = []feed{
	{"validatingadmissionpolicies", setter(vaps), deleter(vaps)},
	{"validatingadmissionpolicybindings", setter(vapbs), deleter(vapbs)},
	{"mutatingadmissionpolicies", setter(maps), deleter(maps)},
	{"mutatingadmissionpolicybindings", setter(mapbs), deleter(mapbs)},
}

// Run keeps the enforced policies current from watches of the four policy
// resources until ctx ends. Synced is closed once each was listed.
func (p *Policies) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { p.runStatus(ctx) })
	var left atomic.Int32
	left.Store(int32(len(feeds)))
	for _, f := range feeds {
		res, ok := p.cfg.Registry.Get(schema.GroupVersionResource{Group: admissionv1.GroupName, Version: "v1", Resource: f.plural})
		if !ok {
			panic("admission policy: " + f.plural + " not served")
		}
		var once sync.Once
		wg.Go(func() {
			p.follow(ctx, res, f, func() {
				once.Do(func() {
					if left.Add(-1) == 0 {
						p.mu.Lock()
						p.rebuild()
						p.mu.Unlock()
						close(p.synced)
					}
				})
			})
		})
	}
	wg.Wait()
}

// follow keeps one resource's objects in the state: a watch with its
// initial events (objects.Service.Follow), again after every failure.
func (p *Policies) follow(ctx context.Context, res *registry.Resource, f feed, listed func()) {
	var initial map[string]bool
	inInitial := true
	p.objects.Follow(ctx, res, feedWatchTimeout, func() {
		initial, inInitial = map[string]bool{}, true
	}, func(it objects.Item) error {
		if it.Type == objects.Bookmark {
			if it.InitialEnd {
				// What the list no longer has was deleted meanwhile.
				p.update(func(s *state) {
					for _, name := range p.names(f, s) {
						if !initial[name] {
							f.delete(s, name)
						}
					}
				})
				inInitial = false
				listed()
			}
			return nil
		}
		u := it.Object
		if u == nil {
			var err error
			if u, err = objects.Decode(it.JSON); err != nil {
				return err
			}
		}
		name := u.GetName()
		if inInitial {
			initial[name] = true
		}
		var setErr error
		apply := func(s *state) {
			if it.Type == objects.Deleted {
				f.delete(s, name)
			} else {
				setErr = f.set(s, u)
			}
		}
		if inInitial {
			p.mu.Lock()
			apply(&p.state)
			p.mu.Unlock()
		} else {
			p.update(apply)
		}
		if setErr != nil {
			p.cfg.Log.Error("admission policy: decode "+f.plural, "name", name, "err", setErr)
		} else if it.Type != objects.Deleted && f.plural == "validatingadmissionpolicies" {
			p.statusDue(u)
		}
		return nil
	})
}

// names are the names f's resource has in s.
func (p *Policies) names(f feed, s *state) []string {
	var out []string
	switch f.plural {
	case "validatingadmissionpolicies":
		out = keys(s.vaps)
	case "validatingadmissionpolicybindings":
		out = keys(s.vapbs)
	case "mutatingadmissionpolicies":
		out = keys(s.maps)
	case "mutatingadmissionpolicybindings":
		out = keys(s.mapbs)
	}
	return out
}

func keys[T any](m map[string]*T) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
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
