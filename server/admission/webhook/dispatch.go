package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	apiwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook"
	webhookerrors "k8s.io/apiserver/pkg/admission/plugin/webhook/errors"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/generic"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/object"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
	webhookrequest "k8s.io/apiserver/pkg/admission/plugin/webhook/request"
	"k8s.io/apiserver/pkg/authentication/user"
	webhookutil "k8s.io/apiserver/pkg/util/webhook"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/server/versions"
	"github.com/objwatch/objwatch/server/webhookclient"
)

// Audit annotation prefixes, as kube-apiserver's webhook plugins write
// them.
const (
	mutationAnnotationPrefix           = "mutation.webhook.admission.k8s.io/"
	patchAnnotationPrefix              = "patch.webhook.admission.k8s.io/"
	mutationFailedOpenAnnotationPrefix = "failed-open." + mutationAnnotationPrefix
	validationFailedOpenPrefix         = "failed-open.validating.webhook.admission.k8s.io/"
)

// call is one write attempt as the webhooks see it.
type call struct {
	a      *objects.Attempt
	attr   admission.Attributes
	va     *admission.VersionedAttributes // in the request's kind
	record *audit.Record
	ois    admission.ObjectInterfaces
	// versioned caches the attempt's objects converted to the kinds
	// webhooks named (matchPolicy Equivalent), until the object changes.
	versioned map[schema.GroupVersionKind]*admission.VersionedAttributes
	// scale: the write is through /scale; attr's objects are the Scales
	// of the attempt's, as kube-apiserver's ScaleREST hands admission.
	scale bool
	// nsLabels caches the namespace's labels for the attempt.
	nsLabels labels.Set
	nsErr    error
	nsDone   bool
}

func (p *Plugin) newCall(ctx context.Context, a *objects.Attempt) (*call, error) {
	req := a.Request
	res := req.Resource
	c := &call{a: a, record: audit.RecordFrom(ctx), ois: versions.Interfaces(ctx, p.cfg.Registry),
		scale: req.Subresource == "scale" && res.Scale != nil}
	var obj, old runtime.Object
	if a.Object != nil {
		obj = a.Object
		if c.scale {
			v, err := res.Scale.ScaleView(a.Object)
			if err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
			obj = v
		}
	}
	if a.Old != nil {
		old = a.Old
		if c.scale {
			v, err := res.Scale.ScaleView(a.Old)
			if err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
			old = v
		}
	}
	name, ns := req.Name, req.Namespace
	if name == "" && a.Object != nil {
		name = a.Object.GetName()
	}
	if ns == "" && registry.IsNamespaceResource(res) {
		ns = name // as kube-apiserver's create handler
	}
	var options runtime.Object
	switch a.Operation {
	case objects.OpCreate:
		options = &metav1.CreateOptions{TypeMeta: metav1.TypeMeta{Kind: "CreateOptions", APIVersion: "meta.k8s.io/v1"},
			DryRun: dryRun(a.Options.DryRun), FieldManager: a.Options.FieldManager, FieldValidation: a.Options.FieldValidation}
	case objects.OpUpdate:
		options = &metav1.UpdateOptions{TypeMeta: metav1.TypeMeta{Kind: "UpdateOptions", APIVersion: "meta.k8s.io/v1"},
			DryRun: dryRun(a.Options.DryRun), FieldManager: a.Options.FieldManager, FieldValidation: a.Options.FieldValidation}
	case objects.OpDelete:
		d := metav1.DeleteOptions{}
		if a.Delete != nil {
			d = *a.Delete
		}
		d.TypeMeta = metav1.TypeMeta{Kind: "DeleteOptions", APIVersion: "meta.k8s.io/v1"}
		options = &d
	}
	u := audit.WriterOf(req)
	kind := res.KindFor(req.Subresource)
	c.attr = admission.NewAttributesRecord(obj, old, kind, ns, name, res.GVR(), req.Subresource,
		admission.Operation(a.Operation), options, req.DryRun,
		&user.DefaultInfo{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra})
	c.va = &admission.VersionedAttributes{Attributes: c.attr, VersionedObject: admission.NewLazyObject(obj), VersionedOldObject: admission.NewLazyObject(old), VersionedKind: kind}
	return c, nil
}

