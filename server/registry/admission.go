package registry

import (
	"fmt"
	"regexp"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	unversionedvalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// AdmissionGroup is the API group of admission policies and webhooks.
const AdmissionGroup = admissionv1.GroupName

// The CEL admission policies and their bindings: ValidatingAdmissionPolicy
// (with a status subresource) and MutatingAdmissionPolicy, served as
// admissionregistration.k8s.io/v1 (the only version kube-apiserver v1.37
// serves by default), defaulted and validated as Kubernetes'
// pkg/apis/admissionregistration/v1/defaults.go and
// pkg/apis/admissionregistration/validation do: every CEL expression is
// compiled with Kubernetes' admission CEL environment (package
// k8s.io/apiserver/pkg/admission/plugin/cel), and one that does not
// compile is a 422 with the compiler's message. Two things Kubernetes
// does around these resources live in package server/admission/policy,
// which has the authorizer and the schemas: the strategy's authorization
// check of spec.paramKind (an Admit hook) and the status's typeChecking,
// which kube-controller-manager fills in (the policies' status
// controller).

func admissionPolicyResources() []*Resource {
	bindingColumns := []Column{
		{Name: "PolicyName", Type: "string", Description: "PolicyName indicates the policy definition which the policy binding binded to", JSONPath: ".spec.policyName"},
		{Name: "ParamRef", Type: "string", Description: "ParamRef indicates the param resource which sets the configuration param", Value: func(obj map[string]any) any {
			var b admissionv1.ValidatingAdmissionPolicyBinding // the same spec.paramRef in both kinds
			_ = runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &b)
			return paramRefCell(b.Spec.ParamRef)
		}},
		ageColumn,
	}
	// The four kinds differ in name, type, columns and status only.
	res := func(kind string, schema any, cols []Column, strategy Strategy) *Resource {
		lower := strings.ToLower(kind)
		plural := lower + "s"
		if strings.HasSuffix(lower, "policy") {
			plural = strings.TrimSuffix(lower, "y") + "ies"
		}
		return &Resource{Group: AdmissionGroup, Version: "v1", Plural: plural, Singular: lower, Kind: kind,
			Categories: []string{"api-extensions"}, Generation: true, PatchSchema: schema, Columns: cols, Strategy: strategy}
	}
	vap := res("ValidatingAdmissionPolicy", &admissionv1.ValidatingAdmissionPolicy{},
		policyColumns("Validations", "Validations indicates the number of validation rules defined in this configuration", "validations"),
		typed[admissionv1.ValidatingAdmissionPolicy]{prepare: prepareVAP, validate: validateVAP})
	vap.Status = true
	return []*Resource{
		vap,
		res("ValidatingAdmissionPolicyBinding", &admissionv1.ValidatingAdmissionPolicyBinding{}, bindingColumns,
			typed[admissionv1.ValidatingAdmissionPolicyBinding]{prepare: prepareVAPB, validate: validateVAPB}),
		res("MutatingAdmissionPolicy", &admissionv1.MutatingAdmissionPolicy{},
			policyColumns("Mutations", "Mutation indicates the number of mutations rules defined in this configuration", "mutations"),
			typed[admissionv1.MutatingAdmissionPolicy]{prepare: prepareMAP, validate: validateMAP}),
		res("MutatingAdmissionPolicyBinding", &admissionv1.MutatingAdmissionPolicyBinding{}, bindingColumns,
			typed[admissionv1.MutatingAdmissionPolicyBinding]{prepare: prepareMAPB, validate: validateMAPB}),
	}
}

// policyColumns are kubectl's columns of a kind of policy: the number of
// items in spec.LIST (validations or mutations), the paramKind, the age.
func policyColumns(name, description, list string) []Column {
	return []Column{
		{Name: name, Type: "integer", Description: description, Value: func(obj map[string]any) any {
			v, _, _ := unstructured.NestedSlice(obj, "spec", list)
			return int64(len(v))
		}},
		{Name: "ParamKind", Type: "string", Description: "ParamKind specifies the kind of resources used to parameterize this policy", Value: func(obj map[string]any) any {
			apiVersion, _, _ := unstructured.NestedString(obj, "spec", "paramKind", "apiVersion")
			kind, ok, _ := unstructured.NestedString(obj, "spec", "paramKind", "kind")
			if _, set, _ := unstructured.NestedMap(obj, "spec", "paramKind"); !set && !ok {
				return "<unset>"
			}
			return apiVersion + "/" + kind
		}},
		ageColumn,
	}
}

