package crd

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// Version is one version of a CRD. It is immutable and safe for concurrent
// use.
type Version struct {
	name               string
	served             bool
	storage            bool
	scale              *Scale
	deprecationWarning string
	fieldLabels        sets.Set[string]

	structural *structuralschema.Structural
	strategy   strategy
	fast       fastValidator  // the strategy's Validate and ValidateUpdate for common objects
	status     statusStrategy // nil without a status subresource
	table      rest.TableConvertor

	openAPIV3 func() (*spec3.OpenAPI, error)
	openAPIV2 func() (*spec.Swagger, error)
}

var _ rest.TableConvertor = (*Version)(nil)

// strategy is what Version uses of Kubernetes' custom resource strategy.
type strategy interface {
	PrepareForCreate(ctx context.Context, obj runtime.Object)
	PrepareForUpdate(ctx context.Context, obj, old runtime.Object)
	Validate(ctx context.Context, obj runtime.Object) field.ErrorList
	ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList
	GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error)
}

// statusStrategy is what Version uses of Kubernetes' status strategy.
type statusStrategy interface {
	PrepareForUpdate(ctx context.Context, obj, old runtime.Object)
	ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList
}

// Scale is the configuration of a version's scale subresource: JSON paths in
// the custom resource, each starting with a dot.
type Scale struct {
	SpecReplicasPath   string
	StatusReplicasPath string
	LabelSelectorPath  string // empty when not set
}

func newVersion(d *Definition, crd *apiextensionsv1.CustomResourceDefinition, cv *apiextensionsv1.CustomResourceDefinitionVersion) (*Version, error) {
	s, props, err := structuralFor(crd, cv)
	if err != nil {
		return nil, err
	}
	v := &Version{
		name:        cv.Name,
		served:      cv.Served,
		storage:     cv.Storage,
		structural:  s,
		fieldLabels: sets.New("metadata.name"),
	}
	if d.namespaced {
		v.fieldLabels.Insert("metadata.namespace")
	}
	for _, f := range cv.SelectableFields {
		v.fieldLabels.Insert(strings.TrimPrefix(f.JSONPath, "."))
	}

	validator, _, err := apiservervalidation.NewSchemaValidator(props)
	if err != nil {
		return nil, fmt.Errorf("schema validator: %w", err)
	}
	var (
		statusSpec      *apiextensions.CustomResourceSubresourceStatus
		statusValidator apiservervalidation.SchemaValidator
		scaleSpec       *apiextensions.CustomResourceSubresourceScale
	)
	if sub := cv.Subresources; sub != nil && sub.Status != nil {
		statusSpec = &apiextensions.CustomResourceSubresourceStatus{}
		// Status updates are validated against the status schema alone.
		if ss, ok := props.Properties["status"]; ok {
			if statusValidator, _, err = apiservervalidation.NewSchemaValidator(&ss); err != nil {
				return nil, fmt.Errorf("status schema validator: %w", err)
			}
		}
	}
	if sub := cv.Subresources; sub != nil && sub.Scale != nil {
		scaleSpec = &apiextensions.CustomResourceSubresourceScale{}
		if err := apiextensionsv1.Convert_v1_CustomResourceSubresourceScale_To_apiextensions_CustomResourceSubresourceScale(sub.Scale, scaleSpec, nil); err != nil {
			return nil, fmt.Errorf("convert scale: %w", err)
		}
		v.scale = &Scale{SpecReplicasPath: sub.Scale.SpecReplicasPath, StatusReplicasPath: sub.Scale.StatusReplicasPath}
		if sub.Scale.LabelSelectorPath != nil {
			v.scale.LabelSelectorPath = *sub.Scale.LabelSelectorPath
		}
	}

	kind := schema.GroupVersionKind{Group: d.group, Version: cv.Name, Kind: d.names.Kind}
	// The typer is used only by the generic registry, which objwatch does not use.
	st := customresource.NewStrategy(nil, d.namespaced, kind, validator, statusValidator, s, statusSpec, scaleSpec, cv.SelectableFields)
	v.strategy = st
	v.fast = newFastValidator(d.namespaced, d.group, cv.Name, d.names.Kind, validator, s, scaleSpec != nil)
	if statusSpec != nil {
		v.status = customresource.NewStatusStrategy(st)
	}

	// As kube-apiserver, fall back to the columns parsed so far when a column
	// does not parse; validation makes that unreachable for a valid CRD.
	v.table, _ = tableconvertor.New(printerColumns(cv))

	name := cv.Name
	v.openAPIV3 = sync.OnceValues(func() (*spec3.OpenAPI, error) {
		return builder.BuildOpenAPIV3(crd, name, builder.Options{V2: false, IncludeSelectableFields: true})
	})
	v.openAPIV2 = sync.OnceValues(func() (*spec.Swagger, error) {
		sw, err := builder.BuildOpenAPIV2(crd, name, builder.Options{V2: true, IncludeSelectableFields: true})
		if err != nil {
			return nil, err
		}
		// As kube-apiserver, for a clean merge with the built-in definitions.
		sw.Definitions = handler.PruneDefaults(sw.Definitions)
		return sw, nil
	})
	return v, nil
}

// printerColumns returns the version's additionalPrinterColumns, or Age alone
// when there are none. The Name column always comes first in a table.
func printerColumns(cv *apiextensionsv1.CustomResourceDefinitionVersion) []apiextensionsv1.CustomResourceColumnDefinition {
	if len(cv.AdditionalPrinterColumns) > 0 {
		return cv.AdditionalPrinterColumns
	}
	return []apiextensionsv1.CustomResourceColumnDefinition{{
		Name:        "Age",
		Type:        "date",
		Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"],
		JSONPath:    ".metadata.creationTimestamp",
	}}
}

