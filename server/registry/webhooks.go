package registry

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	utilwebhook "k8s.io/apiserver/pkg/util/webhook"
)

// AdmissionRegistrationGroup is the API group of admission webhook
// configurations (and admission policies).
const AdmissionRegistrationGroup = admissionregistrationv1.GroupName

// The admission webhook configurations, defaulted and validated as
// Kubernetes' admissionregistration registry does (k8s.io/kubernetes
// pkg/apis/admissionregistration/v1/defaults.go, validation/validation.go,
// pkg/registry/admissionregistration). Package server/admission/webhook
// enforces them.

func webhookResources() []*Resource {
	count := Column{Name: "Webhooks", Type: "integer", Description: "Webhooks indicates the number of webhooks in the configuration.", Value: func(obj map[string]any) any {
		list, _ := obj["webhooks"].([]any)
		return int64(len(list))
	}}
	return []*Resource{
		{
			Group: AdmissionRegistrationGroup, Version: "v1", Plural: "validatingwebhookconfigurations",
			Singular: "validatingwebhookconfiguration", Kind: "ValidatingWebhookConfiguration",
			Categories: []string{"api-extensions"}, Generation: true,
			Columns: []Column{count, ageColumn}, PatchSchema: &admissionregistrationv1.ValidatingWebhookConfiguration{},
			Strategy: typed[admissionregistrationv1.ValidatingWebhookConfiguration]{
				prepare: func(c, _ *admissionregistrationv1.ValidatingWebhookConfiguration) {
					for i := range c.Webhooks {
						DefaultValidatingWebhook(&c.Webhooks[i])
					}
				},
				validate: validateValidatingWebhookConfiguration,
			},
		},
		{
			Group: AdmissionRegistrationGroup, Version: "v1", Plural: "mutatingwebhookconfigurations",
			Singular: "mutatingwebhookconfiguration", Kind: "MutatingWebhookConfiguration",
			Categories: []string{"api-extensions"}, Generation: true,
			Columns: []Column{count, ageColumn}, PatchSchema: &admissionregistrationv1.MutatingWebhookConfiguration{},
			Strategy: typed[admissionregistrationv1.MutatingWebhookConfiguration]{
				prepare: func(c, _ *admissionregistrationv1.MutatingWebhookConfiguration) {
					for i := range c.Webhooks {
						DefaultMutatingWebhook(&c.Webhooks[i])
					}
				},
				validate: validateMutatingWebhookConfiguration,
			},
		},
	}
}

// DefaultValidatingWebhook applies Kubernetes' defaults: failurePolicy
// Fail, matchPolicy Equivalent, empty selectors, timeoutSeconds 10, rule
// scope "*", service port 443.
func DefaultValidatingWebhook(h *admissionregistrationv1.ValidatingWebhook) {
	defaultWebhookCommon(&h.FailurePolicy, &h.MatchPolicy, &h.NamespaceSelector, &h.ObjectSelector, &h.TimeoutSeconds, h.Rules, &h.ClientConfig)
}

// DefaultMutatingWebhook applies DefaultValidatingWebhook's defaults and
// reinvocationPolicy Never.
func DefaultMutatingWebhook(h *admissionregistrationv1.MutatingWebhook) {
	defaultWebhookCommon(&h.FailurePolicy, &h.MatchPolicy, &h.NamespaceSelector, &h.ObjectSelector, &h.TimeoutSeconds, h.Rules, &h.ClientConfig)
	if h.ReinvocationPolicy == nil {
		p := admissionregistrationv1.NeverReinvocationPolicy
		h.ReinvocationPolicy = &p
	}
}

func defaultWebhookCommon(fp **admissionregistrationv1.FailurePolicyType, mp **admissionregistrationv1.MatchPolicyType, ns, obj **metav1.LabelSelector, timeout **int32, rules []admissionregistrationv1.RuleWithOperations, cc *admissionregistrationv1.WebhookClientConfig) {
	if *fp == nil {
		p := admissionregistrationv1.Fail
		*fp = &p
	}
	if *mp == nil {
		p := admissionregistrationv1.Equivalent
		*mp = &p
	}
	if *ns == nil {
		*ns = &metav1.LabelSelector{}
	}
	if *obj == nil {
		*obj = &metav1.LabelSelector{}
	}
	if *timeout == nil {
		t := int32(10)
		*timeout = &t
	}
	for i := range rules {
		if rules[i].Scope == nil {
			s := admissionregistrationv1.AllScopes
			rules[i].Scope = &s
		}
	}
	if cc.Service != nil && cc.Service.Port == nil {
		p := int32(443)
		cc.Service.Port = &p
	}
}

