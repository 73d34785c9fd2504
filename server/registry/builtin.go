package registry

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/objwatch/objwatch/server/registry/crd"
)

// Names of the built-in groups.
const (
	CoordinationGroup  = "coordination.k8s.io"
	APIExtensionsGroup = "apiextensions.k8s.io"
)

// maxDataBytes is Kubernetes' limit on ConfigMap and Secret payloads.
const maxDataBytes = 1 << 20

// defaultSecret gives a secret without a type the Opaque type, as
// Kubernetes' defaulting does, and merges stringData into data (its
// values win), as Kubernetes' conversion does: stringData is write-only,
// never stored.
func defaultSecret(obj, _ *corev1.Secret) {
	if obj.Type == "" {
		obj.Type = corev1.SecretTypeOpaque
	}
	if len(obj.StringData) > 0 && obj.Data == nil {
		obj.Data = make(map[string][]byte, len(obj.StringData))
	}
	for k, v := range obj.StringData {
		obj.Data[k] = []byte(v)
	}
	obj.StringData = nil
}

// ageColumn is the Age column that Kubernetes' built-in tables end with.
var ageColumn = Column{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp",
	Description: "CreationTimestamp is a timestamp representing the server time when this object was created."}

// countKeys counts the keys of obj's top-level maps fields.
func countKeys(fields ...string) func(obj map[string]any) any {
	return func(obj map[string]any) any {
		n := int64(0)
		for _, f := range fields {
			m, _ := obj[f].(map[string]any)
			n += int64(len(m))
		}
		return n
	}
}

func builtins() []*Resource {
	rs := []*Resource{
		{
			Version: "v1", Plural: "namespaces", Singular: "namespace", Kind: "Namespace",
			ShortNames: []string{"ns"}, Status: true, Lifecycle: namespaceLifecycle,
			Columns: []Column{
				{Name: "Status", Type: "string", JSONPath: ".status.phase", Description: "The status of the namespace."},
				ageColumn,
			},
			PatchSchema: &corev1.Namespace{},
			Strategy:    typed[corev1.Namespace]{nameFn: metavalidation.ValidateNamespaceName, validate: validateNamespace},
			FieldLabels: func(u *unstructured.Unstructured) fields.Set {
				phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
				return fields.Set{"status.phase": phase}
			},
		},
		{
			Version: "v1", Plural: "configmaps", Singular: "configmap", Kind: "ConfigMap",
			ShortNames: []string{"cm"}, Namespaced: true,
			Columns: []Column{
				{Name: "Data", Type: "integer", Description: "Number of keys in data and binaryData.", Value: countKeys("data", "binaryData")},
				ageColumn,
			},
			PatchSchema: &corev1.ConfigMap{},
			Strategy:    typed[corev1.ConfigMap]{validate: validateConfigMap},
		},
		{
			Version: "v1", Plural: "secrets", Singular: "secret", Kind: "Secret", Namespaced: true,
			Columns: []Column{
				{Name: "Type", Type: "string", JSONPath: ".type", Description: "The type of the secret."},
				{Name: "Data", Type: "integer", Description: "Number of keys in data.", Value: countKeys("data")},
				ageColumn,
			},
			PatchSchema: &corev1.Secret{},
			Strategy:    typed[corev1.Secret]{validate: validateSecret, prepare: defaultSecret},
			FieldLabels: func(u *unstructured.Unstructured) fields.Set {
				t, _, _ := unstructured.NestedString(u.Object, "type")
				return fields.Set{"type": t}
			},
		},
		{
			Version: "v1", Plural: "events", Singular: "event", Kind: "Event",
			ShortNames: []string{"ev"}, Namespaced: true, Columns: eventColumns(coreEventOf),
			PatchSchema: &corev1.Event{},
			Strategy:    typed[corev1.Event]{validate: validateEvent},
			FieldLabels: eventFields,
		},
		serviceResource(),
		{
			Group: EventsGroup, Version: "v1", Plural: "events", Singular: "event", Kind: "Event",
			ShortNames: []string{"ev"}, Namespaced: true, Columns: eventColumns(eventsV1AsCore),
			PatchSchema:   &eventsv1.Event{},
			Strategy:      eventsV1Strategy{typed[eventsv1.Event]{validate: validateEventsV1}},
			FieldLabels:   eventsV1Fields,
			StoragePrefix: StoragePrefix("", "events"),
			StoredAs:      eventsConversion,
		},
		{
			Group: CoordinationGroup, Version: "v1", Plural: "leases", Singular: "lease", Kind: "Lease",
			Namespaced: true, PatchSchema: &coordinationv1.Lease{},
			Columns: []Column{
				{Name: "Holder", Type: "string", JSONPath: ".spec.holderIdentity", Description: "The holder of the lease."},
				ageColumn,
			},
			Strategy: typed[coordinationv1.Lease]{validate: validateLease},
		},
		{
			Group: APIExtensionsGroup, Version: "v1", Plural: "customresourcedefinitions",
			Singular: "customresourcedefinition", Kind: "CustomResourceDefinition",
			ShortNames: []string{"crd", "crds"}, Categories: []string{"api-extensions"}, Lifecycle: crdLifecycle,
			Columns: []Column{createdAtColumn},
			Status:  true, Generation: true, PatchSchema: &apiextensionsv1.CustomResourceDefinition{},
			Strategy: typed[apiextensionsv1.CustomResourceDefinition]{validate: validateCRD, prepare: prepareCRD},
		},
	}
	rs = append(rs, rbacResources()...)
	rs = append(rs, reviewResources()...)
	rs = append(rs, admissionPolicyResources()...)
	rs = append(rs, webhookResources()...)
	for _, r := range rs {
		if r.StoragePrefix == "" {
			r.StoragePrefix = StoragePrefix(r.Group, r.Plural)
		}
	}
	return rs
}