// Name returns the version's name, e.g. "v1".
func (v *Version) Name() string { return v.name }

// Served reports whether the version is served.
func (v *Version) Served() bool { return v.served }

// Storage reports whether objects are stored in this version.
func (v *Version) Storage() bool { return v.storage }

// HasStatus reports whether the version has the status subresource.
func (v *Version) HasStatus() bool { return v.status != nil }

// Scale returns a copy of the version's scale subresource, or nil when it has
// none.
func (v *Version) Scale() *Scale {
	if v.scale == nil {
		return nil
	}
	s := *v.scale
	return &s
}

// DeprecationWarning returns the warning to send with every request to a
// deprecated version (spec.versions[].deprecationWarning or Kubernetes'
// default text), or "" when the version is not deprecated.
func (v *Version) DeprecationWarning() string { return v.deprecationWarning }

// PrepareForCreate resets what a client may not set when creating obj: the
// status, when the version has a status subresource; metadata.generation is 1.
func (v *Version) PrepareForCreate(obj map[string]interface{}) {
	v.strategy.PrepareForCreate(context.Background(), &unstructured.Unstructured{Object: obj})
}

// PrepareForUpdate resets what a client may not change when updating old to
// obj through the main resource: the status is old's, when the version has a
// status subresource; metadata.generation is old's, plus one when anything
// but metadata changed.
func (v *Version) PrepareForUpdate(obj, old map[string]interface{}) {
	u, o := &unstructured.Unstructured{Object: obj}, &unstructured.Unstructured{Object: old}
	u.SetGeneration(o.GetGeneration())
	v.strategy.PrepareForUpdate(context.Background(), u, o)
}

// PrepareForStatusUpdate makes obj, an update of old through the status
// subresource, a deep copy of old with obj's status and managedFields. It
// panics if the version has no status subresource.
func (v *Version) PrepareForStatusUpdate(obj, old map[string]interface{}) {
	u := &unstructured.Unstructured{Object: obj}
	v.status.PrepareForUpdate(context.Background(), u, &unstructured.Unstructured{Object: old})
	// Kubernetes replaced u.Object: move the result into the caller's map.
	clear(obj)
	maps.Copy(obj, u.Object)
}

// Validate validates obj for creation as kube-apiserver does: apiVersion and
// kind, metadata (a namespace exactly when namespaced; a DNS-subdomain
// name), the OpenAPI schema, the scale subresource's replicas and selector
// paths, metadata of embedded resources, x-kubernetes-list-type, and the
// x-kubernetes-validations CEL rules. obj must have been through Decode and
// PrepareForCreate, and have its name and namespace set.
func (v *Version) Validate(ctx context.Context, obj map[string]interface{}) field.ErrorList {
	if errs, ok := v.fast.validate(ctx, obj); ok {
		return errs
	}
	return v.strategy.Validate(ctx, &unstructured.Unstructured{Object: obj})
}

// ValidateUpdate validates the update of old to obj through the main
// resource like Validate, with Kubernetes' update rules for metadata and
// ratcheting: schema and CEL errors in fields that did not change are not
// reported.
func (v *Version) ValidateUpdate(ctx context.Context, obj, old map[string]interface{}) field.ErrorList {
	if errs, ok := v.fast.validateUpdate(ctx, obj, old); ok {
		return errs
	}
	return v.strategy.ValidateUpdate(ctx, &unstructured.Unstructured{Object: obj}, &unstructured.Unstructured{Object: old})
}

// ValidateStatusUpdate validates the update of old to obj through the status
// subresource: metadata, the status against the status schema alone, the
// scale status paths, x-kubernetes-list-type and CEL rules. It panics if the
// version has no status subresource.
func (v *Version) ValidateStatusUpdate(ctx context.Context, obj, old map[string]interface{}) field.ErrorList {
	return v.status.ValidateUpdate(ctx, &unstructured.Unstructured{Object: obj}, &unstructured.Unstructured{Object: old})
}

// Fields returns the fields of obj a field selector can match:
// metadata.name, metadata.namespace when namespaced, and the version's
// selectableFields (an absent value is "").
func (v *Version) Fields(obj map[string]interface{}) (fields.Set, error) {
	_, f, err := v.strategy.GetAttrs(&unstructured.Unstructured{Object: obj})
	return f, err
}

// ValidateFieldLabel returns an error, with Kubernetes' message, when a field
// selector may not use label with this version.
func (v *Version) ValidateFieldLabel(label string) error {
	if !v.fieldLabels.Has(label) {
		return fmt.Errorf("field label not supported: %s", label)
	}
	return nil
}

// ConvertToTable returns the table for an *unstructured.Unstructured or
// *unstructured.UnstructuredList of this version, as kubectl get asks for it:
// a Name column, the version's additionalPrinterColumns (Age when there are
// none), one row per object with the object in Row.Object. tableOptions may
// be a *metav1.TableOptions or nil.
func (v *Version) ConvertToTable(ctx context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return v.table.ConvertToTable(ctx, obj, tableOptions)
}

// OpenAPIV3 returns the OpenAPI v3 document Kubernetes publishes for this
// version of the CRD: the paths of the resource and its subresources, and the
// schemas of the kind, its list and the meta types they use. Merge the
// documents of one group version with
// k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder.MergeSpecsV3
// to serve /openapi/v3/apis/<group>/<version>. The document is built once and
// must not be modified.
func (v *Version) OpenAPIV3() (*spec3.OpenAPI, error) { return v.openAPIV3() }

// OpenAPIV2 returns the OpenAPI v2 (swagger) document Kubernetes merges into
// /openapi/v2 for this version of the CRD, with defaults pruned as there. The
// document is built once and must not be modified.
func (v *Version) OpenAPIV2() (*spec.Swagger, error) { return v.openAPIV2() }
