// Package fieldmanager keeps metadata.managedFields, server-side apply's record of
// which manager set which field, with Kubernetes' own machinery:
// apimachinery's managedfields package (the field manager kube-apiserver
// wraps around every create, update and patch) over
// sigs.k8s.io/structured-merge-diff. Nothing of the merge semantics is
// written here; this package only builds the field managers and their
// schemas, and hands the object service (package objects) what it needs.
//
// # Schemas
//
// Built-in resources are typed from the OpenAPI models the server publishes
// for them (Config.BuiltinModels: package openapi's, Kubernetes' generated
// definitions with their list-type, list-map-keys and map-type markers, so
// a Pod's containers merge by name, a container's ports by containerPort
// and protocol, and a Deployment's selector is atomic, as in
// kube-apiserver). The type converter is built on the first write of a
// built-in object. Custom resources are typed from their CRD's
// structural schema (x-kubernetes-list-type, -list-map-keys, -map-type,
// preserve-unknown-fields), with the OpenAPI document
// apiextensions-apiserver's builder makes of every served version of the
// CRD merged, as kube-apiserver does, so that entries written through
// another version still convert.
//
// # Conversion
//
// Versions of one resource are converted with the resource's converter
// (registry.Resource.Versions: a CRD's None strategy sets apiVersion, a
// conversion webhook is called), as kube-apiserver's field manager uses the
// CRD's converter; without one, by setting apiVersion. A managedFields
// entry of another built-in version whose schema differs fails to convert;
// Update then keeps the live entries (as kube-apiserver's UpdateNoErrors
// does on any failure). Entries keep the apiVersion they were written in.
//
// # Shortcuts
//
// Three common cases skip the full merge, each answering exactly what the
// field manager would (Config.Verify checks every answer against it): an
// ordinary update by the manager that alone owns what it changes
// (fastupdate.go), an apply of the same kind (fastapply.go), and a create
// whose object has a shape seen before, whose field manager's answer is
// remembered (fastcreate.go).
//
// # Concurrency
//
// A Manager is safe for concurrent use. It builds each resource version's
// field managers once, on first use, and again when the resource changes
// (a CRD update registers new resources); the built-in type converter is
// built once, on first use of any built-in resource.
package fieldmanager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/registry"
)

// Config configures a Manager.
type Config struct {
	// Registry is the served resources: a custom resource's schema merges
	// every served version of its CRD. Required.
	Registry *registry.Registry
	// BuiltinModels returns the OpenAPI models of the built-in resources'
	// types, keyed by model name and tagged with
	// x-kubernetes-group-version-kind. Required.
	BuiltinModels func() (map[string]*spec.Schema, error)
	// Verify checks every shortcut (fastUpdate, fastApply, fastCreate) against the field
	// manager's answer and panics where they differ: for tests.
	Verify bool
}

// Manager keeps the managed fields of every served resource. Create it
// with New.
type Manager struct {
	cfg     Config
	builtin func() (managedfields.TypeConverter, error)

	mu     sync.Mutex
	byGVR  map[schema.GroupVersionResource]*managers // under mu
	custom map[string]*customConverter               // by group/plural, under mu

	creates shapes // see fastcreate.go
}

// managers are one resource version's field managers.
type managers struct {
	res          *registry.Resource // what they were built for
	main, status *managedfields.FieldManager
	err          error
}

// customConverter is the type converter of a CRD's served versions.
type customConverter struct {
	resources []*registry.Resource // what it was built from
	tc        managedfields.TypeConverter
	err       error
}

// New returns a Manager. It builds nothing yet.
func New(cfg Config) (*Manager, error) {
	if cfg.Registry == nil || cfg.BuiltinModels == nil {
		return nil, errors.New("fields: no registry or built-in models")
	}
	m := &Manager{cfg: cfg, byGVR: map[schema.GroupVersionResource]*managers{}, custom: map[string]*customConverter{}}
	m.builtin = sync.OnceValues(func() (managedfields.TypeConverter, error) {
		models, err := cfg.BuiltinModels()
		if err != nil {
			return nil, fmt.Errorf("fields: built-in models: %w", err)
		}
		tc, err := managedfields.NewTypeConverter(models, false)
		if err != nil {
			return nil, fmt.Errorf("fields: built-in type converter: %w", err)
		}
		return tc, nil
	})
	return m, nil
}

