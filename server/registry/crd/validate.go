package crd

import (
	"context"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// SetDefaults applies Kubernetes' defaults to crd, as decoding an
// apiextensions.k8s.io/v1 object does: singular from the lowercase kind,
// listKind from kind+"List", conversion strategy None, the webhook service
// port, and status.storedVersions when empty.
func SetDefaults(crd *apiextensionsv1.CustomResourceDefinition) {
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
}

// PrepareDefinitionForCreate resets what a client may not set when creating
// crd: the status is cleared except for the storage version in
// status.storedVersions, and metadata.generation is 1.
func PrepareDefinitionForCreate(crd *apiextensionsv1.CustomResourceDefinition) {
	crd.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	crd.Generation = 1
	addStoredVersion(crd)
}

// PrepareDefinitionForUpdate resets what a client may not change when
// updating old to crd: the status is kept from old (plus a new storage
// version in status.storedVersions), and metadata.generation is old's plus
// one when the spec changed.
func PrepareDefinitionForUpdate(crd, old *apiextensionsv1.CustomResourceDefinition) {
	crd.Status = *old.Status.DeepCopy()
	crd.Generation = old.Generation
	if !equality.Semantic.DeepEqual(crd.Spec, old.Spec) {
		crd.Generation = old.Generation + 1
	}
	addStoredVersion(crd)
}

// RecordStorageVersion adds the storage version to status.storedVersions
// if it is not there, as Kubernetes' CRD strategy does on every create and
// update: a changed storage version is recorded, so that the objects still
// stored in the old one are known to be.
func RecordStorageVersion(crd *apiextensionsv1.CustomResourceDefinition) { addStoredVersion(crd) }

func addStoredVersion(crd *apiextensionsv1.CustomResourceDefinition) {
	for _, v := range crd.Spec.Versions {
		if !v.Storage {
			continue
		}
		for _, s := range crd.Status.StoredVersions {
			if s == v.Name {
				return
			}
		}
		crd.Status.StoredVersions = append(crd.Status.StoredVersions, v.Name)
		return
	}
}

// ValidateDefinition validates crd for creation with Kubernetes' own rules
// (names, metadata.name == plural.group, scope, exactly one storage version,
// structural schemas with pruned defaults, CEL rule costs, printer columns,
// subresources, the conversion webhook's clientConfig and
// conversionReviewVersions, ...). crd is expected to have been through SetDefaults and
// PrepareDefinitionForCreate.
func ValidateDefinition(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) field.ErrorList {
	in, errs := toInternal(crd)
	if len(errs) > 0 {
		return errs
	}
	return validation.ValidateCustomResourceDefinition(ctx, in)
}

// ValidateDefinitionUpdate validates the update of old to crd with
// Kubernetes' own rules (which, for example, keep names immutable once the
// CRD is established and ratchet rules the old CRD did not meet). crd is
// expected to have been through SetDefaults and PrepareDefinitionForUpdate.
func ValidateDefinitionUpdate(ctx context.Context, crd, old *apiextensionsv1.CustomResourceDefinition) field.ErrorList {
	in, errs := toInternal(crd)
	if len(errs) > 0 {
		return errs
	}
	oldIn, errs := toInternal(old)
	if len(errs) > 0 {
		return errs
	}
	return validation.ValidateCustomResourceDefinitionUpdate(ctx, in, oldIn)
}

func toInternal(crd *apiextensionsv1.CustomResourceDefinition) (*apiextensions.CustomResourceDefinition, field.ErrorList) {
	out := &apiextensions.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, out, nil); err != nil {
		return nil, field.ErrorList{field.InternalError(nil, err)}
	}
	return out, nil
}
