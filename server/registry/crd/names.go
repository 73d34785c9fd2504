package crd

import (
	"fmt"
	"slices"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/sets"
)

// AcceptNames sets crd's status.acceptedNames and its NamesAccepted and
// Established conditions the way kube-apiserver's naming and establishing
// controllers do, in one step: a requested name is accepted unless another
// CRD of the same group has already accepted it, and a CRD is established once
// all its names have been accepted, and stays so. others are the other CRDs
// (of any group; crd itself is skipped); their status.acceptedNames are the
// names in use. AcceptNames reports whether it changed crd's status, which
// the caller then writes as a status update.
func AcceptNames(crd *apiextensionsv1.CustomResourceDefinition, others []*apiextensionsv1.CustomResourceDefinition) (changed bool) {
	resources, kinds := sets.New[string](), sets.New[string]()
	add := func(n apiextensionsv1.CustomResourceDefinitionNames) {
		resources.Insert(n.Plural, n.Singular)
		resources.Insert(n.ShortNames...)
		kinds.Insert(n.Kind, n.ListKind)
	}
	for _, o := range others {
		if o.Spec.Group == crd.Spec.Group && o.Name != crd.Name {
			add(o.Status.AcceptedNames)
		}
	}
	// As in Kubernetes, the CRD's own accepted names count as in use too.
	add(crd.Status.AcceptedNames)

	requested, accepted := crd.Spec.Names, crd.Status.AcceptedNames
	names := *accepted.DeepCopy()
	cond := apiextensionsv1.CustomResourceDefinitionCondition{
		Type:    apiextensionsv1.NamesAccepted,
		Status:  apiextensionsv1.ConditionTrue,
		Reason:  "NoConflicts",
		Message: "no conflicts found",
	}
	conflict := func(reason string, err error) {
		cond.Status, cond.Reason, cond.Message = apiextensionsv1.ConditionFalse, reason, err.Error()
	}
	if err := freeName(requested.Plural, accepted.Plural, resources); err != nil {
		conflict("PluralConflict", err)
	} else {
		names.Plural = requested.Plural
	}
	if err := freeName(requested.Singular, accepted.Singular, resources); err != nil {
		conflict("SingularConflict", err)
	} else {
		names.Singular = requested.Singular
	}
	if !slices.Equal(requested.ShortNames, accepted.ShortNames) {
		var errs []error
		for _, s := range requested.ShortNames {
			if slices.Contains(accepted.ShortNames, s) {
				continue
			}
			if err := freeName(s, "", resources); err != nil {
				errs = append(errs, err)
			}
		}
		if err := utilerrors.NewAggregate(errs); err != nil {
			conflict("ShortNamesConflict", err)
		} else {
			names.ShortNames = slices.Clone(requested.ShortNames)
		}
	}
	if err := freeName(requested.Kind, accepted.Kind, kinds); err != nil {
		conflict("KindConflict", err)
	} else {
		names.Kind = requested.Kind
	}
	if err := freeName(requested.ListKind, accepted.ListKind, kinds); err != nil {
		conflict("ListKindConflict", err)
	} else {
		names.ListKind = requested.ListKind
	}
	names.Categories = slices.Clone(requested.Categories)

	established := apiextensionsv1.CustomResourceDefinitionCondition{
		Type:    apiextensionsv1.Established,
		Status:  apiextensionsv1.ConditionFalse,
		Reason:  "NotAccepted",
		Message: "not all names are accepted",
	}
	if old := apihelpers.FindCRDCondition(crd, apiextensionsv1.Established); old != nil {
		established = *old
	}
	if established.Status != apiextensionsv1.ConditionTrue && cond.Status == apiextensionsv1.ConditionTrue {
		established = apiextensionsv1.CustomResourceDefinitionCondition{
			Type:    apiextensionsv1.Established,
			Status:  apiextensionsv1.ConditionTrue,
			Reason:  "InitialNamesAccepted",
			Message: "the initial names have been accepted",
		}
	}

	before := crd.Status.DeepCopy()
	crd.Status.AcceptedNames = names
	setCondition(crd, cond)
	setCondition(crd, established)
	return !equality.Semantic.DeepEqual(before, &crd.Status)
}

// setCondition is apihelpers.SetCRDCondition without touching an unchanged
// condition, so that AcceptNames can tell whether anything changed.
func setCondition(crd *apiextensionsv1.CustomResourceDefinition, c apiextensionsv1.CustomResourceDefinitionCondition) {
	if old := apihelpers.FindCRDCondition(crd, c.Type); old != nil && old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
		return
	}
	apihelpers.SetCRDCondition(crd, c)
}

func freeName(requested, accepted string, used sets.Set[string]) error {
	if requested == accepted || !used.Has(requested) {
		return nil
	}
	return fmt.Errorf("%q is already in use", requested)
}