// webhookFields are the fields both webhook types validate alike.
type webhookFields struct {
	name                      string
	rules                     []admissionregistrationv1.RuleWithOperations
	failurePolicy             *admissionregistrationv1.FailurePolicyType
	matchPolicy               *admissionregistrationv1.MatchPolicyType
	sideEffects               *admissionregistrationv1.SideEffectClass
	timeoutSeconds            *int32
	namespaceSelector, objSel *metav1.LabelSelector
	clientConfig              admissionregistrationv1.WebhookClientConfig
	matchConditions           []admissionregistrationv1.MatchCondition
	admissionReviewVersions   []string
	reinvocationPolicy        *admissionregistrationv1.ReinvocationPolicyType
	mutating                  bool
}

// webhookValidationOptions are Kubernetes' relaxations on update for what
// the stored configuration already has.
type webhookValidationOptions struct {
	ignoreMatchConditions    bool
	requireNoSideEffects     bool
	requireRecognizedVersion bool
	requireUniqueNames       bool
	allowInvalidLabelValue   bool
	storedExpressions        sets.Set[string]
}

func validatingWebhookFields(hs []admissionregistrationv1.ValidatingWebhook) []webhookFields {
	out := make([]webhookFields, len(hs))
	for i, h := range hs {
		out[i] = webhookFields{name: h.Name, rules: h.Rules, failurePolicy: h.FailurePolicy, matchPolicy: h.MatchPolicy,
			sideEffects: h.SideEffects, timeoutSeconds: h.TimeoutSeconds, namespaceSelector: h.NamespaceSelector, objSel: h.ObjectSelector,
			clientConfig: h.ClientConfig, matchConditions: h.MatchConditions, admissionReviewVersions: h.AdmissionReviewVersions}
	}
	return out
}

func mutatingWebhookFields(hs []admissionregistrationv1.MutatingWebhook) []webhookFields {
	out := make([]webhookFields, len(hs))
	for i, h := range hs {
		out[i] = webhookFields{name: h.Name, rules: h.Rules, failurePolicy: h.FailurePolicy, matchPolicy: h.MatchPolicy,
			sideEffects: h.SideEffects, timeoutSeconds: h.TimeoutSeconds, namespaceSelector: h.NamespaceSelector, objSel: h.ObjectSelector,
			clientConfig: h.ClientConfig, matchConditions: h.MatchConditions, admissionReviewVersions: h.AdmissionReviewVersions,
			reinvocationPolicy: h.ReinvocationPolicy, mutating: true}
	}
	return out
}

func validateValidatingWebhookConfiguration(c, old *admissionregistrationv1.ValidatingWebhookConfiguration) field.ErrorList {
	var oldHooks []webhookFields
	if old != nil {
		oldHooks = validatingWebhookFields(old.Webhooks)
	}
	return validateWebhooks(validatingWebhookFields(c.Webhooks), oldHooks, old != nil)
}

func validateMutatingWebhookConfiguration(c, old *admissionregistrationv1.MutatingWebhookConfiguration) field.ErrorList {
	var oldHooks []webhookFields
	if old != nil {
		oldHooks = mutatingWebhookFields(old.Webhooks)
	}
	return validateWebhooks(mutatingWebhookFields(c.Webhooks), oldHooks, old != nil)
}