func prepareCRD(obj, old *apiextensionsv1.CustomResourceDefinition) {
	crd.SetDefaults(obj)
	if old == nil {
		crd.PrepareDefinitionForCreate(obj)
		return
	}
	// On update the server itself keeps status (a subresource) and
	// maintains generation; a new storage version joins
	// status.storedVersions, as in Kubernetes.
	crd.RecordStorageVersion(obj)
}

func validateCRD(obj, old *apiextensionsv1.CustomResourceDefinition) field.ErrorList {
	if old == nil {
		return crd.ValidateDefinition(context.Background(), obj)
	}
	return crd.ValidateDefinitionUpdate(context.Background(), obj, old)
}

// typed is the strategy of a built-in resource with Go type T: objects are
// decoded into T, so unknown fields are dropped and malformed values
// rejected exactly as Kubernetes does for compiled-in types.
type typed[T any] struct {
	validate func(obj, old *T) field.ErrorList
	// prepare, if set, defaults and resets server-owned fields.
	prepare func(obj, old *T)
	nameFn  metavalidation.ValidateNameFunc
}

type validatingConverter interface {
	FromUnstructuredWithValidation(u map[string]any, obj any, returnUnknownFields bool) error
}

// decode converts obj to T, without its metadata.managedFields: the field
// manager (package fieldmanager) keeps them and nothing typed reads them, and
// converting each entry's fieldsV1 and time costs more than the rest of a
// small object.
func (s typed[T]) decode(obj map[string]any) (*T, []string, error) {
	var v T
	var unknown []string
	err := any(runtime.DefaultUnstructuredConverter).(validatingConverter).FromUnstructuredWithValidation(WithoutManagedFields(obj), &v, true)
	if err != nil {
		if !runtime.IsStrictDecodingError(err) {
			return nil, nil, err
		}
		for _, e := range err.(interface{ Errors() []error }).Errors() {
			unknown = append(unknown, strings.Trim(strings.TrimPrefix(e.Error(), "unknown field "), `"`))
		}
	}
	return &v, unknown, nil
}

