// Package crd serves CustomResourceDefinitions: it checks and prepares
// apiextensions.k8s.io/v1 CustomResourceDefinition objects, and turns one into
// a Definition that prunes, defaults, converts, validates and prints its
// custom resources the way kube-apiserver does.
//
// # Why Kubernetes' structural-schema packages
//
// A CRD schema is not plain JSON Schema. Kubernetes gives it meanings a
// general JSON-schema validator does not know: unknown fields are pruned
// (except under x-kubernetes-preserve-unknown-fields), defaults are applied on
// request and on read from storage, null is dropped where a field is neither
// nullable nor defaulted, metadata of the resource and of
// x-kubernetes-embedded-resource values is coerced to ObjectMeta,
// x-kubernetes-list-type and x-kubernetes-validations (CEL) rules apply, and
// kubectl and controllers match on the exact field paths and messages of the
// errors. So this package uses k8s.io/apiextensions-apiserver as a library
// (pkg/apiserver/schema and its pruning, defaulting and objectmeta packages,
// pkg/apiserver/validation, pkg/registry/customresource and its
// tableconvertor, pkg/apis/apiextensions/validation and
// pkg/controller/openapi/builder) instead of a general validator: the
// behaviour, including CEL rules and validation ratcheting on update, is
// Kubernetes' own, with identical error messages.
//
// Both conversion strategies are served. With None, versions of a CRD
// differ in apiVersion, schema, subresources and printer columns, not in
// shape, and Convert converts. With Webhook, Convert only prunes objects
// already in the version asked for; the conversion webhook (package
// conversion, which calls it and checks its answer) converts between
// versions, and Prune coerces what it returns.
//
// # Serving a CustomResourceDefinition
//
// On create (update): SetDefaults, PrepareDefinitionForCreate
// (PrepareDefinitionForUpdate), ValidateDefinition (ValidateDefinitionUpdate),
// write; then AcceptNames against the other CRDs and write the status, as
// kube-apiserver's naming and establishing controllers do. Serve the custom
// resources of an Established CRD with the Definition that New builds.
//
// # Serving a custom resource
//
// For a request body, in this order, as kube-apiserver does:
//
//	unknown, err := def.Decode(obj, version)  // prune, default, set apiVersion
//	v := def.Version(version)
//	v.PrepareForCreate(obj)                   // or PrepareForUpdate(obj, old)
//	errs := v.Validate(ctx, obj)              // or ValidateUpdate(ctx, obj, old)
//	err = def.Convert(obj, def.StorageVersion().Name())
//
// Through /status: PrepareForStatusUpdate and ValidateStatusUpdate. For an
// object read from storage: def.DecodeStored(obj, version). Field selectors:
// ValidateFieldLabel and Fields. kubectl get: ConvertToTable.
//
// # Concurrency
//
// A Definition and its Versions are immutable after New and safe for
// concurrent use; values they return must not be modified. The functions on
// CustomResourceDefinition objects are synchronous and keep no reference to
// their arguments. No function here starts a goroutine.
package crd
