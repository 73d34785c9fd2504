package crd

import (
	"errors"
	"fmt"
	"sort"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
)

// ErrUnsupportedConversion is returned by New for a CRD whose conversion
// strategy is neither None nor Webhook.
var ErrUnsupportedConversion = errors.New("only the None and Webhook conversion strategies are supported")

// ErrNeedsWebhook is returned by Convert for a change of version of a CRD
// whose conversion strategy is Webhook: package conversion makes it.
var ErrNeedsWebhook = errors.New("the conversion between versions is the conversion webhook's")

// Definition is what the server needs to serve the custom resources of one
// CustomResourceDefinition. It is immutable and safe for concurrent use; a
// changed CRD needs a new Definition.
type Definition struct {
	name                  string
	group                 string
	names                 apiextensionsv1.CustomResourceDefinitionNames
	namespaced            bool
	preserveUnknownFields bool
	webhook               bool // conversion strategy Webhook
	versions              map[string]*Version
	sorted                []*Version // by Kubernetes' version priority, highest first
	storage               *Version
}

// New builds the Definition of crd, which must be valid (see
// ValidateDefinition) and defaulted (see SetDefaults). As in Kubernetes, the resource is
// served under status.acceptedNames (see AcceptNames); under spec.names when
// none have been accepted yet.
func New(crd *apiextensionsv1.CustomResourceDefinition) (*Definition, error) {
	crd = crd.DeepCopy()
	webhook := false
	if c := crd.Spec.Conversion; c != nil && c.Strategy != apiextensionsv1.NoneConverter {
		if c.Strategy != apiextensionsv1.WebhookConverter || c.Webhook == nil || c.Webhook.ClientConfig == nil {
			return nil, fmt.Errorf("crd %s: conversion strategy %q: %w", crd.Name, c.Strategy, ErrUnsupportedConversion)
		}
		webhook = true
	}
	d := &Definition{
		name:                  crd.Name,
		group:                 crd.Spec.Group,
		names:                 crd.Spec.Names,
		namespaced:            crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		preserveUnknownFields: crd.Spec.PreserveUnknownFields,
		webhook:               webhook,
		versions:              map[string]*Version{},
	}
	if crd.Status.AcceptedNames.Plural != "" {
		d.names = crd.Status.AcceptedNames
	}
	for i := range crd.Spec.Versions {
		cv := &crd.Spec.Versions[i]
		v, err := newVersion(d, crd, cv)
		if err != nil {
			return nil, fmt.Errorf("crd %s: version %s: %w", crd.Name, cv.Name, err)
		}
		d.versions[v.name] = v
		d.sorted = append(d.sorted, v)
		if v.storage {
			if d.storage != nil {
				return nil, fmt.Errorf("crd %s: more than one storage version", crd.Name)
			}
			d.storage = v
		}
	}
	if d.storage == nil {
		return nil, fmt.Errorf("crd %s: no storage version", crd.Name)
	}
	sort.SliceStable(d.sorted, func(i, j int) bool {
		return version.CompareKubeAwareVersionStrings(d.sorted[i].name, d.sorted[j].name) > 0
	})
	for _, v := range d.sorted {
		v.deprecationWarning = deprecationWarning(crd, v)
	}
	return d, nil
}

// Name returns the CRD's name, <plural>.<group>.
func (d *Definition) Name() string { return d.name }

// Group returns the API group of the custom resources.
func (d *Definition) Group() string { return d.group }

// Names returns a copy of the CRD's spec.names.
func (d *Definition) Names() apiextensionsv1.CustomResourceDefinitionNames {
	return *d.names.DeepCopy()
}

// Namespaced reports whether the custom resources are namespaced.
func (d *Definition) Namespaced() bool { return d.namespaced }

// Version returns the version called name, or nil when the CRD has none.
// Objects stored in a version that is no longer served are still decoded in
// its schema: check Served before serving a version.
func (d *Definition) Version(name string) *Version { return d.versions[name] }

// Versions returns all versions in Kubernetes' discovery order: the highest
// by kube-aware version priority (v2 > v1 > v1beta2 > v1alpha1) first.
// Discovery lists the served ones; the first of those is the preferred
// version.
func (d *Definition) Versions() []*Version {
	return append([]*Version(nil), d.sorted...)
}

// StorageVersion returns the version objects are stored in.
func (d *Definition) StorageVersion() *Version { return d.storage }

// Webhook reports whether the CRD's conversion strategy is Webhook:
// Convert then only stamps and prunes objects already in the version asked
// for, and package conversion converts between versions.
func (d *Definition) Webhook() bool { return d.webhook }