func (s typed[T]) Stored(map[string]any) error { return nil }

// SetsNoDefaults: Normalize only round-trips obj through T (see Canonical).
func (s typed[T]) SetsNoDefaults() bool { return s.prepare == nil }

func (s typed[T]) Normalize(obj, old map[string]any) ([]string, error) {
	v, unknown, err := s.decode(obj)
	if err != nil {
		return nil, err
	}
	if s.prepare != nil {
		var o *T
		if old != nil {
			if o, _, err = s.decode(old); err != nil {
				return nil, err
			}
		}
		s.prepare(v, o)
	}
	out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(v)
	if err != nil {
		return nil, err
	}
	if mf, ok := managedFieldsIn(obj); ok {
		if md, ok := out["metadata"].(map[string]any); ok {
			md["managedFields"] = mf // as the field manager wrote them
		}
	}
	// Keep the identity fields the typed round trip may not carry.
	for k := range obj {
		delete(obj, k)
	}
	for k, val := range out {
		obj[k] = val
	}
	// Typed objects serialize a null creationTimestamp; Kubernetes omits it.
	if md, ok := obj["metadata"].(map[string]any); ok && md["creationTimestamp"] == nil {
		delete(md, "creationTimestamp")
	}
	return unknown, nil
}

func (s typed[T]) Validate(obj, old map[string]any) field.ErrorList {
	nameFn := s.nameFn
	if nameFn == nil {
		nameFn = metavalidation.NameIsDNSSubdomain
	}
	u := validationMeta{&unstructured.Unstructured{Object: obj}}
	var errs field.ErrorList
	if old == nil {
		errs = metavalidation.ValidateObjectMetaAccessor(u, u.GetNamespace() != "", nameFn, field.NewPath("metadata"))
	} else {
		errs = metavalidation.ValidateObjectMetaAccessorUpdate(u, validationMeta{&unstructured.Unstructured{Object: old}}, field.NewPath("metadata"))
	}
	if s.validate == nil {
		return errs
	}
	v, _, err := s.decode(obj)
	if err != nil {
		return append(errs, field.Invalid(field.NewPath(""), nil, err.Error()))
	}
	var o *T
	if old != nil {
		if o, _, err = s.decode(old); err != nil {
			return append(errs, field.InternalError(field.NewPath(""), err))
		}
	}
	return append(errs, s.validate(v, o)...)
}

func validateDataKeys[V string | []byte](data map[string]V, path *field.Path, seen map[string]bool) (field.ErrorList, int) {
	var errs field.ErrorList
	size := 0
	for k, v := range data {
		for _, msg := range validation.IsConfigMapKey(k) {
			errs = append(errs, field.Invalid(path.Key(k), k, msg))
		}
		if seen[k] {
			errs = append(errs, field.Invalid(path.Key(k), k, "duplicate of key present in another data field"))
		}
		seen[k] = true
		size += len(v)
	}
	return errs, size
}

// validateNamespace checks spec.finalizers as Kubernetes does: each is a
// qualified name, and one without a domain must be a standard finalizer.
func validateNamespace(ns, _ *corev1.Namespace) field.ErrorList {
	var errs field.ErrorList
	for i, f := range ns.Spec.Finalizers {
		p := field.NewPath("spec", "finalizers").Index(i)
		for _, msg := range validation.IsQualifiedName(string(f)) {
			errs = append(errs, field.Invalid(p, f, msg))
		}
		switch string(f) {
		case string(corev1.FinalizerKubernetes), "orphan", "foregroundDeletion":
		default:
			if !strings.Contains(string(f), "/") {
				errs = append(errs, field.Invalid(p, f, "name is neither a standard finalizer name nor is it fully qualified"))
			}
		}
	}
	return errs
}