// validateWebhooks validates a configuration's webhooks, on update with
// the relaxations Kubernetes grants what old already has.
func validateWebhooks(hooks, old []webhookFields, update bool) field.ErrorList {
	opts := webhookValidationOptions{requireNoSideEffects: true, requireRecognizedVersion: true, requireUniqueNames: true,
		storedExpressions: sets.New[string]()}
	if update {
		opts.ignoreMatchConditions = len(hooks) == len(old)
		names := sets.New[string]()
		for i, h := range old {
			if opts.ignoreMatchConditions && !reflect.DeepEqual(h.matchConditions, hooks[i].matchConditions) {
				opts.ignoreMatchConditions = false
			}
			if h.sideEffects == nil || !webhookNoSideEffectClasses.Has(string(*h.sideEffects)) {
				opts.requireNoSideEffects = false
			}
			if len(h.admissionReviewVersions) > 0 && !slices.ContainsFunc(h.admissionReviewVersions, isWebhookReviewVersion) {
				opts.requireRecognizedVersion = false
			}
			if names.Has(h.name) {
				opts.requireUniqueNames = false
			}
			names.Insert(h.name)
			strict := metav1validation.LabelSelectorValidationOptions{}
			for _, sel := range []*metav1.LabelSelector{h.namespaceSelector, h.objSel} {
				if sel != nil && len(metav1validation.ValidateLabelSelector(sel, strict, nil)) > 0 {
					opts.allowInvalidLabelValue = true
				}
			}
			for _, mc := range h.matchConditions {
				opts.storedExpressions.Insert(mc.Expression)
			}
		}
	}
	var errs field.ErrorList
	names := sets.New[string]()
	for i, h := range hooks {
		p := field.NewPath("webhooks").Index(i)
		errs = append(errs, validateWebhook(&h, opts, p)...)
		errs = append(errs, validateWebhookReviewVersions(h.admissionReviewVersions, opts.requireRecognizedVersion, p.Child("admissionReviewVersions"))...)
		if opts.requireUniqueNames && h.name != "" {
			if names.Has(h.name) {
				errs = append(errs, field.Duplicate(p.Child("name"), h.name))
			} else {
				names.Insert(h.name)
			}
		}
	}
	return errs
}

var (
	webhookFailurePolicies      = sets.NewString(string(admissionregistrationv1.Ignore), string(admissionregistrationv1.Fail))
	webhookMatchPolicies        = sets.NewString(string(admissionregistrationv1.Exact), string(admissionregistrationv1.Equivalent))
	webhookReinvocationPolicies = sets.NewString(string(admissionregistrationv1.NeverReinvocationPolicy), string(admissionregistrationv1.IfNeededReinvocationPolicy))
	webhookSideEffectClasses    = sets.NewString(string(admissionregistrationv1.SideEffectClassUnknown), string(admissionregistrationv1.SideEffectClassNone),
		string(admissionregistrationv1.SideEffectClassSome), string(admissionregistrationv1.SideEffectClassNoneOnDryRun))
	webhookNoSideEffectClasses = sets.NewString(string(admissionregistrationv1.SideEffectClassNone), string(admissionregistrationv1.SideEffectClassNoneOnDryRun))
	webhookOperations          = sets.NewString("*", "CREATE", "UPDATE", "DELETE", "CONNECT")
	webhookRuleScopes          = sets.NewString(string(admissionregistrationv1.ClusterScope), string(admissionregistrationv1.NamespacedScope), string(admissionregistrationv1.AllScopes))
	webhookReviewVersions      = []string{"v1", "v1beta1"}
)

func isWebhookReviewVersion(v string) bool { return slices.Contains(webhookReviewVersions, v) }