// Decode prepares a custom resource decoded from a request body for version,
// as kube-apiserver's decoder does: in the schema of the object's own
// apiVersion it drops unknown fields (and unknown metadata fields), drops
// nulls that are neither nullable nor defaulted, coerces embedded resources'
// metadata and applies defaults; then it converts obj to version.
//
// Like kube-apiserver, the server should answer 400 when the body's
// apiVersion is not the request's.
//
// unknownFields lists the paths of the fields dropped, for the
// fieldValidation=Strict and Warn query parameters (Kubernetes reports each
// as `unknown field "<path>"`). An error means the body cannot be decoded
// (a 400 Bad Request): malformed metadata, or an apiVersion of another group
// or of a version the CRD does not have.
func (d *Definition) Decode(obj map[string]interface{}, version string) (unknownFields []string, err error) {
	unknownFields, s, err := d.coerce(obj, coerceOptions{trackUnknown: true})
	if err != nil {
		return nil, err
	}
	if s != nil {
		structuraldefaulting.Default(obj, s)
	}
	return unknownFields, d.Convert(obj, version)
}

// DecodeStored prepares a custom resource read from storage for version, as
// kube-apiserver's storage codec does: like Decode, except that malformed
// metadata fields are dropped instead of failing, and a missing generation
// becomes 1. Defaults are those of the stored version. With version "",
// obj stays in the version it was stored in (for a conversion webhook to
// convert next).
func (d *Definition) DecodeStored(obj map[string]interface{}, version string) error {
	_, s, err := d.coerce(obj, coerceOptions{dropInvalidMetadata: true, repairGeneration: true})
	if err != nil {
		return err
	}
	if s != nil {
		structuraldefaulting.Default(obj, s)
	}
	if version == "" {
		return nil
	}
	return d.Convert(obj, version)
}

// Prune coerces obj in the schema of its own apiVersion: what
// kube-apiserver does to the objects a conversion webhook returns (unknown
// fields and non-nullable nulls dropped, metadata of embedded resources
// coerced), before they are stored or served.
func (d *Definition) Prune(obj map[string]interface{}) error {
	_, _, err := d.coerce(obj, coerceOptions{})
	return err
}

// Convert converts obj in place to version with the None strategy: it sets
// apiVersion, then prunes obj in the schema of version. Use it with the
// storage version before writing an object. For a CRD with a conversion
// webhook, a change of version is ErrNeedsWebhook.
func (d *Definition) Convert(obj map[string]interface{}, version string) error {
	to := d.versions[version]
	if to == nil {
		return fmt.Errorf("request to convert CR to an invalid group/version: %s", schema.GroupVersion{Group: d.group, Version: version})
	}
	apiVersion, _, err := unstructured.NestedString(obj, "apiVersion")
	if err != nil {
		return err
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return err
	}
	if gv.Group != d.group || d.versions[gv.Version] == nil {
		return fmt.Errorf("request to convert CR from an invalid group/version: %s", gv)
	}
	if gv.Version == version {
		// Pruning again in the same schema changes nothing: skip it.
		return nil
	}
	if d.webhook {
		return fmt.Errorf("convert %s to %s: %w", gv, version, ErrNeedsWebhook)
	}
	obj["apiVersion"] = schema.GroupVersion{Group: d.group, Version: version}.String()
	_, _, err = d.coerce(obj, coerceOptions{})
	return err
}

type coerceOptions struct {
	dropInvalidMetadata bool
	repairGeneration    bool
	trackUnknown        bool
}