// immutableWhenSet is Kubernetes' refusal of a change to an immutable
// ConfigMap's or Secret's contents.
const immutableWhenSet = "field is immutable when `immutable` is set"

// contents is one field of an immutable object's contents: its path, and
// its new and old values.
type contents struct {
	path     string
	now, was any
}

// immutableUpdate refuses what Kubernetes refuses of an update of a
// ConfigMap or Secret marked immutable: unmarking it, and changing any of
// its contents (compared as Kubernetes compares them: a nil map is not an
// empty one).
func immutableUpdate(now, was *bool, fields ...contents) field.ErrorList {
	if was == nil || !*was {
		return nil
	}
	var errs field.ErrorList
	if now == nil || !*now {
		errs = append(errs, field.Forbidden(field.NewPath("immutable"), immutableWhenSet))
	}
	for _, f := range fields {
		if !reflect.DeepEqual(f.now, f.was) {
			errs = append(errs, field.Forbidden(field.NewPath(f.path), immutableWhenSet))
		}
	}
	return errs
}

func validateConfigMap(cm, old *corev1.ConfigMap) field.ErrorList {
	var errs field.ErrorList
	if old != nil {
		errs = immutableUpdate(cm.Immutable, old.Immutable, contents{"data", cm.Data, old.Data}, contents{"binaryData", cm.BinaryData, old.BinaryData})
	}
	seen := map[string]bool{}
	keyErrs, n1 := validateDataKeys(cm.Data, field.NewPath("data"), seen)
	errs = append(errs, keyErrs...)
	errs2, n2 := validateDataKeys(cm.BinaryData, field.NewPath("binaryData"), seen)
	errs = append(errs, errs2...)
	if n1+n2 > maxDataBytes {
		errs = append(errs, field.TooLong(field.NewPath(""), "", maxDataBytes))
	}
	return errs
}

func validateSecret(s, old *corev1.Secret) field.ErrorList {
	var errs field.ErrorList
	if old != nil {
		if old.Type != s.Type && !(old.Type == "" || s.Type == "") {
			errs = append(errs, field.Invalid(field.NewPath("type"), s.Type, "field is immutable"))
		}
		errs = append(errs, immutableUpdate(s.Immutable, old.Immutable, contents{"data", s.Data, old.Data})...)
	}
	seen := map[string]bool{}
	keyErrs, n1 := validateDataKeys(s.Data, field.NewPath("data"), seen)
	errs = append(errs, keyErrs...)
	errs2, n2 := validateDataKeys(s.StringData, field.NewPath("stringData"), map[string]bool{})
	errs = append(errs, errs2...)
	if n1+n2 > maxDataBytes {
		errs = append(errs, field.TooLong(field.NewPath("data"), "", maxDataBytes))
	}
	return append(errs, validateSecretType(s)...)
}

// validateSecretType checks what Kubernetes requires of a Secret of each
// well-known type, in its words: the data keys the type needs (of
// well-formed JSON for Docker configurations), a service account token's
// service account annotation.
func validateSecretType(s *corev1.Secret) field.ErrorList {
	data := field.NewPath("data")
	has := func(key string) bool { _, ok := s.Data[key]; return ok }
	var errs field.ErrorList
	switch s.Type {
	case corev1.SecretTypeServiceAccountToken:
		if s.Annotations[corev1.ServiceAccountNameKey] == "" {
			errs = append(errs, field.Required(field.NewPath("metadata", "annotations").Key(corev1.ServiceAccountNameKey), ""))
		}
	case corev1.SecretTypeDockercfg, corev1.SecretTypeDockerConfigJson:
		key := corev1.DockerConfigKey
		if s.Type == corev1.SecretTypeDockerConfigJson {
			key = corev1.DockerConfigJsonKey
		}
		if !has(key) {
			errs = append(errs, field.Required(data.Key(key), ""))
		} else if err := json.Unmarshal(s.Data[key], &map[string]any{}); err != nil {
			errs = append(errs, field.Invalid(data.Key(key), "<secret contents redacted>", err.Error()))
		}
	case corev1.SecretTypeBasicAuth:
		if !has(corev1.BasicAuthUsernameKey) && !has(corev1.BasicAuthPasswordKey) {
			errs = append(errs, field.Required(data.Key(corev1.BasicAuthUsernameKey), ""), field.Required(data.Key(corev1.BasicAuthPasswordKey), ""))
		}
	case corev1.SecretTypeSSHAuth:
		if len(s.Data[corev1.SSHAuthPrivateKey]) == 0 {
			errs = append(errs, field.Required(data.Key(corev1.SSHAuthPrivateKey), ""))
		}
	case corev1.SecretTypeTLS:
		for _, key := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
			if !has(key) {
				errs = append(errs, field.Required(data.Key(key), ""))
			}
		}
	}
	return errs
}

