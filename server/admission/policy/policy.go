// Package policy enforces Kubernetes' CEL admission policies:
// ValidatingAdmissionPolicy and MutatingAdmissionPolicy with their
// bindings (admissionregistration.k8s.io/v1), as kube-apiserver's
// ValidatingAdmissionPolicy and MutatingAdmissionPolicy admission plugins
// do, for every writer through the object service: clients, the garbage
// collector, namespace cleanup.
//
// # What is Kubernetes' and what is objwatch's
//
// The evaluation is Kubernetes' own code (k8s.io/apiserver):
// policy/validating's and policy/mutating's dispatchers (matching,
// bindings, params, failurePolicy, validationActions Deny / Warn / Audit,
// messageExpression, auditAnnotations, the denial's message and code,
// ApplyConfiguration and JSONPatch mutations), policy/matching
// (matchConstraints: resourceRules, excludeResourceRules, matchPolicy,
// namespaceSelector, objectSelector), plugin/cel's compilers with the
// environment of k8s.io/apiserver/pkg/cel/environment (object, oldObject,
// request, params, namespaceObject, authorizer, variables), and
// webhook/matchconditions. objwatch supplies what those packages would
// get from client-go informers and a kubernetes.Interface, without any
// client talking to the server itself:
//
//   - the policy and binding sets, kept current from watches through the
//     object service (Run), compiled once per policy resourceVersion
//     (compile.go puts the compilers together as the plugins'
//     unexported compilePolicy functions do);
//   - admission.Attributes over an objects.Attempt (attributes.go), whose
//     AddAnnotation writes to the request's audit record and whose
//     warnings become the response's Warning headers;
//   - namespaces and params read through the object service as the
//     server (nil user): from the watch cache, with a quorum read on a
//     miss, as Kubernetes reads its informers and falls back to a direct
//     read (lookup.go);
//   - admission.ObjectInterfaces (package server/versions): a
//     policy whose matchConstraints name another served version of the
//     request's resource matches with matchPolicy Equivalent and sees the
//     object converted to that version, a mutation converted back;
//   - a write through /scale seen as the object's autoscaling/v1 Scale,
//     whose mutated spec.replicas is written back, as kube-apiserver's
//     ScaleREST hands admission the Scale;
//   - the CEL authorizer, answered by the server's authorization
//     (Config.Authorized);
//   - type converters for ApplyConfiguration mutations
//     (Config.TypeConverter; the same models as server-side apply);
//   - the policy strategies' paramKind permission check (Admit,
//     paramauth.go): who references a paramKind must be allowed to get
//     all its objects;
//   - kube-controller-manager's ValidatingAdmissionPolicy status
//     controller (typecheck.go, run by Run): Kubernetes' TypeChecker
//     with the served resources as its RESTMapper and the published
//     OpenAPI models (Config.BuiltinModels, a CRD's document) as its
//     schemas, its result applied to status.typeChecking.
//
// As in Kubernetes, policies never apply to the admission policy
// resources themselves, and a policy change reaches enforcement through a
// watch: a write right after a policy's create may not see it yet (the
// lag is the watch's delivery, typically milliseconds). A
// MutatingAdmissionPolicy with reinvocationPolicy IfNeeded runs once more
// when a later mutating plugin changed the object: the dispatcher keeps
// its state in the attempt's objects.Reinvocation, which the mutating
// webhooks share, and the object service runs the chain a second time.
//
// # Concurrency
//
// A Policies is safe for concurrent use: the hooks read an immutable
// snapshot of the compiled policies, which Run's watch goroutines replace
// (under mu) when a policy or binding changes.
package policy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/server/versions"
)

// readyWait is how long a write waits for the policies' first sync, as
// kube-apiserver's admission plugins wait for theirs.
const readyWait = 10 * time.Second

// Config configures Policies.
type Config struct {
	// Registry is the served resources. Required.
	Registry *registry.Registry
	// Log receives the feeds' logs; default slog.Default().
	Log *slog.Logger
	// Authorized answers the CEL authorizer's checks for a user (never
	// nil: the server's own writes are allowed everything); nil allows
	// everything.
	Authorized func(u *auth.User, attrs auth.Attributes) (bool, string)
	// TypeConverter types a resource's objects for ApplyConfiguration
	// mutations; nil (or an error) uses a schemaless converter, which
	// treats every list as atomic.
	TypeConverter func(res *registry.Resource) (managedfields.TypeConverter, error)
	// BuiltinModels returns the OpenAPI models of the built-in resources'
	// types, tagged with x-kubernetes-group-version-kind: the schemas the
	// status controller type-checks policies against (called once, when
	// first needed); nil type-checks custom resources only.
	BuiltinModels func() (map[string]*spec.Schema, error)
}

// Policies keeps the stored admission policies and enforces them through
// its Mutate and Validate hooks. Create it with New, give it the object
// service with Use, and run Run.
type Policies struct {
	cfg        Config
	objects    *objects.Service
	namespaces *registry.Resource
	validating generic.Dispatcher[validating.PolicyHook]
	mutating   generic.Dispatcher[mutating.PolicyHook]

	hooks  atomic.Pointer[hookSet]
	synced chan struct{}
	status *statusQueue // policies whose status is due (typecheck.go)

	modelsOnce sync.Once
	models     map[string]*spec.Schema
	modelsErr  error

	mu    sync.Mutex // guards state, the feeds' view of the stored objects
	state state
}