// Update returns obj with its managedFields recording manager's change of
// live to obj through subresource ("" or "status"): an Update entry, merged
// and pruned as kube-apiserver does. live is nil for a create. Managed
// fields the client sent are taken when they decode, live's otherwise (an
// empty list resets them). It never fails: when the fields cannot be
// tracked obj keeps live's managedFields, as kube-apiserver's
// UpdateNoErrors does.
func (m *Manager) Update(res *registry.Resource, subresource string, live, obj *unstructured.Unstructured, manager string) *unstructured.Unstructured {
	fm, err := m.managerFor(res, subresource)
	if err != nil {
		if live != nil {
			obj.SetManagedFields(live.GetManagedFields())
		}
		return obj
	}
	if live != nil && !defaults(res) {
		// An object without defaults is tracked as it is (when it fits
		// the schema, which fastUpdate requires: no key added).
		if m.fast(fm, res, subresource, live, obj, obj, manager) {
			return obj
		}
	}
	// kube-apiserver decodes a built-in object with its defaults, so its
	// managed fields include what defaulting set: track those of the
	// defaulted object (the object service defaults obj itself later).
	tracked := obj
	if !res.Custom && res.Strategy != nil {
		tracked = obj.DeepCopy()
		if _, err := res.Strategy.Normalize(tracked.Object, objectOf(live)); err != nil {
			tracked = obj
		}
		for _, p := range setAfterTracking[res.GVK().GroupKind()] {
			if v, ok, _ := unstructured.NestedFieldCopy(obj.Object, p...); ok {
				_ = unstructured.SetNestedField(tracked.Object, v, p...)
			} else {
				unstructured.RemoveNestedField(tracked.Object, p...)
			}
		}
	}
	var shape shapeKey
	var old map[string]any // live's content for Normalize (nil for a create)
	if live != nil {
		old = live.Object
	}
	if live == nil {
		live = empty(res)
		if subresource == "" {
			var mf []any
			var ok bool
			if mf, shape, ok = m.creates.fastCreate(fm, tracked, manager, time.Now()); ok {
				if m.cfg.Verify {
					verifyFastUpdate(fm, live, tracked, manager, mf)
				}
				obj.Object["metadata"].(map[string]any)["managedFields"] = mf
				return obj
			}
		}
	} else if m.fast(fm, res, subresource, live, tracked, obj, manager) {
		return obj
	}
	out, used, ok := trackPruned(fm, res, live, tracked, old, manager)
	if !ok {
		return obj
	}
	if used == tracked {
		// A shape is remembered only for what the field manager took as
		// it is (its fast answer must be the field manager's for it).
		m.creates.record(shape, out)
	}
	if used != obj {
		obj.SetManagedFields(out.GetManagedFields())
		return obj
	}
	return out
}

// trackPruned runs the field manager's update of live to tracked and
// returns its answer and the object it tracked. A custom resource's object
// is tracked as the client sent it, unpruned (the object service prunes
// it later, in normalize, and the fast paths stay clear of a second
// pass); when the field manager refuses it (a field its schema does not
// declare), a pruned copy is tracked instead, as kube-apiserver tracks
// the decoded and pruned object, and the client's managedFields, which
// the refused attempt took off, are put back first. old is live's content
// for the pruning (nil for a create). Other failures keep live's
// managedFields, as kube-apiserver's UpdateNoErrors does.
func trackPruned(fm *managedfields.FieldManager, res *registry.Resource, live, tracked *unstructured.Unstructured, old map[string]any, manager string) (*unstructured.Unstructured, *unstructured.Unstructured, bool) {
	if !res.Custom || res.Strategy == nil {
		out, ok := fm.UpdateNoErrors(live, tracked, manager).(*unstructured.Unstructured)
		return out, tracked, ok
	}
	md, _ := tracked.Object["metadata"].(map[string]any)
	sent, hadSent := md["managedFields"]
	if out, err := fm.Update(live, tracked, manager); err == nil {
		u, ok := out.(*unstructured.Unstructured)
		return u, tracked, ok
	}
	if hadSent {
		md["managedFields"] = sent
	}
	pruned := tracked.DeepCopy()
	if _, err := res.Strategy.Normalize(pruned.Object, old); err != nil {
		pruned = tracked
	}
	out, ok := fm.UpdateNoErrors(live, pruned, manager).(*unstructured.Unstructured)
	return out, pruned, ok
}

