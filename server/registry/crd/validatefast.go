package crd

import (
	"context"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apiextensionsfeatures "k8s.io/apiextensions-apiserver/pkg/features"
	"k8s.io/apimachinery/pkg/api/validate"
	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// fastValidator validates a custom resource of one version as Kubernetes'
// custom resource strategy (customresource.NewStrategy) does, with the same
// errors, without the strategy's costly steps that cannot change them for
// a common object:
//
//   - ObjectMeta: the strategy converts metadata into a metav1.ObjectMeta
//     with the unstructured converter and validates it twice, imperatively
//     and declaratively. When canonicalMetadata accepts the metadata (the
//     field manager's managedFields included), the conversion succeeds and
//     yields what the Unstructured's accessors return, so the imperative
//     validation runs on those accessors. Every declarative ObjectMeta rule
//     is alpha, which Kubernetes reports only in its test mode
//     (validate.AllDeclarativeEnforced), and none of the rules that apply to
//     canonical metadata (no ownerReferences; for managedFields, an
//     operation required and one of its values) returns an internal error:
//     outside the test mode the declarative errors are dropped and remove no
//     imperative error, so the declarative pass is skipped. The imperative
//     errors still go through validate.FilterCoveredHandwrittenErrors,
//     which also removes duplicates as the strategy's does.
//   - apiVersion and kind: the strategy reports (only) them when they are
//     not the version's; they must be, or the strategy runs.
//   - x-kubernetes-embedded-resource and x-kubernetes-list-type: the
//     strategy walks the whole object for them; the walk can only report
//     errors below a schema node with the extension, so it is skipped when
//     the schema has none, and otherwise called as the strategy does.
//
// The strategy runs instead for a version with x-kubernetes-validations
// (CEL) rules or a scale subresource, and for objects that are not plain.
type fastValidator struct {
	ok         bool // the version's schema and subresources allow the fast path
	namespaced bool
	kind       string
	apiVersion string

	schema     apiservervalidation.SchemaValidator // the strategy's
	structural *structuralschema.Structural        // the strategy's
	embedded   bool                                // the schema has x-kubernetes-embedded-resource
	listTypes  bool                                // the schema has x-kubernetes-list-type
}

func newFastValidator(namespaced bool, group, version, kind string, validator apiservervalidation.SchemaValidator, s *structuralschema.Structural, scale bool) fastValidator {
	return fastValidator{
		// The strategy has a CEL validator exactly when the schema has
		// rules (cel.NewValidator); its scale checks are its own.
		ok:         !scale && s != nil && validator != nil && !anySchema(s, hasCELRules),
		namespaced: namespaced,
		kind:       kind,
		apiVersion: group + "/" + version,
		schema:     validator,
		structural: s,
		embedded:   anySchema(s, func(s *structuralschema.Structural) bool { return s.XEmbeddedResource }),
		listTypes:  anySchema(s, func(s *structuralschema.Structural) bool { return s.XListType != nil }),
	}
}

// validate returns what the strategy's Validate returns for obj and true,
// or false when it cannot tell.
func (f *fastValidator) validate(ctx context.Context, obj map[string]interface{}) (field.ErrorList, bool) {
	if !f.ok || !f.plainTypeMeta(obj) || !canonicalMetadata(obj) || validate.AllDeclarativeEnforced(ctx) {
		return nil, false
	}
	u := &unstructured.Unstructured{Object: obj}
	var errs field.ErrorList
	errs = append(errs, f.imperative(ctx, validation.ValidateObjectMetaAccessor(u, f.namespaced, validation.NameIsDNSSubdomain, field.NewPath("metadata")))...)
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, f.schema)...)
	if f.embedded {
		errs = append(errs, schemaobjectmeta.Validate(ctx, nil, obj, f.structural, false)...)
	}
	if f.listTypes {
		errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, f.structural, obj)...)
	}
	return errs, true
}

