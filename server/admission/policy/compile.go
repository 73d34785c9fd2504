package policy

import (
	"sync"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"
)

// The compilers below put Kubernetes' own pieces together as its
// validating and mutating plugins do (their compilePolicy functions are
// unexported): the composited compiler with the policy's variables, the
// match conditions, and the validations, audit annotations and message
// expressions, or the mutations. Expressions compile in the environment
// for stored expressions: what the registry accepted keeps compiling when
// the environment grows.

var baseEnv = sync.OnceValue(func() *environment.EnvSet {
	return environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
})

func variables(vs []admissionv1.Variable) []plugincel.NamedExpressionAccessor {
	out := make([]plugincel.NamedExpressionAccessor, len(vs))
	for i, v := range vs {
		out[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	return out
}

func matchConditions(c *plugincel.CompositedCompiler, conds []admissionv1.MatchCondition, vars plugincel.OptionalVariableDeclarations, fp *admissionv1.FailurePolicyType, name string) matchconditions.Matcher {
	if len(conds) == 0 {
		return nil
	}
	acc := make([]plugincel.ExpressionAccessor, len(conds))
	for i := range conds {
		acc[i] = (*matchconditions.MatchCondition)(&conds[i])
	}
	return matchconditions.NewMatcher(c.CompileCondition(acc, vars, environment.StoredExpressions), fp, "policy", "validate", name)
}

// compileValidating is a ValidatingAdmissionPolicy's evaluator; a
// compilation error is kept in it and reported when it runs.
func compileValidating(p *admissionv1.ValidatingAdmissionPolicy) validating.Validator {
	params := p.Spec.ParamKind != nil
	vars := plugincel.OptionalVariableDeclarations{HasParams: params, HasAuthorizer: true}
	fp := p.Spec.FailurePolicy
	c, err := plugincel.NewCompositedCompiler(baseEnv())
	if err != nil {
		return validating.NewValidator(nil, nil, nil, nil, fp, err)
	}
	c.CompileAndStoreVariables(variables(p.Spec.Variables), vars, environment.StoredExpressions)
	vals := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	msgs := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		vals[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			msgs[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	audits := make([]plugincel.ExpressionAccessor, len(p.Spec.AuditAnnotations))
	for i, a := range p.Spec.AuditAnnotations {
		audits[i] = &validating.AuditAnnotationCondition{Key: a.Key, ValueExpression: a.ValueExpression}
	}
	return validating.NewValidator(
		c.CompileCondition(vals, vars, environment.StoredExpressions),
		matchConditions(c, p.Spec.MatchConditions, vars, fp, p.Name),
		c.CompileCondition(audits, vars, environment.StoredExpressions),
		c.CompileCondition(msgs, plugincel.OptionalVariableDeclarations{HasParams: params}, environment.StoredExpressions),
		fp, nil)
}

// compileMutating is a MutatingAdmissionPolicy's evaluator: one patcher
// per mutation, in order.
func compileMutating(p *admissionv1.MutatingAdmissionPolicy) mutating.PolicyEvaluator {
	vars := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil, HasAuthorizer: true}
	c, err := plugincel.NewCompositedCompiler(baseEnv())
	if err != nil {
		return mutating.PolicyEvaluator{Error: err}
	}
	c.CompileAndStoreVariables(variables(p.Spec.Variables), vars, environment.StoredExpressions)
	patchVars := vars
	patchVars.HasPatchTypes = true
	var patchers []patch.Patcher
	for _, m := range p.Spec.Mutations {
		switch {
		case m.PatchType == admissionv1.PatchTypeJSONPatch && m.JSONPatch != nil:
			r := c.CompileMutatingEvaluator(&patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}, patchVars, environment.StoredExpressions)
			patchers = append(patchers, patch.NewJSONPatcher(r))
		case m.PatchType == admissionv1.PatchTypeApplyConfiguration && m.ApplyConfiguration != nil:
			r := c.CompileMutatingEvaluator(&patch.ApplyConfigurationCondition{Expression: m.ApplyConfiguration.Expression}, patchVars, environment.StoredExpressions)
			patchers = append(patchers, patch.NewApplyConfigurationPatcher(r))
		}
	}
	return mutating.PolicyEvaluator{
		Matcher:  matchConditions(c, p.Spec.MatchConditions, vars, p.Spec.FailurePolicy, p.Name),
		Mutators: patchers, CompositedCompiler: c,
	}
}