// paramRefCell is kubectl's ParamRef column.
func paramRefCell(pr *admissionv1.ParamRef) string {
	switch {
	case pr == nil:
		return "<unset>"
	case pr.Name != "" && pr.Namespace != "":
		return pr.Namespace + "/" + pr.Name
	case pr.Name != "":
		return "*/" + pr.Name // cluster-scoped or not: kubectl cannot tell
	case pr.Selector != nil:
		return metav1.FormatLabelSelector(pr.Selector)
	}
	return "<unset>"
}

// Defaults, as Kubernetes' SetDefaults_* for admissionregistration/v1.

func defaultMatchResources(m *admissionv1.MatchResources) {
	if m == nil {
		return
	}
	if m.MatchPolicy == nil {
		p := admissionv1.Equivalent
		m.MatchPolicy = &p
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rules := range [][]admissionv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rules {
			if rules[i].Scope == nil {
				s := admissionv1.AllScopes
				rules[i].Scope = &s
			}
		}
	}
}

func defaultFailurePolicy(fp **admissionv1.FailurePolicyType) {
	if *fp == nil {
		p := admissionv1.Fail
		*fp = &p
	}
}

func prepareVAP(p, old *admissionv1.ValidatingAdmissionPolicy) {
	defaultFailurePolicy(&p.Spec.FailurePolicy)
	defaultMatchResources(p.Spec.MatchConstraints)
	if old == nil {
		p.Status = admissionv1.ValidatingAdmissionPolicyStatus{}
	}
}

func prepareVAPB(b, _ *admissionv1.ValidatingAdmissionPolicyBinding) {
	defaultMatchResources(b.Spec.MatchResources)
}

func prepareMAP(p, _ *admissionv1.MutatingAdmissionPolicy) {
	defaultFailurePolicy(&p.Spec.FailurePolicy)
	defaultMatchResources(p.Spec.MatchConstraints)
}

func prepareMAPB(b, _ *admissionv1.MutatingAdmissionPolicyBinding) {
	defaultMatchResources(b.Spec.MatchResources)
}

var (
	policyFailurePolicies  = sets.New(string(admissionv1.Ignore), string(admissionv1.Fail))
	policyMatchPolicies    = sets.New(string(admissionv1.Exact), string(admissionv1.Equivalent))
	policyMutatingOps      = sets.New("*", string(admissionv1.Create), string(admissionv1.Update), string(admissionv1.Connect))
	policyActions          = sets.New(string(admissionv1.Deny), string(admissionv1.Warn), string(admissionv1.Audit))
	policyReasons          = sets.New(string(metav1.StatusReasonForbidden), string(metav1.StatusReasonInvalid), string(metav1.StatusReasonRequestEntityTooLarge))
	policyPatchTypes       = sets.New(string(admissionv1.PatchTypeApplyConfiguration), string(admissionv1.PatchTypeJSONPatch))
	policyReinvocations    = sets.New(string(admissionv1.NeverReinvocationPolicy), string(admissionv1.IfNeededReinvocationPolicy))
	policyNewlines         = regexp.MustCompile(`[\n\r]+`)
	policyCELIdent         = regexp.MustCompile("^[_a-zA-Z][_a-zA-Z0-9]*$")
	policyCELReservedNames = sets.New("true", "false", "null", "in", "as", "break", "const", "continue", "else",
		"for", "function", "if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while")
)

const (
	policyMaxAuditAnnotations         = 20
	policyMaxAuditAnnotationValueExpr = 5 * 1024
)

// policyCEL compiles one policy's expressions, as Kubernetes' validation
// does: with variable composition, in the environment for new
// expressions unless the expression is already stored in the old object
// (an update keeps compiling what was accepted before).
type policyCEL struct {
	compiler plugincel.Compiler
	stored   sets.Set[string]
	params   bool
}

func newPolicyCEL(params bool, stored sets.Set[string]) *policyCEL {
	env := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	var c plugincel.Compiler
	if cc, err := plugincel.NewCompositedCompiler(env); err == nil {
		c = cc
	} else {
		c = plugincel.NewCompiler(env)
	}
	return &policyCEL{compiler: c, stored: stored, params: params}
}

func (c *policyCEL) envType(expr string) environment.Type {
	if c.stored.Has(expr) {
		return environment.StoredExpressions
	}
	return environment.NewExpressions
}