// versionedAttributes returns the attempt's objects in kind: the
// request's own, or converted to the version a webhook's rule names
// (matchPolicy Equivalent), as kube-apiserver's dispatchers convert them.
func (c *call) versionedAttributes(kind schema.GroupVersionKind) (*admission.VersionedAttributes, error) {
	if kind == c.va.VersionedKind {
		return c.va, nil
	}
	if va, ok := c.versioned[kind]; ok {
		return va, nil
	}
	va, err := admission.NewVersionedAttributes(c.attr, kind, c.ois)
	if err != nil {
		return nil, err
	}
	if c.versioned == nil {
		c.versioned = map[schema.GroupVersionKind]*admission.VersionedAttributes{}
	}
	c.versioned[kind] = va
	return va, nil
}

func dryRun(on bool) []string {
	if on {
		return []string{metav1.DryRunAll}
	}
	return nil
}

func (c *call) annotate(kv ...string) {
	if c.record != nil {
		c.record.Annotate(kv...)
	}
}

// setObject replaces the attempt's object by obj (a mutating webhook's
// patch, in the request's kind): through /scale, obj is a Scale whose
// replicas are written to the attempt's object.
func (c *call) setObject(obj *unstructured.Unstructured) error {
	if c.scale {
		cur := c.a.Object.DeepCopy()
		if err := c.a.Request.Resource.Scale.SetReplicas(cur, obj); err != nil {
			return apierrors.NewInternalError(err)
		}
		c.a.Object = cur
	} else {
		c.a.Object = obj
	}
	c.va.VersionedObject = admission.NewLazyObject(obj)
	c.attr = admission.NewAttributesRecord(obj, c.attr.GetOldObject(), c.attr.GetKind(), c.attr.GetNamespace(), c.attr.GetName(),
		c.attr.GetResource(), c.attr.GetSubresource(), c.attr.GetOperation(), c.attr.GetOperationOptions(), c.attr.IsDryRun(), c.attr.GetUserInfo())
	c.va.Attributes = c.attr
	c.versioned = nil
	return nil
}

