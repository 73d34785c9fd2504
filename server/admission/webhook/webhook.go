// Package webhook enforces admission webhooks: the stored
// admissionregistration.k8s.io/v1 ValidatingWebhookConfigurations and
// MutatingWebhookConfigurations, called as kube-apiserver's
// MutatingAdmissionWebhook and ValidatingAdmissionWebhook plugins call
// them, from the object service's Mutate and Validate hooks.
//
// # What is the same as Kubernetes
//
// Every create, update (patches and applies included) and delete attempt
// of every writer (clients, the garbage collector, namespace cleanup) is
// matched against each webhook: rules (operations, apiGroups, apiVersions,
// resources with subresources and wildcards, scope), namespaceSelector
// (the namespace's labels; a namespace's own labels for namespaces),
// objectSelector (the new or the old object), matchConditions (CEL,
// Kubernetes' own matcher; the authorizer variable decides for the
// request's user as the server does, through Config.Authorized), and
// kube-apiserver's exemptions (webhook configurations and admission
// policies are never sent to webhooks; review resources never reach
// admission). A matching webhook gets an AdmissionReview v1 built by
// k8s.io/apiserver's own request builder (uid, kind, resource,
// subResource, requestKind, requestResource, name, namespace, operation,
// userInfo, object, oldObject, dryRun, options) over HTTPS (package
// server/webhook), with its timeoutSeconds. Mutating webhooks run first,
// one after the other in configuration-name order, their JSONPatch
// responses applied; reinvocationPolicy IfNeeded reinvokes a webhook once
// when a later mutating plugin (webhook or MutatingAdmissionPolicy)
// changed the object, through the attempt's objects.Reinvocation as
// kube-apiserver's reinvoking admission chain. Validating webhooks then run in
// parallel. failurePolicy Fail refuses the write when a webhook cannot be
// called or answers badly, Ignore goes on; a dry run is refused by a
// webhook whose sideEffects are not None or NoneOnDryRun. Denials,
// failures and their messages are kube-apiserver's, warnings become
// Warning headers, and audit annotations join the request's audit record.
// A webhook's mutation is in the write's audit diff, which is taken from
// the stored objects.
//
// matchPolicy Equivalent is Kubernetes': a webhook whose rules name
// another served version of the request's resource (a multi-version
// CRD's) is sent the object converted to that version (kind and resource
// the webhook's, requestKind and requestResource the request's), by the
// CRD's conversion (package server/versions), and a mutating
// webhook's patch, applied to the converted object, is converted back.
// A write through /scale is sent as an autoscaling/v1 Scale of the object
// (kind Scale, subResource "scale"), whose patched spec.replicas is
// written back, as kube-apiserver's ScaleREST.
//
// # What differs
//
// The user of the server's own writes is the controller's service account
// (objects.Request.Actor) or system:apiserver.
//
// # Concurrency
//
// A Plugin is safe for concurrent use. Run keeps the configurations
// current from watches and blocks until its context ends; the caller owns
// that goroutine. Until the configurations were first listed, Mutate and
// Validate wait for them.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	apiwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/mirror"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/server/webhookclient"
)

// Config configures a Plugin.
type Config struct {
	Registry *registry.Registry
	// Client calls the webhooks.
	Client *webhookclient.Client
	Log    *slog.Logger
	// Authorized decides the checks of the authorizer variable of
	// matchConditions for the request's user (the server's decisions);
	// nil allows every check.
	Authorized func(u *auth.User, attrs auth.Attributes) (bool, string)
}

// Plugin holds the current webhook configurations and calls them.
type Plugin struct {
	cfg      Config
	objects  *objects.Service
	compiler cel.ConditionCompiler

	// mutating and validating are the current webhooks, in
	// configuration-name order, then in the order of each
	// configuration's list; replaced whole on every change.
	mutating, validating atomic.Pointer[[]apiwebhook.WebhookAccessor]
	// revisions are the resourceVersions of the installed
	// configurations, by kind and name.
	revisions sync.Map // [2]string → int64
	synced    chan struct{}
}

// New returns a Plugin with no webhooks; Use an object service, then Run.
func New(cfg Config) (*Plugin, error) {
	if cfg.Registry == nil || cfg.Client == nil || cfg.Log == nil {
		return nil, errors.New("admission webhook: incomplete config")
	}
	p := &Plugin{cfg: cfg, synced: make(chan struct{}),
		compiler: cel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))}
	empty := []apiwebhook.WebhookAccessor{}
	p.mutating.Store(&empty)
	p.validating.Store(&empty)
	return p, nil
}

// Use sets the object service the configurations are read from and the
// namespaces' labels looked up in. Call it once, before Run.
func (p *Plugin) Use(s *objects.Service) { p.objects = s }