// compile compiles e and returns Kubernetes' error for it.
func (c *policyCEL) compile(e plugincel.ExpressionAccessor, vars plugincel.OptionalVariableDeclarations, path *field.Path) field.ErrorList {
	res := c.compiler.CompileCELExpression(e, vars, c.envType(e.GetExpression()))
	if res.Error == nil {
		return nil
	}
	return field.ErrorList{policyCELError(path, e.GetExpression(), res.Error)}
}

func policyCELError(path *field.Path, expr string, err *cel.Error) *field.Error {
	switch err.Type {
	case cel.ErrorTypeRequired:
		return field.Required(path, err.Detail)
	case cel.ErrorTypeInvalid:
		return field.Invalid(path, expr, err.Detail)
	}
	return field.InternalError(path, err)
}

func (c *policyCEL) variable(v admissionv1.Variable, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if strings.TrimSpace(v.Name) == "" {
		errs = append(errs, field.Required(path.Child("name"), "name is not specified"))
	} else if !policyCELIdent.MatchString(v.Name) || policyCELReservedNames.Has(v.Name) {
		errs = append(errs, field.Invalid(path.Child("name"), v.Name, "must be a valid CEL identifier"))
	}
	if strings.TrimSpace(v.Expression) == "" {
		return append(errs, field.Required(path.Child("expression"), "expression is not specified"))
	}
	cc, ok := c.compiler.(*plugincel.CompositedCompiler)
	if !ok {
		return append(errs, field.InternalError(path, fmt.Errorf("variable composition is not allowed")))
	}
	acc := &validating.Variable{Name: v.Name, Expression: v.Expression}
	if res := cc.CompileAndStoreVariable(acc, plugincel.OptionalVariableDeclarations{HasParams: c.params, HasAuthorizer: true}, c.envType(v.Expression)); res.Error != nil {
		errs = append(errs, policyCELError(path.Child("expression"), v.Expression, res.Error))
	}
	return errs
}

func validateVAP(p, old *admissionv1.ValidatingAdmissionPolicy) field.ErrorList {
	stored := sets.New[string]()
	ignoreMatchConditions := false
	if old != nil {
		for _, v := range old.Spec.Validations {
			stored.Insert(v.Expression, v.MessageExpression)
		}
		for _, v := range old.Spec.Variables {
			stored.Insert(v.Expression)
		}
		for _, a := range old.Spec.AuditAnnotations {
			stored.Insert(a.ValueExpression)
		}
		for _, m := range old.Spec.MatchConditions {
			stored.Insert(m.Expression)
		}
		ignoreMatchConditions = apiequality.Semantic.DeepEqual(p.Spec.MatchConditions, old.Spec.MatchConditions)
	}
	spec := &p.Spec
	path := field.NewPath("spec")
	errs := validatePolicyCommon(spec.FailurePolicy, spec.ParamKind, spec.MatchConstraints, path)
	c := newPolicyCEL(spec.ParamKind != nil, stored)
	if !ignoreMatchConditions {
		errs = append(errs, validatePolicyMatchConditions(c, spec.MatchConditions, path.Child("matchConditions"))...)
	}
	for i, v := range spec.Variables {
		errs = append(errs, c.variable(v, path.Child("variables").Index(i))...)
	}
	if len(spec.Validations) == 0 && len(spec.AuditAnnotations) == 0 {
		const msg = "validations or auditAnnotations must contain at least one item"
		return append(errs, field.Required(path.Child("validations"), msg), field.Required(path.Child("auditAnnotations"), msg))
	}
	for i, v := range spec.Validations {
		errs = append(errs, validatePolicyValidation(c, v, path.Child("validations").Index(i))...)
	}
	if len(spec.AuditAnnotations) > policyMaxAuditAnnotations {
		errs = append(errs, field.Invalid(path.Child("auditAnnotations"), spec.AuditAnnotations, fmt.Sprintf("must not have more than %d auditAnnotations", policyMaxAuditAnnotations)))
	}
	keys := sets.New[string]()
	for i, a := range spec.AuditAnnotations {
		ap := path.Child("auditAnnotations").Index(i)
		errs = append(errs, validatePolicyAuditAnnotation(c, p.Name, a, ap)...)
		if keys.Has(a.Key) {
			errs = append(errs, field.Duplicate(ap.Child("key"), a.Key))
		}
		keys.Insert(a.Key)
	}
	return errs
}