// fast sets obj's managedFields to fastUpdate's answer for tracked (obj,
// or its defaulted copy) and reports whether it had one.
func (m *Manager) fast(fm *managedfields.FieldManager, res *registry.Resource, subresource string, live, tracked, obj *unstructured.Unstructured, manager string) bool {
	mf, ok := fastUpdate(resetOf(res, subresource), subresource, live, tracked, manager, time.Now())
	if !ok {
		return false
	}
	if m.cfg.Verify {
		verifyFastUpdate(fm, live, tracked, manager, mf)
	}
	obj.Object["metadata"].(map[string]any)["managedFields"] = mf
	return true
}

// defaults reports whether res's objects are tracked after defaulting:
// built-in resources whose strategy sets defaults.
func defaults(res *registry.Resource) bool {
	if res.Custom || res.Strategy == nil {
		return false
	}
	c, ok := res.Strategy.(registry.Canonical)
	return !ok || !c.SetsNoDefaults()
}

// resetOf is the top-level field a subresource's writes leave alone (the
// reset fields of build): status for the main resource when status is a
// subresource, spec for /status.
func resetOf(res *registry.Resource, subresource string) string {
	switch {
	case subresource == "status":
		return "spec"
	case res.Status:
		return "status"
	}
	return ""
}

// verifyFastUpdate panics unless the field manager, given the same update,
// records what fastUpdate did (entry times aside: they are stamped with
// the clock).
func verifyFastUpdate(fm *managedfields.FieldManager, live, obj *unstructured.Unstructured, manager string, fast []any) {
	out, ok := fm.UpdateNoErrors(live.DeepCopy(), obj.DeepCopy(), manager).(*unstructured.Unstructured)
	if !ok {
		panic("fields: the field manager returned no unstructured object")
	}
	verifyFast(out, obj, manager, fast)
}

// verifyFast panics unless out, the field manager's answer, has the
// managedFields fast has (entry times aside).
func verifyFast(out, obj *unstructured.Unstructured, manager string, fast []any) {
	want, _ := managedFieldsOf(out)
	strip := func(es []any) []string {
		var s []string
		for _, e := range es {
			c := map[string]any{}
			for k, v := range e.(map[string]any) {
				if k != "time" {
					c[k] = v
				}
			}
			b, _ := json.Marshal(c)
			s = append(s, string(b))
		}
		slices.Sort(s)
		return s
	}
	if a, b := strip(fast), strip(want); !slices.Equal(a, b) {
		panic(fmt.Sprintf("fields: the shortcut's managedFields of %s/%s by %s differ from the field manager's:\nfast %s\nwant %s", obj.GetNamespace(), obj.GetName(), manager, a, b))
	}
}

// verifyFastApply panics unless the field manager, given the same apply,
// returns the object fastApply did, managedFields and all (entry times
// aside).
func verifyFastApply(fm *managedfields.FieldManager, live, patch *unstructured.Unstructured, manager string, force bool, fast *unstructured.Unstructured) {
	full, err := fm.Apply(live.DeepCopy(), patch.DeepCopy(), manager, force)
	if err != nil {
		panic(fmt.Sprintf("fields: fastApply of %s/%s by %s succeeded where the field manager failed: %v", live.GetNamespace(), live.GetName(), manager, err))
	}
	out, ok := full.(*unstructured.Unstructured)
	if !ok {
		panic("fields: the field manager returned no unstructured object")
	}
	fastMF, _ := managedFieldsOf(fast)
	verifyFast(out, live, manager, fastMF)
	a, b, l := fast.DeepCopy(), out.DeepCopy(), live.DeepCopy()
	for _, u := range []*unstructured.Unstructured{a, b, l} {
		unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
	}
	// An apply that changes nothing keeps the entries' times.
	if liveMF, _ := managedFieldsOf(live); jsonEqual(b.Object, l.Object) && !jsonEqual(fastMF, liveMF) {
		panic(fmt.Sprintf("fields: fastApply of %s/%s by %s changed nothing but stamped the time", live.GetNamespace(), live.GetName(), manager))
	}
	if !jsonEqual(a.Object, b.Object) {
		ja, _ := json.Marshal(a.Object)
		jb, _ := json.Marshal(b.Object)
		panic(fmt.Sprintf("fields: fastApply of %s/%s by %s differs from the field manager's:\nfast %s\nwant %s", live.GetNamespace(), live.GetName(), manager, ja, jb))
	}
}