// validateUpdate returns what the strategy's ValidateUpdate returns for the
// update of old to obj and true, or false when it cannot tell.
func (f *fastValidator) validateUpdate(ctx context.Context, obj, old map[string]interface{}) (field.ErrorList, bool) {
	if !f.ok || !f.plainTypeMeta(obj) || !canonicalMetadata(obj) || !canonicalMetadata(old) || validate.AllDeclarativeEnforced(ctx) {
		return nil, false
	}
	ratcheting := utilfeature.DefaultFeatureGate.Enabled(apiextensionsfeatures.CRDValidationRatcheting)
	var (
		options    []apiservervalidation.ValidationOption
		correlated *common.CorrelatedObject
	)
	if ratcheting {
		correlated = common.NewCorrelatedObject(obj, old, &model.Structural{Structural: f.structural})
		options = append(options, apiservervalidation.WithRatcheting(correlated))
	}
	u, o := &unstructured.Unstructured{Object: obj}, &unstructured.Unstructured{Object: old}
	var errs field.ErrorList
	errs = append(errs, f.imperative(ctx, validation.ValidateObjectMetaAccessorUpdate(u, o, field.NewPath("metadata")))...)
	errs = append(errs, apiservervalidation.ValidateCustomResourceUpdate(nil, obj, old, f.schema, options...)...)
	if f.embedded {
		errs = append(errs, schemaobjectmeta.Validate(ctx, nil, obj, f.structural, false)...)
	}
	if f.listTypes {
		// Ratcheting: list errors count only when old had none.
		if oldErrs := structurallisttype.ValidateListSetsAndMaps(nil, f.structural, old); len(oldErrs) == 0 {
			errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, f.structural, obj)...)
		}
	}
	if ratcheting {
		apiservervalidation.Metrics.ObserveRatchetingTime(*correlated.Duration)
	}
	return errs, true
}

// plainTypeMeta reports whether obj's apiVersion and kind are the version's,
// so that the strategy reports no error about them.
func (f *fastValidator) plainTypeMeta(obj map[string]interface{}) bool {
	kind, _ := obj["kind"].(string)
	apiVersion, _ := obj["apiVersion"].(string)
	return kind == f.kind && apiVersion == f.apiVersion
}

// imperative returns the imperative ObjectMeta errors errs as
// validation.ValidateObjectMetaDeclaratively returns them when no
// declarative error is enforced: marked as imperative, deduplicated.
func (f *fastValidator) imperative(ctx context.Context, errs field.ErrorList) field.ErrorList {
	if len(errs) == 0 {
		return nil
	}
	return validate.FilterCoveredHandwrittenErrors(ctx, errs.MarkFromImperative(), nil, utilfeature.DefaultFeatureGate.Enabled(features.DeclarativeValidationBeta))
}

// anySchema reports whether pred holds for a node of s that Kubernetes'
// walks of an object along its schema (CEL, embedded resources, list types)
// visit: properties, additionalProperties and items.
func anySchema(s *structuralschema.Structural, pred func(*structuralschema.Structural) bool) bool {
	if s == nil {
		return false
	}
	if pred(s) || anySchema(s.Items, pred) {
		return true
	}
	if s.AdditionalProperties != nil && anySchema(s.AdditionalProperties.Structural, pred) {
		return true
	}
	for k := range s.Properties {
		p := s.Properties[k]
		if anySchema(&p, pred) {
			return true
		}
	}
	return false
}

// hasCELRules reports whether s has x-kubernetes-validations rules, also,
// to be safe, under allOf, anyOf, oneOf or not, where cel.NewValidator
// does not look.
func hasCELRules(s *structuralschema.Structural) bool {
	return len(s.XValidations) > 0 || (s.ValueValidation != nil && nestedCELRules(s.ValueValidation))
}

func nestedCELRules(v *structuralschema.ValueValidation) bool {
	var nested func(n *structuralschema.NestedValueValidation) bool
	nested = func(n *structuralschema.NestedValueValidation) bool {
		if n == nil {
			return false
		}
		if len(n.XValidations) > 0 || nestedCELRules(&n.ValueValidation) || nested(n.Items) || nested(n.AdditionalProperties) {
			return true
		}
		for k := range n.Properties {
			p := n.Properties[k]
			if nested(&p) {
				return true
			}
		}
		return false
	}
	for _, l := range [][]structuralschema.NestedValueValidation{v.AllOf, v.AnyOf, v.OneOf} {
		for i := range l {
			if nested(&l[i]) {
				return true
			}
		}
	}
	return nested(v.Not)
}