// validatePolicyCommon checks what both kinds of policy have:
// failurePolicy, paramKind and matchConstraints.
func validatePolicyCommon(fp *admissionv1.FailurePolicyType, pk *admissionv1.ParamKind, mc *admissionv1.MatchResources, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if fp == nil {
		errs = append(errs, field.Required(path.Child("failurePolicy"), ""))
	} else if !policyFailurePolicies.Has(string(*fp)) {
		errs = append(errs, field.NotSupported(path.Child("failurePolicy"), *fp, sets.List(policyFailurePolicies)))
	}
	if pk != nil {
		errs = append(errs, validateParamKind(*pk, path.Child("paramKind"))...)
	}
	if mc == nil {
		return append(errs, field.Required(path.Child("matchConstraints"), ""))
	}
	errs = append(errs, validatePolicyMatchResources(mc, path.Child("matchConstraints"))...)
	if len(mc.ResourceRules) == 0 {
		// at least one resource rule, for type information
		errs = append(errs, field.Required(path.Child("matchConstraints", "resourceRules"), ""))
	}
	return errs
}

func validatePolicyValidation(c *policyCEL, v admissionv1.Validation, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	msg, msgExpr := strings.TrimSpace(v.Message), strings.TrimSpace(v.MessageExpression)
	if strings.TrimSpace(v.Expression) == "" {
		errs = append(errs, field.Required(path.Child("expression"), "expression is not specified"))
	} else {
		errs = append(errs, c.compile(&validating.ValidationCondition{Expression: v.Expression},
			plugincel.OptionalVariableDeclarations{HasParams: c.params, HasAuthorizer: true}, path.Child("expression"))...)
	}
	if v.MessageExpression != "" && msgExpr == "" {
		errs = append(errs, field.Invalid(path.Child("messageExpression"), v.MessageExpression, "must be non-empty if specified"))
	} else if msgExpr != "" {
		// Kubernetes passes params only when match conditions may use
		// them, that is when the policy has a paramKind.
		errs = append(errs, c.compile(&validating.MessageExpressionCondition{MessageExpression: v.MessageExpression},
			plugincel.OptionalVariableDeclarations{HasParams: c.params}, path.Child("messageExpression"))...)
	}
	if v.Message != "" && msg == "" {
		errs = append(errs, field.Invalid(path.Child("message"), v.Message, "must be non-empty if specified"))
	} else if policyNewlines.MatchString(msg) {
		errs = append(errs, field.Invalid(path.Child("message"), v.Message, "must not contain line breaks"))
	}
	if v.Reason != nil && !policyReasons.Has(string(*v.Reason)) {
		errs = append(errs, field.NotSupported(path.Child("reason"), *v.Reason, sets.List(policyReasons)))
	}
	return errs
}

func validatePolicyAuditAnnotation(c *policyCEL, name string, a admissionv1.AuditAnnotation, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if name != "" {
		errs = append(errs, qualifiedName(name+"/"+a.Key, path.Child("key"))...)
	} else {
		errs = append(errs, field.Invalid(path.Child("key"), a.Key, "requires metadata.name be non-empty"))
	}
	expr := strings.TrimSpace(a.ValueExpression)
	switch {
	case expr == "":
		errs = append(errs, field.Required(path.Child("valueExpression"), "valueExpression is not specified"))
	case len(expr) > policyMaxAuditAnnotationValueExpr:
		errs = append(errs, field.Required(path.Child("valueExpression"), fmt.Sprintf("must not exceed %d bytes in length", policyMaxAuditAnnotationValueExpr)))
	default:
		res := c.compiler.CompileCELExpression(&validating.AuditAnnotationCondition{ValueExpression: expr},
			plugincel.OptionalVariableDeclarations{HasParams: c.params, HasAuthorizer: true}, c.envType(a.ValueExpression))
		if res.Error != nil {
			errs = append(errs, policyCELError(path.Child("valueExpression"), a.ValueExpression, res.Error))
		}
	}
	return errs
}