func validateWebhook(h *webhookFields, opts webhookValidationOptions, p *field.Path) field.ErrorList {
	errs := utilvalidation.IsFullyQualifiedName(p.Child("name"), h.name)
	for i, rule := range h.rules {
		errs = append(errs, validateWebhookRule(&rule, p.Child("rules").Index(i))...)
	}
	if h.failurePolicy != nil && !webhookFailurePolicies.Has(string(*h.failurePolicy)) {
		errs = append(errs, field.NotSupported(p.Child("failurePolicy"), *h.failurePolicy, webhookFailurePolicies.List()))
	}
	if h.matchPolicy != nil && !webhookMatchPolicies.Has(string(*h.matchPolicy)) {
		errs = append(errs, field.NotSupported(p.Child("matchPolicy"), *h.matchPolicy, webhookMatchPolicies.List()))
	}
	allowed := webhookSideEffectClasses
	if opts.requireNoSideEffects {
		allowed = webhookNoSideEffectClasses
	}
	if h.sideEffects == nil {
		errs = append(errs, field.Required(p.Child("sideEffects"), fmt.Sprintf("must specify one of %v", strings.Join(allowed.List(), ", "))))
	} else if !allowed.Has(string(*h.sideEffects)) {
		errs = append(errs, field.NotSupported(p.Child("sideEffects"), *h.sideEffects, allowed.List()))
	}
	if h.timeoutSeconds != nil && (*h.timeoutSeconds > 30 || *h.timeoutSeconds < 1) {
		errs = append(errs, field.Invalid(p.Child("timeoutSeconds"), *h.timeoutSeconds, "the timeout value must be between 1 and 30 seconds"))
	}
	selOpts := metav1validation.LabelSelectorValidationOptions{AllowInvalidLabelValueInSelector: opts.allowInvalidLabelValue}
	if h.namespaceSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(h.namespaceSelector, selOpts, p.Child("namespaceSelector"))...)
	}
	if h.objSel != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(h.objSel, selOpts, p.Child("objectSelector"))...)
	}
	if h.mutating && h.reinvocationPolicy != nil && !webhookReinvocationPolicies.Has(string(*h.reinvocationPolicy)) {
		errs = append(errs, field.NotSupported(p.Child("reinvocationPolicy"), *h.reinvocationPolicy, webhookReinvocationPolicies.List()))
	}
	cc := h.clientConfig
	switch {
	case (cc.URL == nil) == (cc.Service == nil):
		errs = append(errs, field.Required(p.Child("clientConfig"), "exactly one of url or service is required"))
	case cc.URL != nil:
		errs = append(errs, utilwebhook.ValidateWebhookURL(p.Child("clientConfig").Child("url"), *cc.URL, true)...)
	case cc.Service != nil:
		port := int32(443)
		if cc.Service.Port != nil {
			port = *cc.Service.Port
		}
		errs = append(errs, utilwebhook.ValidateWebhookService(p.Child("clientConfig").Child("service"), cc.Service.Name, cc.Service.Namespace, cc.Service.Path, port)...)
	}
	if !opts.ignoreMatchConditions {
		errs = append(errs, validateWebhookMatchConditions(h.matchConditions, opts, p.Child("matchConditions"))...)
	}
	return errs
}

func validateWebhookReviewVersions(versions []string, requireRecognized bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(versions) < 1 {
		return append(errs, field.Required(p, fmt.Sprintf("must specify one of %v", strings.Join(webhookReviewVersions, ", "))))
	}
	seen := map[string]bool{}
	accepted := false
	for i, v := range versions {
		if seen[v] {
			errs = append(errs, field.Invalid(p.Index(i), v, "duplicate version"))
			continue
		}
		seen[v] = true
		for _, msg := range utilvalidation.IsDNS1035Label(v) {
			errs = append(errs, field.Invalid(p.Index(i), v, msg))
		}
		accepted = accepted || isWebhookReviewVersion(v)
	}
	if requireRecognized && !accepted {
		errs = append(errs, field.Invalid(p, versions, fmt.Sprintf("must include at least one of %v", strings.Join(webhookReviewVersions, ", "))))
	}
	return errs
}

func validateWebhookRule(r *admissionregistrationv1.RuleWithOperations, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(r.Operations) == 0 {
		errs = append(errs, field.Required(p.Child("operations"), ""))
	}
	if len(r.Operations) > 1 && slices.Contains(r.Operations, admissionregistrationv1.OperationAll) {
		errs = append(errs, field.Invalid(p.Child("operations"), r.Operations, "if '*' is present, must not specify other operations"))
	}
	for i, op := range r.Operations {
		if !webhookOperations.Has(string(op)) {
			errs = append(errs, field.NotSupported(p.Child("operations").Index(i), op, webhookOperations.List()))
		}
	}
	if len(r.APIGroups) == 0 {
		errs = append(errs, field.Required(p.Child("apiGroups"), ""))
	}
	if len(r.APIGroups) > 1 && slices.Contains(r.APIGroups, "*") {
		errs = append(errs, field.Invalid(p.Child("apiGroups"), r.APIGroups, "if '*' is present, must not specify other API groups"))
	}
	if len(r.APIVersions) == 0 {
		errs = append(errs, field.Required(p.Child("apiVersions"), ""))
	}
	if len(r.APIVersions) > 1 && slices.Contains(r.APIVersions, "*") {
		errs = append(errs, field.Invalid(p.Child("apiVersions"), r.APIVersions, "if '*' is present, must not specify other API versions"))
	}
	for i, v := range r.APIVersions {
		if v == "" {
			errs = append(errs, field.Required(p.Child("apiVersions").Index(i), ""))
		}
	}
	errs = append(errs, validateWebhookRuleResources(r.Resources, p.Child("resources"))...)
	if r.Scope != nil && !webhookRuleScopes.Has(string(*r.Scope)) {
		errs = append(errs, field.NotSupported(p.Child("scope"), *r.Scope, webhookRuleScopes.List()))
	}
	return errs
}