// setAfterTracking are the fields objwatch's defaulting sets or changes
// that kube-apiserver changes only after its field manager ran (in its
// REST storage, or converting a Secret's stringData into data): the
// managed fields are computed with them as the writer sent them.
var setAfterTracking = map[schema.GroupKind][][]string{
	{Kind: "Service"}: {{"spec", "ipFamilies"}, {"spec", "ipFamilyPolicy"}},
	{Kind: "Secret"}:  {{"data"}, {"stringData"}},
}

func objectOf(u *unstructured.Unstructured) map[string]any {
	if u == nil {
		return nil
	}
	return u.Object
}

// Apply merges patch, manager's applied configuration, into live (nil when
// the object does not exist yet) and returns the object to write with its
// managedFields. Errors are Kubernetes': 409 with a cause per conflicting
// field unless force, 400 for a patch of another apiVersion or kind or
// with managedFields, 500 (as kube-apiserver) for a patch that does not
// fit the schema (an undeclared field, duplicate list-map keys).
func (m *Manager) Apply(res *registry.Resource, subresource string, live, patch *unstructured.Unstructured, manager string, force bool) (*unstructured.Unstructured, error) {
	fm, err := m.managerFor(res, subresource)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if live == nil {
		live = empty(res)
	} else if out, ok := fastApply(resetOf(res, subresource), subresource, live, patch, manager, time.Now()); ok {
		if m.cfg.Verify {
			verifyFastApply(fm, live, patch, manager, force, out)
		}
		return out, nil
	}
	out, err := fm.Apply(live, patch, manager, force)
	var status apierrors.APIStatus
	if err != nil && !errors.As(err, &status) {
		// As kube-apiserver answers an error that is no Status.
		return nil, apistatus.New(http.StatusInternalServerError, metav1.StatusReasonUnknown, err.Error())
	}
	if err != nil {
		return nil, err
	}
	u, ok := out.(*unstructured.Unstructured)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("apply returned a %T", out))
	}
	return u, nil
}

// empty is an object of res's kind with nothing else: what a create
// changes, or an apply creates from. For a built-in kind it is, as in
// kube-apiserver, the zero value of its Go type (a Service has an empty
// spec, so that a create does not own spec itself).
func empty(res *registry.Resource) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	if z, ok := res.Strategy.(interface{ Zero() map[string]any }); ok && !res.Custom {
		u.Object = z.Zero()
	}
	u.SetGroupVersionKind(res.GVK())
	return u
}

// managerFor returns res's field manager for subresource, building res's
// managers on first use and when res changed.
func (m *Manager) managerFor(res *registry.Resource, subresource string) (*managedfields.FieldManager, error) {
	m.mu.Lock()
	ms, ok := m.byGVR[res.GVR()]
	m.mu.Unlock()
	if !ok || ms.res != res {
		ms = m.build(res)
		m.mu.Lock()
		m.byGVR[res.GVR()] = ms
		m.mu.Unlock()
	}
	if ms.err != nil {
		return nil, ms.err
	}
	if subresource == "status" {
		return ms.status, nil
	}
	return ms.main, nil
}

// build makes res's field managers: the main resource's ignores status
// when status is a subresource, the status subresource's ignores spec, as
// the reset fields of Kubernetes' strategies say.
func (m *Manager) build(res *registry.Resource) *managers {
	ms := &managers{res: res}
	tc, err := m.typeConverter(res)
	if err != nil {
		ms.err = err
		return ms
	}
	gvk := res.GVK()
	gv := fieldpath.APIVersion(gvk.GroupVersion().String())
	reset := func(paths ...string) map[fieldpath.APIVersion]fieldpath.Filter {
		if len(paths) == 0 {
			return nil
		}
		set := fieldpath.NewSet()
		for _, p := range paths {
			set.Insert(fieldpath.MakePathOrDie(p))
		}
		return fieldpath.NewExcludeFilterSetMap(map[fieldpath.APIVersion]*fieldpath.Set{gv: set})
	}
	var mainReset []string
	if res.Status {
		mainReset = append(mainReset, "status")
	}
	newManager := func(sub string, r map[fieldpath.APIVersion]fieldpath.Filter) (*managedfields.FieldManager, error) {
		// The CRD variant: the hub is the version itself, which the
		// apiVersion-setting convertor needs; both variants are the same
		// chain (last-applied migration, manager caps, stripped metadata).
		return managedfields.NewDefaultCRDFieldManager(tc, convertor{versions: res.Versions}, defaulter{}, creater{res}, gvk, gvk.GroupVersion(), sub, r)
	}
	if ms.main, err = newManager("", reset(mainReset...)); err != nil {
		ms.err = err
		return ms
	}
	if ms.status, err = newManager("status", reset("spec")); err != nil {
		ms.err = err
	}
	return ms
}