func validateLease(l, _ *coordinationv1.Lease) field.ErrorList {
	var errs field.ErrorList
	if d := l.Spec.LeaseDurationSeconds; d != nil && *d <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "leaseDurationSeconds"), *d, "must be greater than 0"))
	}
	if t := l.Spec.LeaseTransitions; t != nil && *t < 0 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "leaseTransitions"), *t, "must be greater than or equal to 0"))
	}
	return errs
}

// Zero is the zero value of T as an object: what Kubernetes' field manager
// compares a created object with (struct fields such as spec are there,
// empty).
func (s typed[T]) Zero() map[string]any {
	var v T
	out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&v)
	if err != nil {
		return map[string]any{}
	}
	return out
}

// WithoutManagedFields returns obj's content without
// metadata.managedFields: obj itself when it has none, otherwise a shallow
// copy (obj and its metadata map are not modified, so that obj may be
// shared).
func WithoutManagedFields(obj map[string]any) map[string]any {
	md, ok := obj["metadata"].(map[string]any)
	if !ok {
		return obj
	}
	if _, ok := md["managedFields"]; !ok {
		return obj
	}
	view := make(map[string]any, len(obj))
	for k, v := range obj {
		view[k] = v
	}
	mdv := make(map[string]any, len(md))
	for k, v := range md {
		if k != "managedFields" {
			mdv[k] = v
		}
	}
	view["metadata"] = mdv
	return view
}

func managedFieldsIn(obj map[string]any) (any, bool) {
	md, _ := obj["metadata"].(map[string]any)
	mf, ok := md["managedFields"]
	return mf, ok
}

// validationMeta is an object's metadata for apimachinery's ObjectMeta
// validation, which reads of the managedFields entries only the operation,
// fieldsType, manager and subresource: those are read from the entries
// directly, without converting each one's fieldsV1 and time. Entries that
// are not all strings where strings belong are converted as usual (and
// fail as usual).
type validationMeta struct{ *unstructured.Unstructured }

func (m validationMeta) GetManagedFields() []metav1.ManagedFieldsEntry {
	mf, ok := managedFieldsIn(m.Object)
	if !ok {
		return nil
	}
	items, ok := mf.([]any)
	if !ok {
		return m.Unstructured.GetManagedFields()
	}
	out := make([]metav1.ManagedFieldsEntry, len(items))
	for i, it := range items {
		e, ok := it.(map[string]any)
		if !ok {
			return m.Unstructured.GetManagedFields()
		}
		var fs [4]string
		for j, k := range []string{"manager", "operation", "fieldsType", "subresource"} {
			v, present := e[k]
			if s, isString := v.(string); isString {
				fs[j] = s
			} else if present && v != nil {
				return m.Unstructured.GetManagedFields()
			}
		}
		out[i] = metav1.ManagedFieldsEntry{Manager: fs[0], Operation: metav1.ManagedFieldsOperationType(fs[1]), FieldsType: fs[2], Subresource: fs[3]}
	}
	return out
}