// hookSet is an immutable snapshot of the compiled policies with their
// bindings, as the dispatchers take them.
type hookSet struct {
	validating []validating.PolicyHook
	mutating   []mutating.PolicyHook
}

// New returns Policies enforcing nothing until Run has listed the stored
// policies.
func New(cfg Config) (*Policies, error) {
	if cfg.Registry == nil {
		return nil, errors.New("admission policy: no registry")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	ns, ok := cfg.Registry.Get(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"})
	if !ok {
		return nil, errors.New("admission policy: namespaces not served")
	}
	p := &Policies{cfg: cfg, namespaces: ns, synced: make(chan struct{}), status: newStatusQueue(),
		state: newState()}
	p.hooks.Store(&hookSet{})
	lister := namespaceLister{reader{p}}
	m := matching.NewMatcher(lister, namespaceClient{l: lister})
	z := authz{authorized: cfg.Authorized}
	p.validating = validating.NewDispatcher(z, generic.NewPolicyMatcher(m))
	p.mutating = mutating.NewDispatcher(z, m, typeConverters{p})
	return p, nil
}

// Use gives p the object service its feeds watch and its lookups read.
// Call it once, before Run and before any request.
func (p *Policies) Use(s *objects.Service) { p.objects = s }

// Synced is closed once every stored policy and binding is enforced.
func (p *Policies) Synced() <-chan struct{} { return p.synced }

// excluded reports whether policies skip res: the admission policy
// resources themselves, as Kubernetes (a policy cannot lock itself in).
func excluded(res *registry.Resource) bool {
	if res.Group != admissionv1.GroupName {
		return false
	}
	switch res.Plural {
	case "validatingadmissionpolicies", "validatingadmissionpolicybindings",
		"mutatingadmissionpolicies", "mutatingadmissionpolicybindings":
		return true
	}
	return false
}

// ready waits for the first sync, up to readyWait.
func (p *Policies) ready(ctx context.Context, attrs admission.Attributes) error {
	select {
	case <-p.synced:
		return nil
	default:
	}
	t := time.NewTimer(readyWait)
	defer t.Stop()
	select {
	case <-p.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return admission.NewForbidden(attrs, fmt.Errorf("not yet ready to handle request"))
	}
}

// attributes returns a's admission attributes once the policies were
// synced, or nil when there are none to dispatch (some reports whether a
// snapshot has some).
func (p *Policies) attributes(ctx context.Context, a *objects.Attempt, some func(*hookSet) bool) (*attributes, error) {
	if !some(p.hooks.Load()) && isSynced(p.synced) {
		return nil, nil
	}
	attrs, err := newAttributes(ctx, a)
	if err != nil {
		return nil, err
	}
	if err := p.ready(ctx, attrs); err != nil {
		return nil, err
	}
	if !some(p.hooks.Load()) {
		return nil, nil
	}
	return attrs, nil
}

// isSynced reports whether ch is closed.
func isSynced(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// warnings forwards the dispatchers' warnings to the attempt.
type warnings struct{ a *objects.Attempt }

func (w warnings) AddWarning(_, text string) { w.a.Warn(text) }

// Mutate is the objects.Hooks.Mutate hook: the MutatingAdmissionPolicies
// matching the attempt, in turn, change a.Object in place.
func (p *Policies) Mutate(ctx context.Context, a *objects.Attempt) error {
	if excluded(a.Request.Resource) || a.Object == nil {
		return nil
	}
	attrs, err := p.attributes(ctx, a, func(h *hookSet) bool { return len(h.mutating) > 0 })
	if attrs == nil || err != nil {
		return err
	}
	hooks := p.hooks.Load().mutating
	if err := p.mutating.Dispatch(warning.WithWarningRecorder(ctx, warnings{a}), attrs, versions.Interfaces(ctx, p.cfg.Registry), hooks); err != nil {
		return err
	}
	return attrs.scaleBack()
}

// Validate is the objects.Hooks.Validate hook: every
// ValidatingAdmissionPolicy binding matching the attempt is evaluated; a
// Deny action refuses it with Kubernetes' Status, Warn adds a warning,
// Audit an annotation on the request's audit record.
func (p *Policies) Validate(ctx context.Context, a *objects.Attempt) error {
	if excluded(a.Request.Resource) {
		return nil
	}
	attrs, err := p.attributes(ctx, a, func(h *hookSet) bool { return len(h.validating) > 0 })
	if attrs == nil || err != nil {
		return err
	}
	hooks := p.hooks.Load().validating
	return p.validating.Dispatch(warning.WithWarningRecorder(ctx, warnings{a}), attrs, versions.Interfaces(ctx, p.cfg.Registry), hooks)
}

// typeConverters is the mutating dispatcher's TypeConverterManager over
// Config.TypeConverter.
type typeConverters struct{ p *Policies }

func (t typeConverters) Run(context.Context) {}

func (t typeConverters) GetTypeConverter(gvk schema.GroupVersionKind) managedfields.TypeConverter {
	if f := t.p.cfg.TypeConverter; f != nil {
		if res, ok := t.p.cfg.Registry.ForKind(gvk.Group, gvk.Version, gvk.Kind); ok {
			if tc, err := f(res); err == nil && tc != nil {
				return tc
			}
		}
	}
	return managedfields.NewDeducedTypeConverter()
}