// TypeConverter returns the type converter that types res's objects for
// server-side apply (for admission policies' ApplyConfiguration
// mutations). Safe for concurrent use.
func (m *Manager) TypeConverter(res *registry.Resource) (managedfields.TypeConverter, error) {
	return m.typeConverter(res)
}

// typeConverter returns the type converter for res's objects.
func (m *Manager) typeConverter(res *registry.Resource) (managedfields.TypeConverter, error) {
	if !res.Custom {
		return m.builtin()
	}
	var versions []*registry.Resource
	for _, r := range m.cfg.Registry.Resources() {
		if r.Custom && r.Group == res.Group && r.Plural == res.Plural {
			versions = append(versions, r)
		}
	}
	key := res.Group + "/" + res.Plural
	m.mu.Lock()
	cc, ok := m.custom[key]
	m.mu.Unlock()
	if ok && samePointers(cc.resources, versions) {
		return cc.tc, cc.err
	}
	cc = &customConverter{resources: versions}
	cc.tc, cc.err = customTypeConverter(versions)
	m.mu.Lock()
	m.custom[key] = cc
	m.mu.Unlock()
	return cc.tc, cc.err
}

// customTypeConverter types a CRD's objects from the OpenAPI documents of
// its served versions, merged as kube-apiserver merges them for apply; a
// version without a document (none is built) is typed as deduced from
// the objects, everything atomic, as kube-apiserver does without models.
func customTypeConverter(versions []*registry.Resource) (managedfields.TypeConverter, error) {
	var docs []*spec3.OpenAPI
	for _, r := range versions {
		if r.OpenAPIV3 == nil {
			continue
		}
		doc, err := r.OpenAPIV3()
		if err != nil {
			return nil, fmt.Errorf("fields: openapi of %s: %w", r.GVR(), err)
		}
		docs = append(docs, doc)
	}
	if len(docs) == 0 {
		return managedfields.NewDeducedTypeConverter(), nil
	}
	merged := docs[0]
	if len(docs) > 1 {
		var err error
		if merged, err = builder.MergeSpecsV3(docs...); err != nil {
			return nil, fmt.Errorf("fields: merge openapi of %s: %w", versions[0].GVR().GroupResource(), err)
		}
	}
	if merged.Components == nil {
		return managedfields.NewDeducedTypeConverter(), nil
	}
	tc, err := managedfields.NewTypeConverter(merged.Components.Schemas, false)
	if err != nil {
		return nil, fmt.Errorf("fields: type converter of %s: %w", versions[0].GVR().GroupResource(), err)
	}
	return tc, nil
}

func samePointers(a, b []*registry.Resource) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// convertor converts an object between versions of its resource by
// setting its apiVersion (see the package doc), or with the resource's
// converter when it has one (a CRD's conversion webhook, as
// kube-apiserver's field manager converts with the CRD's converter).
type convertor struct{ versions registry.Converter }

func (convertor) Convert(in, out, context any) error {
	return errors.New("fields: conversion between objects is not supported")
}

func (c convertor) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("fields: cannot convert a %T", in)
	}
	from := u.GroupVersionKind()
	to, ok := gv.KindForGroupVersionKinds([]schema.GroupVersionKind{from})
	if !ok {
		return nil, fmt.Errorf("fields: cannot convert %s to %v", from, gv)
	}
	if to == from {
		return u, nil
	}
	out := u.DeepCopy()
	if c.versions != nil && to.GroupKind() == from.GroupKind() {
		if err := c.versions.Convert(context.Background(), []*unstructured.Unstructured{out}, to.Version); err != nil {
			return nil, err
		}
	}
	out.SetGroupVersionKind(to)
	return out, nil
}

func (convertor) ConvertFieldLabel(gvk schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}

// defaulter defaults nothing: the object service applies the resource's
// defaults to what an apply returns, as to every write.
type defaulter struct{}

func (defaulter) Default(runtime.Object) {}

// creater makes empty objects of res's kind (see empty).
type creater struct{ res *registry.Resource }

func (c creater) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
	u := empty(c.res)
	u.SetGroupVersionKind(gvk)
	return u, nil
}