func validatePolicyMatchConditions(c *policyCEL, conds []admissionv1.MatchCondition, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(conds) > 64 {
		errs = append(errs, field.TooMany(path, len(conds), 64))
	}
	// Match conditions compile without variables, as Kubernetes' stateless
	// compiler does.
	stateless := &policyCEL{compiler: plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())), stored: c.stored}
	names := sets.New[string]()
	for i, m := range conds {
		p := path.Index(i)
		if expr := strings.TrimSpace(m.Expression); expr == "" {
			errs = append(errs, field.Required(p.Child("expression"), ""))
		} else {
			errs = append(errs, stateless.compile(&matchconditions.MatchCondition{Expression: expr},
				plugincel.OptionalVariableDeclarations{HasParams: c.params, HasAuthorizer: true}, p.Child("expression"))...)
		}
		if m.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		} else {
			errs = append(errs, qualifiedName(m.Name, p.Child("name"))...)
		}
		if m.Name != "" && names.Has(m.Name) {
			errs = append(errs, field.Duplicate(p.Child("name"), m.Name))
		}
		names.Insert(m.Name)
	}
	return errs
}

func validateParamKind(pk admissionv1.ParamKind, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if pk.APIVersion == "" {
		errs = append(errs, field.Required(path.Child("apiVersion"), ""))
	} else if group, version, err := parsePolicyGroupVersion(pk.APIVersion); err != nil {
		errs = append(errs, field.Invalid(path.Child("apiVersion"), pk.APIVersion, err.Error()))
	} else {
		if group != "" {
			if msgs := utilvalidation.IsDNS1123Subdomain(group); len(msgs) > 0 {
				errs = append(errs, field.Invalid(path.Child("apiVersion"), group, strings.Join(msgs, ",")))
			}
		}
		if version == "" {
			errs = append(errs, field.Invalid(path.Child("apiVersion"), pk.APIVersion, "version must be specified"))
		} else if msgs := utilvalidation.IsDNS1035Label(version); len(msgs) > 0 {
			errs = append(errs, field.Invalid(path.Child("apiVersion"), version, strings.Join(msgs, ",")))
		}
	}
	if pk.Kind == "" {
		errs = append(errs, field.Required(path.Child("kind"), ""))
	} else if msgs := utilvalidation.IsDNS1035Label(strings.ToLower(pk.Kind)); len(msgs) > 0 {
		errs = append(errs, field.Invalid(path.Child("kind"), pk.Kind, "may have mixed case, but should otherwise match: "+strings.Join(msgs, ",")))
	}
	return errs
}

func parsePolicyGroupVersion(gv string) (group, version string, err error) {
	if gv == "" || gv == "/" {
		return "", "", nil
	}
	switch strings.Count(gv, "/") {
	case 0:
		return "", gv, nil
	case 1:
		g, v, _ := strings.Cut(gv, "/")
		return g, v, nil
	}
	return "", "", fmt.Errorf("unexpected GroupVersion string: %v", gv)
}

func validatePolicyMatchResources(mc *admissionv1.MatchResources, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if mc == nil {
		return nil
	}
	if mc.MatchPolicy == nil {
		errs = append(errs, field.Required(path.Child("matchPolicy"), ""))
	} else if !policyMatchPolicies.Has(string(*mc.MatchPolicy)) {
		errs = append(errs, field.NotSupported(path.Child("matchPolicy"), *mc.MatchPolicy, sets.List(policyMatchPolicies)))
	}
	for _, sel := range []struct {
		name string
		s    *metav1.LabelSelector
	}{{"namespaceSelector", mc.NamespaceSelector}, {"objectSelector", mc.ObjectSelector}} {
		if sel.s == nil {
			errs = append(errs, field.Required(path.Child(sel.name), ""))
		} else {
			errs = append(errs, unversionedvalidation.ValidateLabelSelector(sel.s, unversionedvalidation.LabelSelectorValidationOptions{}, path.Child(sel.name))...)
		}
	}
	for i, r := range mc.ResourceRules {
		errs = append(errs, validatePolicyRule(r, path.Child("resourceRules").Index(i))...)
	}
	for i, r := range mc.ExcludeResourceRules {
		errs = append(errs, validatePolicyRule(r, path.Child("excludeResourceRules").Index(i))...)
	}
	return errs
}

// validatePolicyRule is Kubernetes' validateNamedRuleWithOperations.
func validatePolicyRule(r admissionv1.NamedRuleWithOperations, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := sets.New[string]()
	for i, n := range r.ResourceNames {
		for _, msg := range content.IsPathSegmentName(n) {
			errs = append(errs, field.Invalid(path.Child("resourceNames").Index(i), n, msg))
		}
		if names.Has(n) {
			errs = append(errs, field.Duplicate(path.Child("resourceNames").Index(i), n))
		}
		names.Insert(n)
	}
	// The rest is a webhook rule's (Kubernetes' validateRuleWithOperations).
	return append(errs, validateWebhookRule(&r.RuleWithOperations, path)...)
}