// Mutate is the object service's Mutate hook: the mutating webhooks on a
// create or update attempt.
func (p *Plugin) Mutate(ctx context.Context, a *objects.Attempt) error {
	if exempt(a.Request.Resource) {
		return nil
	}
	if err := p.wait(ctx); err != nil {
		return apierrors.NewTimeoutError("request did not complete within requested timeout", 0)
	}
	hooks := *p.mutating.Load()
	if len(hooks) == 0 {
		return nil
	}
	c, err := p.newCall(ctx, a)
	if err != nil {
		return err
	}
	old := a.Object
	if err := p.mutate(ctx, c, hooks, a.Reinvocation()); err != nil {
		return err
	}
	if a.Object == old {
		return nil
	}
	// What kube-apiserver's handlers refuse of a mutated object.
	if a.Object.GetNamespace() != a.Request.Namespace && a.Request.Resource.Namespaced {
		return apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	if a.Old == nil {
		return nil // a create may be renamed; its uid is the server's
	}
	immutable := func(f, v string) error {
		return apistatus.Invalid(a.Request.Resource.GVK().GroupKind(), a.Object.GetName(), field.ErrorList{
			field.Invalid(field.NewPath("metadata", f), v, "field is immutable")})
	}
	if a.Object.GetName() != a.Old.GetName() {
		return immutable("name", a.Object.GetName())
	}
	if a.Object.GetUID() != "" && a.Object.GetUID() != a.Old.GetUID() {
		return immutable("uid", string(a.Object.GetUID()))
	}
	return nil
}

// reinvokeKey is the mutating webhooks' key in a reinvocation context.
const reinvokeKey = "MutatingAdmissionWebhook"

// reinvokeState is the mutating webhooks' state in an attempt's
// reinvocation context, as kube-apiserver's webhookReinvokeContext.
type reinvokeState struct {
	last     *unstructured.Unstructured // the object after this plugin's last pass
	invoked  sets.Set[string]           // IfNeeded webhooks called since the last change
	reinvoke sets.Set[string]           // those to call again on the reinvocation pass
}

// changed moves the webhooks invoked so far to those to reinvoke.
func (st *reinvokeState) changed() {
	st.reinvoke = st.reinvoke.Union(st.invoked)
	st.invoked = sets.New[string]()
}

// mutate calls the mutating webhooks in order, as kube-apiserver's
// mutating dispatcher: on the reinvocation pass of rc only those with
// reinvocationPolicy IfNeeded that ran before a later change (one of
// theirs or any other mutating plugin's), and a change asks rc for that
// pass.
func (p *Plugin) mutate(ctx context.Context, c *call, hooks []apiwebhook.WebhookAccessor, rc *objects.Reinvocation) error {
	st, _ := rc.Value(reinvokeKey).(*reinvokeState)
	if st == nil {
		st = &reinvokeState{invoked: sets.New[string](), reinvoke: sets.New[string]()}
		rc.SetValue(reinvokeKey, st)
	}
	round := 0
	if rc.IsReinvoke() {
		round = 1
		if st.last == nil || !apiequality.Semantic.DeepEqual(st.last, c.a.Object) {
			st.changed() // a later plugin changed the object
		}
	}
	defer func() {
		st.last = nil
		if c.a.Object != nil {
			st.last = c.a.Object.DeepCopy()
		}
	}()
	for i, h := range hooks {
		inv, err := p.shouldCall(ctx, c, h)
		if err != nil {
			return err
		}
		if inv == nil || (round == 1 && !st.reinvoke.Has(h.GetUID())) {
			continue
		}
		mh, _ := h.GetMutatingWebhook()
		changed, err := p.callMutating(ctx, c, mh, inv, round, i)
		if changed {
			st.changed()
			rc.SetShouldReinvoke()
		}
		if mh.ReinvocationPolicy != nil && *mh.ReinvocationPolicy == admissionregistrationv1.IfNeededReinvocationPolicy {
			st.invoked.Insert(h.GetUID())
		}
		if err == nil {
			continue
		}
		var callErr *webhookutil.ErrCallingWebhook
		if errors.As(err, &callErr) {
			if ignores(mh.FailurePolicy) {
				p.cfg.Log.Warn("admission webhook: failed calling webhook, failing open", "webhook", mh.Name, "err", callErr)
				c.annotate(fmt.Sprintf("%sround_%d_index_%d", mutationFailedOpenAnnotationPrefix, round, i), mh.Name)
				if ctx.Err() != nil {
					return apierrors.NewTimeoutError("request did not complete within requested timeout", 0)
				}
				continue
			}
			return apierrors.NewInternalError(err)
		}
		var rejection *webhookutil.ErrWebhookRejection
		if errors.As(err, &rejection) {
			return rejection.Status
		}
		return err
	}
	return nil
}

func ignores(fp *admissionregistrationv1.FailurePolicyType) bool {
	return fp != nil && *fp == admissionregistrationv1.Ignore
}

// Validate is the object service's Validate hook: on a delete attempt the
// mutating webhooks (which may not change anything), then the validating
// webhooks, in parallel.
func (p *Plugin) Validate(ctx context.Context, a *objects.Attempt) error {
	if exempt(a.Request.Resource) {
		return nil
	}
	if err := p.wait(ctx); err != nil {
		return apierrors.NewTimeoutError("request did not complete within requested timeout", 0)
	}
	var c *call
	if a.Operation == objects.OpDelete {
		if hooks := *p.mutating.Load(); len(hooks) > 0 {
			var err error
			if c, err = p.newCall(ctx, a); err != nil {
				return err
			}
			// A delete has no object to change: a pass of its own.
			if err := p.mutate(ctx, c, hooks, &objects.Reinvocation{}); err != nil {
				return err
			}
		}
	}
	hooks := *p.validating.Load()
	if len(hooks) == 0 {
		return nil
	}
	if c == nil {
		var err error
		if c, err = p.newCall(ctx, a); err != nil {
			return err
		}
	}
	type relevant struct {
		h   *admissionregistrationv1.ValidatingWebhook
		inv *generic.WebhookInvocation
		idx int
	}
	var calls []relevant
	for i, h := range hooks {
		inv, err := p.shouldCall(ctx, c, h)
		if err != nil {
			return err
		}
		if inv != nil {
			// Converted here, not in the parallel calls.
			if _, err := c.versionedAttributes(inv.Kind); err != nil {
				return apierrors.NewInternalError(err)
			}
			vh, _ := h.GetValidatingWebhook()
			calls = append(calls, relevant{vh, inv, i})
		}
	}
	if len(calls) == 0 {
		return nil
	}
	if ctx.Err() != nil {
		return apierrors.NewTimeoutError("request did not complete within requested timeout", 0)
	}
	// As kube-apiserver, in parallel; warnings are kept in webhook order.
	errs := make([]error, len(calls))
	warnings := make([][]string, len(calls))
	var wg sync.WaitGroup
	for k, r := range calls {
		run := wg.Go
		if len(calls) == 1 {
			// One webhook: called from this goroutine, without a handoff
			// to another (which, on a loaded machine, waits to be run).
			run = func(f func()) { f() }
		}
		run(func() {
			_, err := p.callHook(ctx, c, r.h.Name, r.h.ClientConfig, r.h.SideEffects, r.h.TimeoutSeconds, r.inv, false, func(w string) {
				warnings[k] = append(warnings[k], w)
			})
			if err == nil {
				return
			}
			var callErr *webhookutil.ErrCallingWebhook
			if errors.As(err, &callErr) {
				if ignores(r.h.FailurePolicy) {
					p.cfg.Log.Warn("admission webhook: failed calling webhook, failing open", "webhook", r.h.Name, "err", callErr)
					c.annotate(fmt.Sprintf("%sround_0_index_%d", validationFailedOpenPrefix, r.idx), r.h.Name)
					return
				}
				errs[k] = apierrors.NewInternalError(err)
				return
			}
			var rejection *webhookutil.ErrWebhookRejection
			if errors.As(err, &rejection) {
				err = rejection.Status
			}
			errs[k] = err
		})
	}
	wg.Wait()
	for _, ws := range warnings {
		for _, w := range ws {
			c.a.Warn(w)
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// shouldCall is kube-apiserver's ShouldCallHook: nil when h does not
// apply to the attempt, else the invocation; an error when matching
// failed (an unknown namespace, a match condition that failed to
// evaluate under failurePolicy Fail).
func (p *Plugin) shouldCall(ctx context.Context, c *call, h apiwebhook.WebhookAccessor) (*generic.WebhookInvocation, error) {
	if ok, err := p.matchNamespace(ctx, c, h); !ok || err != nil {
		return nil, err
	}
	var om object.Matcher
	if ok, err := om.MatchObjectSelector(h, c.attr); !ok {
		if err != nil {
			return nil, err
		}
		return nil, nil
	}
	inv, err := p.matchRules(c, h)
	if inv == nil || err != nil {
		return nil, err
	}
	if len(h.GetMatchConditions()) > 0 {
		va, err := c.versionedAttributes(inv.Kind)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		res := h.GetCompiledMatcher(p.compiler).Match(ctx, va, nil, auth.Authorizer(c.a.Request.User, p.cfg.Authorized))
		if res.Error != nil {
			p.cfg.Log.Warn("admission webhook: failed evaluating match conditions, failing closed", "webhook", h.GetName(), "err", res.Error)
			return nil, apierrors.NewForbidden(c.attr.GetResource().GroupResource(), c.attr.GetName(), res.Error)
		}
		if !res.Matches {
			return nil, nil
		}
	}
	return inv, nil
}

// matchRules is the rules part of kube-apiserver's ShouldCallHook: the
// invocation of h's first rule that matches the request; with
// matchPolicy Equivalent, else the first rule (in order) that matches
// another served version of the resource, whose kind the webhook is then
// sent.
func (p *Plugin) matchRules(c *call, h apiwebhook.WebhookAccessor) (*generic.WebhookInvocation, error) {
	for _, r := range h.GetRules() {
		m := rules.Matcher{Rule: r, Attr: c.attr}
		if m.Matches() {
			return &generic.WebhookInvocation{Webhook: h, Resource: c.attr.GetResource(), Subresource: c.attr.GetSubresource(), Kind: c.attr.GetKind()}, nil
		}
	}
	if mp := h.GetMatchPolicy(); mp == nil || *mp != admissionregistrationv1.Equivalent {
		return nil, nil
	}
	mapper := c.ois.GetEquivalentResourceMapper()
	equivalents := mapper.EquivalentResourcesFor(c.attr.GetResource(), c.attr.GetSubresource())
	attr := &resourceOverride{Attributes: c.attr}
	for _, r := range h.GetRules() {
		for _, eq := range equivalents {
			if eq == c.attr.GetResource() {
				continue
			}
			attr.resource = eq
			m := rules.Matcher{Rule: r, Attr: attr}
			if !m.Matches() {
				continue
			}
			kind := mapper.KindFor(eq, c.attr.GetSubresource())
			if kind.Empty() {
				return nil, apierrors.NewInternalError(fmt.Errorf("unable to convert to %v: unknown kind", eq))
			}
			return &generic.WebhookInvocation{Webhook: h, Resource: eq, Subresource: c.attr.GetSubresource(), Kind: kind}, nil
		}
	}
	return nil, nil
}

// resourceOverride is attributes with another resource, for matching an
// equivalent resource.
type resourceOverride struct {
	admission.Attributes
	resource schema.GroupVersionResource
}

func (a *resourceOverride) GetResource() schema.GroupVersionResource { return a.resource }

// matchNamespace is kube-apiserver's namespace matcher: cluster-scoped
// objects other than namespaces always match; otherwise the namespace's
// labels (the object's own, for a create or update of a namespace) must
// match the webhook's namespaceSelector.
func (p *Plugin) matchNamespace(ctx context.Context, c *call, h apiwebhook.WebhookAccessor) (bool, error) {
	ns := c.attr.GetNamespace()
	isNamespace := registry.IsNamespaceResource(c.a.Request.Resource)
	if ns == "" && !isNamespace {
		return true, nil
	}
	sel, err := h.GetParsedNamespaceSelector()
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	if sel.Empty() {
		return true, nil
	}
	if !c.nsDone {
		c.nsDone = true
		c.nsLabels, c.nsErr = p.namespaceLabels(ctx, c, ns, isNamespace)
	}
	if c.nsErr != nil {
		return false, c.nsErr
	}
	return sel.Matches(c.nsLabels), nil
}

func (p *Plugin) namespaceLabels(ctx context.Context, c *call, ns string, isNamespace bool) (labels.Set, error) {
	if isNamespace && c.a.Request.Subresource == "" && c.a.Object != nil {
		return c.a.Object.GetLabels(), nil
	}
	res, ok := p.cfg.Registry.Get(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"})
	if !ok {
		return nil, apierrors.NewInternalError(errors.New("namespaces are not served"))
	}
	req := &objects.Request{Verb: "get", Resource: res, Name: ns}
	// The watch cache's copy first, as kube-apiserver's lister; a live
	// read when it does not have the namespace yet.
	obj, err := p.objects.Get(ctx, req, &metav1.GetOptions{ResourceVersion: "0"})
	if apierrors.IsNotFound(err) {
		obj, err = p.objects.Get(ctx, req, &metav1.GetOptions{})
	}
	if err != nil {
		if _, ok := err.(apierrors.APIStatus); ok {
			return nil, err
		}
		return nil, apierrors.NewInternalError(err)
	}
	return obj.GetLabels(), nil
}

// callMutating calls one mutating webhook and applies its patch; changed
// reports whether the object changed.
func (p *Plugin) callMutating(ctx context.Context, c *call, h *admissionregistrationv1.MutatingWebhook, inv *generic.WebhookInvocation, round, idx int) (changed bool, err error) {
	annKey := fmt.Sprintf("round_%d_index_%d", round, idx)
	defer func() {
		v, _ := json.Marshal(struct {
			Configuration string `json:"configuration"`
			Webhook       string `json:"webhook"`
			Mutated       bool   `json:"mutated"`
		}{inv.Webhook.GetConfigurationName(), h.Name, changed})
		c.annotate(mutationAnnotationPrefix+annKey, string(v))
	}()
	result, err := p.callHook(ctx, c, h.Name, h.ClientConfig, h.SideEffects, h.TimeoutSeconds, inv, true, c.a.Warn)
	if err != nil || len(result.Patch) == 0 {
		return false, err
	}
	patch, err := jsonpatch.DecodePatch(result.Patch)
	if err != nil {
		return false, &webhookutil.ErrCallingWebhook{WebhookName: h.Name, Reason: fmt.Errorf("received undecodable patch in webhook response: %w", err), Status: apierrors.NewServiceUnavailable("error decoding patch in webhook response")}
	}
	if len(patch) == 0 {
		return false, nil
	}
	va, err := c.versionedAttributes(inv.Kind)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	cur, _ := va.VersionedObject.Object().(*unstructured.Unstructured)
	if cur == nil {
		return false, apierrors.NewInternalError(fmt.Errorf("admission webhook %q attempted to modify the object, which is not supported for this operation", h.Name))
	}
	if result.PatchType != admissionv1.PatchTypeJSONPatch {
		return false, &webhookutil.ErrCallingWebhook{WebhookName: h.Name, Reason: fmt.Errorf("unsupported patch type %q", result.PatchType), Status: webhookerrors.ToStatusErr(h.Name, result.Result)}
	}
	js, err := cur.MarshalJSON()
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	patched, err := patch.Apply(js)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(patched); err != nil {
		return false, apierrors.NewInternalError(err)
	}
	if obj.GroupVersionKind() != cur.GroupVersionKind() {
		return false, apierrors.NewInternalError(fmt.Errorf("admission webhook %q changed the object's apiVersion or kind", h.Name))
	}
	changed = !apiequality.Semantic.DeepEqual(cur.Object, obj.Object)
	if c.record != nil && c.record.WantsRequest() {
		v, _ := json.Marshal(struct {
			Configuration string          `json:"configuration"`
			Webhook       string          `json:"webhook"`
			Patch         jsonpatch.Patch `json:"patch,omitempty"`
			PatchType     string          `json:"patchType,omitempty"`
		}{inv.Webhook.GetConfigurationName(), h.Name, patch, string(admissionv1.PatchTypeJSONPatch)})
		c.annotate(patchAnnotationPrefix+annKey, string(v))
	}
	if inv.Kind != c.va.VersionedKind {
		if !changed {
			return false, nil // nothing to convert back
		}
		// The patched object in the webhook's version, back in the
		// request's, as kube-apiserver's dispatcher converts it.
		back := &unstructured.Unstructured{}
		back.SetGroupVersionKind(c.va.VersionedKind)
		if err := c.ois.GetObjectConvertor().Convert(obj, back, nil); err != nil {
			return false, apierrors.NewInternalError(fmt.Errorf("failed to convert object: %w", err))
		}
		obj = back
	}
	if err := c.setObject(obj); err != nil {
		return false, err
	}
	return changed, nil
}

// callHook sends one webhook its review and checks the answer, with
// kube-apiserver's errors: *webhookutil.ErrCallingWebhook when it could
// not be called or answered badly (failurePolicy decides),
// *webhookutil.ErrWebhookRejection when it denied the request.
// Its warnings go to warn, whether or not it allowed the request.
func (p *Plugin) callHook(ctx context.Context, c *call, name string, cc admissionregistrationv1.WebhookClientConfig, sideEffects *admissionregistrationv1.SideEffectClass, timeoutSeconds *int32, inv *generic.WebhookInvocation, mutating bool, warn func(string)) (*webhookrequest.AdmissionResponse, error) {
	if c.attr.IsDryRun() {
		if sideEffects == nil {
			return nil, &webhookutil.ErrCallingWebhook{WebhookName: name, Reason: errors.New("Webhook SideEffects is nil"), Status: apierrors.NewBadRequest("Webhook SideEffects is nil")}
		}
		if *sideEffects != admissionregistrationv1.SideEffectClassNone && *sideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun {
			return nil, webhookerrors.NewDryRunUnsupportedErr(name)
		}
	}
	va, err := c.versionedAttributes(inv.Kind)
	if err != nil {
		return nil, apierrors.NewInternalError(err) // failurePolicy does not apply
	}
	uid, request, response, err := webhookrequest.CreateAdmissionObjects(va, inv)
	if err != nil {
		return nil, &webhookutil.ErrCallingWebhook{WebhookName: name, Reason: fmt.Errorf("could not create admission objects: %w", err), Status: apierrors.NewBadRequest("error creating admission objects")}
	}
	body, err := encodeReview(request)
	if err != nil {
		return nil, &webhookutil.ErrCallingWebhook{WebhookName: name, Reason: fmt.Errorf("could not create admission objects: %w", err), Status: apierrors.NewBadRequest("error creating admission objects")}
	}
	ep := webhookclient.Endpoint{CABundle: cc.CABundle}
	if cc.URL != nil {
		ep.URL = *cc.URL
	} else if s := cc.Service; s != nil {
		ep.Service = &webhookclient.ServiceRef{Namespace: s.Namespace, Name: s.Name}
		if s.Path != nil {
			ep.Service.Path = *s.Path
		}
		if s.Port != nil {
			ep.Service.Port = *s.Port
		}
	}
	timeout := 10 * time.Second
	if timeoutSeconds != nil {
		timeout = time.Duration(*timeoutSeconds) * time.Second
	}
	resp, err := p.cfg.Client.Send(ctx, ep, timeout, body)
	if err == nil {
		response, err = decodeResponse(resp, response)
	}
	if err != nil {
		status, ok := err.(*apierrors.StatusError)
		if !ok {
			status = apierrors.NewServiceUnavailable("error calling webhook")
		}
		return nil, &webhookutil.ErrCallingWebhook{WebhookName: name, Reason: fmt.Errorf("failed to call webhook: %w", err), Status: status}
	}
	result, err := webhookrequest.VerifyAdmissionResponse(uid, mutating, response)
	if err != nil {
		return nil, &webhookutil.ErrCallingWebhook{WebhookName: name, Reason: fmt.Errorf("received invalid webhook response: %w", err), Status: apierrors.NewServiceUnavailable("error validating webhook response")}
	}
	for k, v := range result.AuditAnnotations {
		c.annotate(name+"/"+k, v)
	}
	for _, w := range result.Warnings {
		warn(w)
	}
	if !result.Allowed {
		return nil, &webhookutil.ErrWebhookRejection{Status: webhookerrors.ToStatusErr(name, result.Result)}
	}
	return result, nil
}
