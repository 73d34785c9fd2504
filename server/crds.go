package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/server/registry/crd"
	"github.com/objwatch/objwatch/storage"
)

func (s *Server) crdResource() *registry.Resource {
	res, _ := s.registry.Get(schema.GroupVersionResource{Group: registry.APIExtensionsGroup, Version: "v1", Resource: "customresourcedefinitions"})
	return res
}

// runCRDs keeps the registry in step with the stored CRDs: it lists them,
// serves each, then follows a watch; on any watch failure it lists again.
// Every server sharing an etcd runs it, so a CRD created through one server
// is served by all. ready is called after the first list.
func (s *Server) runCRDs(ctx context.Context, ready func()) error {
	res := s.crdResource()
	backoff := 100 * time.Millisecond
	for {
		items, rev, err := s.listAll(ctx, res, "", matchAll)
		if err == nil {
			served := map[string]bool{}
			for _, it := range items {
				served[it.GetName()] = true
				s.serveCRD(ctx, it)
			}
			s.dropCRDsExcept(served)
			ready()
			err = s.followCRDs(ctx, res, rev+1)
		}
		if ctx.Err() != nil {
			return nil
		}
		s.cfg.Log.Warn("custom resource definitions: relisting", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (s *Server) followCRDs(ctx context.Context, res *registry.Resource, from int64) error {
	w, err := s.store.Watch(ctx, res.Prefix(""), from)
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.Events() {
		switch ev.Type {
		case storage.Error:
			return ev.Err
		case storage.Put:
			obj, err := fromStorage(res, ev.KV)
			if err != nil {
				s.cfg.Log.Error("custom resource definition: decode", "key", ev.KV.Key, "err", err)
				continue
			}
			s.serveCRD(ctx, obj)
		case storage.Delete:
			obj, err := fromStorage(res, ev.KV)
			if err == nil {
				s.registry.SetCustom(obj.GetName(), nil)
			}
		}
	}
	return errors.New("watch ended")
}

func (s *Server) dropCRDsExcept(keep map[string]bool) {
	for _, name := range s.registry.CustomNames() {
		if !keep[name] {
			s.registry.SetCustom(name, nil)
		}
	}
}

// serveCRD registers a CRD's resources and marks it established.
func (s *Server) serveCRD(ctx context.Context, obj *unstructured.Unstructured) {
	var def apiextensionsv1.CustomResourceDefinition
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &def); err != nil {
		s.cfg.Log.Error("custom resource definition: convert", "name", obj.GetName(), "err", err)
		return
	}
	resources, err := customResources(&def)
	if err == nil {
		err = s.registry.SetCustom(def.Name, resources)
	}
	if err != nil {
		s.cfg.Log.Error("custom resource definition: serve", "name", def.Name, "err", err)
		s.setCRDConditions(ctx, obj, &def, err)
		return
	}
	s.setCRDConditions(ctx, obj, &def, nil)
}

// setCRDConditions records NamesAccepted and Established in the CRD's
// status, as Kubernetes' controllers do. Several servers may race to write
// it; the conditional update makes all but one a no-op.
func (s *Server) setCRDConditions(ctx context.Context, obj *unstructured.Unstructured, def *apiextensionsv1.CustomResourceDefinition, serveErr error) {
	want := apiextensionsv1.ConditionTrue
	reason, msg := "InitialNamesAccepted", "no conflicts found"
	if serveErr != nil {
		want, reason, msg = apiextensionsv1.ConditionFalse, "NotServed", serveErr.Error()
	}
	changed := false
	set := func(t apiextensionsv1.CustomResourceDefinitionConditionType, status apiextensionsv1.ConditionStatus, reason, msg string) {
		for i, c := range def.Status.Conditions {
			if c.Type == t {
				if c.Status != status || c.Reason != reason {
					def.Status.Conditions[i] = apiextensionsv1.CustomResourceDefinitionCondition{Type: t, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.Now()}
					changed = true
				}
				return
			}
		}
		def.Status.Conditions = append(def.Status.Conditions, apiextensionsv1.CustomResourceDefinitionCondition{Type: t, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.Now()})
		changed = true
	}
	set(apiextensionsv1.NamesAccepted, want, reason, msg)
	estReason, estMsg := "InitialNamesAccepted", "the initial names have been accepted"
	if serveErr != nil {
		estReason, estMsg = reason, msg
	}
	set(apiextensionsv1.Established, want, estReason, estMsg)
	if serveErr == nil && !equalNames(def.Status.AcceptedNames, def.Spec.Names) {
		def.Status.AcceptedNames = def.Spec.Names
		changed = true
	}
	if !changed {
		return
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(def)
	if err != nil {
		return
	}
	out := &unstructured.Unstructured{Object: u}
	unstructured.RemoveNestedField(out.Object, "metadata", "creationTimestamp")
	out.SetCreationTimestamp(obj.GetCreationTimestamp())
	b, err := toStorage(out)
	if err != nil {
		return
	}
	res := s.crdResource()
	rev, err := parseRV(obj.GetResourceVersion())
	if err != nil {
		return
	}
	if _, err := s.store.Update(ctx, res.Key("", def.Name), b, rev); err != nil && !errors.Is(err, storage.ErrConflict) && !errors.Is(err, storage.ErrNotFound) && ctx.Err() == nil {
		s.cfg.Log.Warn("custom resource definition: set status", "name", def.Name, "err", err)
	}
}

func equalNames(a, b apiextensionsv1.CustomResourceDefinitionNames) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// customResources builds the served resources of a CRD, one per served
// version, all stored under one prefix.
func customResources(def *apiextensionsv1.CustomResourceDefinition) ([]*registry.Resource, error) {
	d, err := crd.New(def)
	if err != nil {
		return nil, err
	}
	names := def.Spec.Names
	var out []*registry.Resource
	for _, v := range def.Spec.Versions {
		if !v.Served {
			continue
		}
		cv := d.Version(v.Name)
		if cv == nil {
			return nil, fmt.Errorf("version %s: not built", v.Name)
		}
		res := &registry.Resource{
			Group: def.Spec.Group, Version: v.Name,
			Plural: names.Plural, Singular: names.Singular, Kind: names.Kind, ListKind: names.ListKind,
			ShortNames: names.ShortNames, Categories: names.Categories,
			Namespaced:    def.Spec.Scope == apiextensionsv1.NamespaceScoped,
			Status:        cv.HasStatus(),
			Generation:    true,
			Custom:        true,
			StoragePrefix: registry.StoragePrefix(def.Spec.Group, names.Plural),
			Strategy:      crStrategy{def: d, version: cv},
		}
		res.FieldLabels = crFieldLabels(cv)
		for _, c := range v.AdditionalPrinterColumns {
			res.Columns = append(res.Columns, registry.Column{
				Name: c.Name, Type: c.Type, Format: c.Format, Description: c.Description,
				JSONPath: c.JSONPath, Priority: c.Priority,
			})
		}
		res.OpenAPIV3 = cv.OpenAPIV3
		out = append(out, res)
	}
	return out, nil
}

func crFieldLabels(v *crd.Version) func(*unstructured.Unstructured) fields.Set {
	return func(u *unstructured.Unstructured) fields.Set {
		set, err := v.Fields(u.Object)
		if err != nil {
			return nil
		}
		return set
	}
}

// crStrategy adapts a CRD version to registry.Strategy.
type crStrategy struct {
	def     *crd.Definition
	version *crd.Version
}

func (c crStrategy) Normalize(obj, old map[string]any) ([]string, error) {
	return c.def.Decode(obj, c.version.Name())
}

func (c crStrategy) Stored(obj map[string]any) error {
	return c.def.DecodeStored(obj, c.version.Name())
}

func (c crStrategy) Validate(obj, old map[string]any) field.ErrorList {
	if old == nil {
		return c.version.Validate(context.Background(), obj)
	}
	return c.version.ValidateUpdate(context.Background(), obj, old)
}

// deleteCustomObjects removes every object of a CRD being deleted.
func (s *Server) deleteCustomObjects(ctx context.Context, obj *unstructured.Unstructured) error {
	group, _, _ := unstructured.NestedString(obj.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(obj.Object, "spec", "names", "plural")
	if group == "" || plural == "" {
		return nil
	}
	if _, err := s.store.DeletePrefix(ctx, registry.StoragePrefix(group, plural)); err != nil {
		return storageError(err, s.gr(s.crdResource()), obj.GetName())
	}
	return nil
}