// validateWebhookRuleResources is Kubernetes' validateResources: resources with
// subresources and their wildcards.
func validateWebhookRuleResources(resources []string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(resources) == 0 {
		errs = append(errs, field.Required(p, ""))
	}
	withWildcardSub := sets.New[string]() // x/*
	subWithWildcard := sets.New[string]() // */x
	doubleWildcard, singleWildcard, plain := false, false, false
	for i, rs := range resources {
		if rs == "" {
			errs = append(errs, field.Required(p.Index(i), ""))
			continue
		}
		doubleWildcard = doubleWildcard || rs == "*/*"
		singleWildcard = singleWildcard || rs == "*"
		res, sub, ok := strings.Cut(rs, "/")
		if !ok {
			plain = rs != "*"
			continue
		}
		if withWildcardSub.Has(res) {
			errs = append(errs, field.Invalid(p.Index(i), rs, fmt.Sprintf("if '%s/*' is present, must not specify %s", res, rs)))
		}
		if subWithWildcard.Has(sub) {
			errs = append(errs, field.Invalid(p.Index(i), rs, fmt.Sprintf("if '*/%s' is present, must not specify %s", sub, rs)))
		}
		if sub == "*" {
			withWildcardSub.Insert(res)
		}
		if res == "*" {
			subWithWildcard.Insert(sub)
		}
	}
	if len(resources) > 1 && doubleWildcard {
		errs = append(errs, field.Invalid(p, resources, "if '*/*' is present, must not specify other resources"))
	}
	if singleWildcard && plain {
		errs = append(errs, field.Invalid(p, resources, "if '*' is present, must not specify other resources without subresources"))
	}
	return errs
}

func validateWebhookMatchConditions(mcs []admissionregistrationv1.MatchCondition, opts webhookValidationOptions, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(mcs) > 64 {
		errs = append(errs, field.TooMany(p, len(mcs), 64))
	}
	names := sets.New[string]()
	for i, mc := range mcs {
		ip := p.Index(i)
		if expr := strings.TrimSpace(mc.Expression); expr == "" {
			errs = append(errs, field.Required(ip.Child("expression"), ""))
		} else {
			envType := environment.NewExpressions
			if opts.storedExpressions.Has(expr) {
				envType = environment.StoredExpressions
			}
			errs = append(errs, CompileMatchCondition(expr, envType, ip.Child("expression"))...)
		}
		if mc.Name == "" {
			errs = append(errs, field.Required(ip.Child("name"), ""))
		} else {
			for _, msg := range utilvalidation.IsQualifiedName(mc.Name) {
				errs = append(errs, field.Invalid(ip.Child("name"), mc.Name, msg))
			}
			if names.Has(mc.Name) {
				errs = append(errs, field.Duplicate(ip.Child("name"), mc.Name))
			}
			names.Insert(mc.Name)
		}
	}
	return errs
}

var (
	matchConditionCompilerOnce sync.Once
	matchConditionCompiler     plugincel.Compiler
)

// MatchConditionCompiler is the CEL compiler of webhook match conditions:
// Kubernetes' base environment with strict cost enforcement, as its
// validation and its webhook plugin use. Safe for concurrent use.
func MatchConditionCompiler() plugincel.Compiler {
	matchConditionCompilerOnce.Do(func() {
		matchConditionCompiler = plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	})
	return matchConditionCompiler
}

// CompileMatchCondition compiles one match condition's expression as
// Kubernetes' validation does, with its errors.
func CompileMatchCondition(expr string, envType environment.Type, p *field.Path) field.ErrorList {
	mc := &matchconditions.MatchCondition{Expression: expr}
	res := MatchConditionCompiler().CompileCELExpression(mc, plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, envType)
	if res.Error == nil {
		return nil
	}
	switch res.Error.Type {
	case apiservercel.ErrorTypeRequired:
		return field.ErrorList{field.Required(p, res.Error.Detail)}
	case apiservercel.ErrorTypeInvalid:
		return field.ErrorList{field.Invalid(p, expr, res.Error.Detail)}
	}
	return field.ErrorList{field.InternalError(p, res.Error)}
}

// IsNamespaceResource reports whether res is core/v1 namespaces.
func IsNamespaceResource(res *Resource) bool {
	return res.Group == "" && res.Plural == "namespaces"
}