func validateVAPB(b, _ *admissionv1.ValidatingAdmissionPolicyBinding) field.ErrorList {
	path := field.NewPath("spec")
	errs := validatePolicyBinding(b.Spec.PolicyName, b.Spec.ParamRef, b.Spec.MatchResources, path)
	actions := sets.New[string]()
	ap := path.Child("validationActions")
	for i, a := range b.Spec.ValidationActions {
		if !policyActions.Has(string(a)) {
			errs = append(errs, field.NotSupported(ap.Index(i), a, sets.List(policyActions)))
		}
		if actions.Has(string(a)) {
			errs = append(errs, field.Duplicate(ap.Index(i), a))
		}
		actions.Insert(string(a))
	}
	if actions.Has(string(admissionv1.Deny)) && actions.Has(string(admissionv1.Warn)) {
		errs = append(errs, field.Invalid(ap, b.Spec.ValidationActions, "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"))
	}
	if len(actions) == 0 {
		errs = append(errs, field.Required(ap, "at least one validation action is required"))
	}
	return errs
}

func validatePolicyBinding(policyName string, pr *admissionv1.ParamRef, mr *admissionv1.MatchResources, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if policyName == "" {
		errs = append(errs, field.Required(path.Child("policyName"), ""))
	} else {
		for _, msg := range metavalidation.NameIsDNSSubdomain(policyName, false) {
			errs = append(errs, field.Invalid(path.Child("policyName"), policyName, msg))
		}
	}
	errs = append(errs, validateParamRef(pr, path.Child("paramRef"))...)
	return append(errs, validatePolicyMatchResources(mr, path.Child("matchResources"))...)
}

func validateParamRef(pr *admissionv1.ParamRef, path *field.Path) field.ErrorList {
	if pr == nil {
		return nil
	}
	var errs field.ErrorList
	if pr.Name != "" {
		for _, msg := range content.IsPathSegmentName(pr.Name) {
			errs = append(errs, field.Invalid(path.Child("name"), pr.Name, msg))
		}
		if pr.Selector != nil {
			errs = append(errs, field.Forbidden(path.Child("name"), `name and selector are mutually exclusive`))
		}
	}
	if pr.Selector != nil {
		errs = append(errs, unversionedvalidation.ValidateLabelSelector(pr.Selector, unversionedvalidation.LabelSelectorValidationOptions{}, path.Child("selector"))...)
		if pr.Name != "" {
			errs = append(errs, field.Forbidden(path.Child("selector"), `name and selector are mutually exclusive`))
		}
	}
	if pr.Name == "" && pr.Selector == nil {
		errs = append(errs, field.Required(path, `one of name or selector must be specified`))
	}
	switch {
	case pr.ParameterNotFoundAction == nil || *pr.ParameterNotFoundAction == "":
		errs = append(errs, field.Required(path.Child("parameterNotFoundAction"), ""))
	case *pr.ParameterNotFoundAction != admissionv1.DenyAction && *pr.ParameterNotFoundAction != admissionv1.AllowAction:
		errs = append(errs, field.NotSupported(path.Child("parameterNotFoundAction"), pr.ParameterNotFoundAction, []string{string(admissionv1.DenyAction), string(admissionv1.AllowAction)}))
	}
	return errs
}