// Synced is closed once both configuration kinds were listed.
func (p *Plugin) Synced() <-chan struct{} { return p.synced }

// Run keeps the webhooks current from mirrors of both configuration
// resources until ctx ends.
func (p *Plugin) Run(ctx context.Context) {
	mirror.RunAll(ctx, func() { close(p.synced) },
		feed(p, "mutatingwebhookconfigurations", &p.mutating,
			func(c *admissionregistrationv1.MutatingWebhookConfiguration) []admissionregistrationv1.MutatingWebhook {
				return c.Webhooks
			},
			registry.DefaultMutatingWebhook,
			func(config string, i int, h *admissionregistrationv1.MutatingWebhook) apiwebhook.WebhookAccessor {
				return apiwebhook.NewMutatingWebhookAccessor(webhookUID(config, h.Name, i), config, h)
			}),
		feed(p, "validatingwebhookconfigurations", &p.validating,
			func(c *admissionregistrationv1.ValidatingWebhookConfiguration) []admissionregistrationv1.ValidatingWebhook {
				return c.Webhooks
			},
			registry.DefaultValidatingWebhook,
			func(config string, i int, h *admissionregistrationv1.ValidatingWebhook) apiwebhook.WebhookAccessor {
				return apiwebhook.NewValidatingWebhookAccessor(webhookUID(config, h.Name, i), config, h)
			}))
}

// feed is the mirror of one configuration kind T, whose webhooks (of type
// H) are decoded with their defaults and, on every change, replace the
// kind's installed ones: configurations in name order, as kube-apiserver,
// then each one's webhooks in its order.
func feed[E any, T interface {
	*E
	metav1.Object
}, H any](p *Plugin, plural string, installed *atomic.Pointer[[]apiwebhook.WebhookAccessor],
	webhooks func(T) []H, defaults func(*H), accessor func(config string, i int, h *H) apiwebhook.WebhookAccessor,
) *mirror.Mirror[T] {
	res, ok := p.cfg.Registry.Get(schema.GroupVersionResource{Group: registry.AdmissionRegistrationGroup, Version: "v1", Resource: plural})
	if !ok {
		panic("admission webhook: " + plural + " not served")
	}
	var m *mirror.Mirror[T]
	m = mirror.New(p.objects, mirror.Config[T]{Resource: res, Log: p.cfg.Log,
		Decode: func(u *unstructured.Unstructured) (T, error) {
			c, err := mirror.Convert[E, T](u)
			if err != nil {
				return c, err
			}
			hs := webhooks(c)
			for i := range hs {
				defaults(&hs[i])
			}
			return c, nil
		},
		Apply: func(changes []mirror.Change[T]) {
			hooks := []apiwebhook.WebhookAccessor{}
			for _, c := range m.List() { // cluster-scoped: by name
				hs := webhooks(c)
				for i := range hs {
					hooks = append(hooks, accessor(c.GetName(), i, &hs[i]))
				}
			}
			installed.Store(&hooks)
			for _, c := range changes {
				key := [2]string{res.Kind, c.Value.GetName()}
				if c.Type == objects.Deleted {
					p.revisions.Delete(key)
				} else {
					rv, _ := strconv.ParseInt(c.Value.GetResourceVersion(), 10, 64)
					p.revisions.Store(key, rv)
				}
			}
		}})
	return m
}

// Installed reports whether the configuration of kind
// (MutatingWebhookConfiguration or ValidatingWebhookConfiguration) named
// name is enforced at resourceVersion rv or later: for tests that wait
// for a configuration they wrote.
func (p *Plugin) Installed(kind, name string, rv int64) bool {
	v, ok := p.revisions.Load([2]string{kind, name})
	return ok && v.(int64) >= rv
}

// webhookUID identifies a webhook within the current set, as
// kube-apiserver's configuration manager names them.
func webhookUID(config, name string, i int) string {
	return fmt.Sprintf("%s/%s/%d", config, name, i)
}

// wait returns once the configurations were listed, or ctx's error.
func (p *Plugin) wait(ctx context.Context) error {
	select {
	case <-p.synced:
		return nil
	default:
	}
	select {
	case <-p.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// exempt reports whether a request is never sent to webhooks, as in
// kube-apiserver: admission configuration resources (to prevent
// circular dependencies).
func exempt(res *registry.Resource) bool {
	if res.Group != registry.AdmissionRegistrationGroup {
		return false
	}
	return strings.HasSuffix(res.Kind, "WebhookConfiguration") || strings.HasPrefix(res.Kind, "ValidatingAdmissionPolicy") || strings.HasPrefix(res.Kind, "MutatingAdmissionPolicy")
}