// coerce is kube-apiserver's unstructuredSchemaCoercer: it does for a custom
// resource what decoding JSON into a Go struct does for a built-in one. It
// works in the schema of obj's apiVersion, which it returns, and only on this
// CRD's group and kind: other objects keep everything but unknown metadata
// fields, and the returned schema is nil.
func (d *Definition) coerce(obj map[string]interface{}, opts coerceOptions) ([]string, *structuralschema.Structural, error) {
	kind, foundKind, err := unstructured.NestedString(obj, "kind")
	if err != nil {
		return nil, nil, err
	}
	apiVersion, foundAPIVersion, err := unstructured.NestedString(obj, "apiVersion")
	if err != nil {
		return nil, nil, err
	}
	// Metadata that is already canonical needs no round trip through
	// metav1.ObjectMeta (the bulk of this function's cost).
	plain := canonicalMetadata(obj)
	var (
		meta      *metav1.ObjectMeta
		foundMeta bool
		unknown   []string
	)
	if !plain {
		meta, foundMeta, unknown, err = schemaobjectmeta.GetObjectMetaWithOptions(obj, schemaobjectmeta.ObjectMetaOptions{
			DropMalformedFields:     opts.dropInvalidMetadata,
			ReturnUnknownFieldPaths: opts.trackUnknown,
		})
		if err != nil {
			return nil, nil, err
		}
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, nil, err
	}

	var s *structuralschema.Structural
	if gv.Group == d.group && kind == d.names.Kind {
		v := d.versions[gv.Version]
		if v == nil {
			return nil, nil, fmt.Errorf("request to convert CR from an invalid group/version: %s", gv)
		}
		s = v.structural
		if !d.preserveUnknownFields {
			pruneOpts := structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: opts.trackUnknown}
			unknown = append(unknown, structuralpruning.PruneWithOptions(obj, s, true, pruneOpts)...)
			structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, s)
		}
		ferr, paths := schemaobjectmeta.CoerceWithOptions(nil, obj, s, false, schemaobjectmeta.CoerceOptions{
			DropInvalidFields:       opts.dropInvalidMetadata,
			ReturnUnknownFieldPaths: opts.trackUnknown,
		})
		if ferr != nil {
			return nil, nil, ferr
		}
		unknown = append(unknown, paths...)
		if opts.repairGeneration && meta != nil && meta.Generation == 0 {
			meta.Generation = 1
		}
		if opts.repairGeneration && plain {
			if md, ok := obj["metadata"].(map[string]interface{}); ok && md["generation"] == nil {
				md["generation"] = int64(1)
			}
		}
	}

	// Restore the fields the schema need not mention, starting clean.
	if foundKind {
		obj["kind"] = kind
	}
	if foundAPIVersion {
		obj["apiVersion"] = apiVersion
	}
	if foundMeta {
		if err := schemaobjectmeta.SetObjectMeta(obj, meta); err != nil {
			return nil, nil, err
		}
	}
	return unknown, s, nil
}

// structuralFor returns the structural schema of a CRD version with its
// defaults pruned, ready for pruning, defaulting and CEL.
func structuralFor(crd *apiextensionsv1.CustomResourceDefinition, v *apiextensionsv1.CustomResourceDefinitionVersion) (*structuralschema.Structural, *apiextensions.JSONSchemaProps, error) {
	if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
		return nil, nil, errors.New("no schema")
	}
	internal := &apiextensions.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v.Schema, internal, nil); err != nil {
		return nil, nil, fmt.Errorf("convert schema: %w", err)
	}
	s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil && !crd.Spec.PreserveUnknownFields {
		return nil, nil, fmt.Errorf("schema is not structural: %w", err)
	}
	if s == nil {
		return nil, nil, fmt.Errorf("schema is not structural: %w", err)
	}
	if !crd.Spec.PreserveUnknownFields {
		if errs := structuralschema.ValidateStructural(nil, s); len(errs) > 0 {
			return nil, nil, fmt.Errorf("schema is not structural: %w", errs.ToAggregate())
		}
	}
	// NewStructural shares defaults with its input: copy before pruning them.
	s = s.DeepCopy()
	if err := structuraldefaulting.PruneDefaults(s); err != nil {
		return nil, nil, fmt.Errorf("prune defaults: %w", err)
	}
	return s, internal.OpenAPIV3Schema, nil
}

func deprecationWarning(crd *apiextensionsv1.CustomResourceDefinition, v *Version) string {
	var cv *apiextensionsv1.CustomResourceDefinitionVersion
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Name == v.name {
			cv = &crd.Spec.Versions[i]
		}
	}
	if cv == nil || !cv.Deprecated {
		return ""
	}
	if cv.DeprecationWarning != nil {
		return *cv.DeprecationWarning
	}
	// The same text as kube-apiserver's default warning.
	msg := fmt.Sprintf("%s/%s %s is deprecated", crd.Spec.Group, cv.Name, crd.Spec.Names.Kind)
	var newest string
	for _, o := range crd.Spec.Versions {
		if !o.Served || o.Deprecated || version.CompareKubeAwareVersionStrings(cv.Name, o.Name) >= 0 {
			continue
		}
		if newest == "" || version.CompareKubeAwareVersionStrings(o.Name, newest) > 0 {
			newest = o.Name
		}
	}
	if newest != "" {
		msg += fmt.Sprintf("; use %s/%s %s", crd.Spec.Group, newest, crd.Spec.Names.Kind)
	}
	return msg
}