func validateMAP(p, old *admissionv1.MutatingAdmissionPolicy) field.ErrorList {
	stored := sets.New[string]()
	ignoreMatchConditions := false
	if old != nil {
		for _, v := range old.Spec.Variables {
			stored.Insert(v.Expression)
		}
		for _, m := range old.Spec.Mutations {
			if m.ApplyConfiguration != nil {
				stored.Insert(m.ApplyConfiguration.Expression)
			}
			if m.JSONPatch != nil {
				stored.Insert(m.JSONPatch.Expression)
			}
		}
		for _, m := range old.Spec.MatchConditions {
			stored.Insert(m.Expression)
		}
		ignoreMatchConditions = apiequality.Semantic.DeepEqual(p.Spec.MatchConditions, old.Spec.MatchConditions)
	}
	spec := &p.Spec
	path := field.NewPath("spec")
	errs := validatePolicyCommon(spec.FailurePolicy, spec.ParamKind, spec.MatchConstraints, path)
	if spec.MatchConstraints != nil {
		errs = append(errs, validateMutatingOperations(spec.MatchConstraints, path.Child("matchConstraints"))...)
	}
	c := newPolicyCEL(spec.ParamKind != nil, stored)
	if !ignoreMatchConditions {
		errs = append(errs, validatePolicyMatchConditions(c, spec.MatchConditions, path.Child("matchConditions"))...)
	}
	for i, v := range spec.Variables {
		errs = append(errs, c.variable(v, path.Child("variables").Index(i))...)
	}
	if len(spec.Mutations) == 0 {
		errs = append(errs, field.Required(path.Child("mutations"), "mutations must contain at least one item"))
	}
	for i, m := range spec.Mutations {
		errs = append(errs, validateMutation(c, m, path.Child("mutations").Index(i))...)
	}
	if spec.ReinvocationPolicy == "" {
		errs = append(errs, field.Required(path.Child("reinvocationPolicy"), ""))
	} else if !policyReinvocations.Has(string(spec.ReinvocationPolicy)) {
		errs = append(errs, field.NotSupported(path.Child("reinvocationPolicy"), spec.ReinvocationPolicy, sets.List(policyReinvocations)))
	}
	return errs
}

// validateMutatingOperations: a mutating policy cannot match deletes.
func validateMutatingOperations(mr *admissionv1.MatchResources, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, r := range mr.ResourceRules {
		for _, op := range r.Operations {
			if !policyMutatingOps.Has(string(op)) {
				errs = append(errs, field.NotSupported(path.Child("resourceRules", "operations"), op, sets.List(policyMutatingOps)))
			}
		}
	}
	return errs
}

func validateMutation(c *policyCEL, m admissionv1.Mutation, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	vars := plugincel.OptionalVariableDeclarations{HasParams: c.params, HasAuthorizer: true, HasPatchTypes: true}
	compile := func(acc plugincel.ExpressionAccessor, expr string, p *field.Path) {
		if strings.TrimSpace(expr) == "" {
			errs = append(errs, field.Required(p.Child("expression"), ""))
			return
		}
		errs = append(errs, c.compile(acc, vars, p.Child("expression"))...)
	}
	switch m.PatchType {
	case "":
		errs = append(errs, field.Required(path.Child("patchType"), ""))
	case admissionv1.PatchTypeJSONPatch:
		if m.JSONPatch == nil {
			errs = append(errs, field.Required(path.Child("jsonPatch"), "must be specified when patchType is JSONPatch"))
		} else {
			compile(&patch.JSONPatchCondition{Expression: strings.TrimSpace(m.JSONPatch.Expression)}, m.JSONPatch.Expression, path.Child("jsonPatch"))
		}
		if m.ApplyConfiguration != nil {
			errs = append(errs, field.Invalid(path.Child("applyConfiguration"), "{applyConfiguration}", "must not be specified when patchType is JSONPatch"))
		}
	case admissionv1.PatchTypeApplyConfiguration:
		if m.ApplyConfiguration == nil {
			errs = append(errs, field.Required(path.Child("applyConfiguration"), "must be specified when patchType is ApplyConfiguration"))
		} else {
			compile(&patch.ApplyConfigurationCondition{Expression: strings.TrimSpace(m.ApplyConfiguration.Expression)}, m.ApplyConfiguration.Expression, path.Child("applyConfiguration"))
		}
		if m.JSONPatch != nil {
			errs = append(errs, field.Invalid(path.Child("jsonPatch"), "{jsonPatch}", "must not be specified when patchType is ApplyConfiguration"))
		}
	default:
		errs = append(errs, field.NotSupported(path.Child("patchType"), m.PatchType, sets.List(policyPatchTypes)))
	}
	return errs
}

func validateMAPB(b, _ *admissionv1.MutatingAdmissionPolicyBinding) field.ErrorList {
	path := field.NewPath("spec")
	errs := validatePolicyBinding(b.Spec.PolicyName, b.Spec.ParamRef, b.Spec.MatchResources, path)
	if b.Spec.MatchResources != nil {
		errs = append(errs, validateMutatingOperations(b.Spec.MatchResources, path.Child("matchResources"))...)
	}
	return errs
}

func qualifiedName(value string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range utilvalidation.IsQualifiedName(value) {
		errs = append(errs, field.Invalid(path, value, msg))
	}
	return errs
}
