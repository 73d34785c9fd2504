// Package versions gives admission plugins the served resources'
// versions as k8s.io/apiserver's admission code expects them: an
// admission.ObjectInterfaces whose EquivalentResourceMapper lists the other
// served versions of a resource (for matchPolicy Equivalent) and whose
// ObjectConvertor converts unstructured objects between them with the
// resource's own converter (a CustomResourceDefinition's None or Webhook
// strategy, package server/conversion), as kube-apiserver's admission
// converts a request's object to the version a webhook or policy names:
// with None, as kube-apiserver's converter, only the apiVersion changes
// (nothing is pruned); with Webhook, a ConversionReview.
//
// # Equivalence
//
// As in kube-apiserver, whose equivalent-resource registry is keyed by
// storage: the served versions of the same group and resource (a CRD's
// versions) that serve the subresource. The kind through /scale is
// autoscaling/v1 Scale in every version, so a Scale is never converted.
//
// # Concurrency
//
// Interfaces and Mapper are immutable and safe for concurrent use; a
// conversion through a conversion webhook is made within the context
// Interfaces was given (the request's).
package versions

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"

	"github.com/objwatch/objwatch/server/registry"
)

// Mapper is the runtime.EquivalentResourceMapper of the served resources.
type Mapper struct{ Registry *registry.Registry }

var _ runtime.EquivalentResourceMapper = Mapper{}

// EquivalentResourcesFor returns the served versions of gvr's resource
// that serve subresource, gvr's own among them; nil when gvr is not
// served.
func (m Mapper) EquivalentResourcesFor(gvr schema.GroupVersionResource, subresource string) []schema.GroupVersionResource {
	res, ok := m.Registry.Get(gvr)
	if !ok {
		return nil
	}
	if res.Versions == nil {
		// One version of the resource is served.
		if !res.HasSubresource(subresource) {
			return nil
		}
		return []schema.GroupVersionResource{gvr}
	}
	var out []schema.GroupVersionResource
	for _, r := range m.Registry.Resources() {
		if r.Group == res.Group && r.Plural == res.Plural && r.HasSubresource(subresource) {
			out = append(out, r.GVR())
		}
	}
	return out
}

// KindFor returns the kind of gvr's objects through subresource; empty
// when gvr is not served.
func (m Mapper) KindFor(gvr schema.GroupVersionResource, subresource string) schema.GroupVersionKind {
	res, ok := m.Registry.Get(gvr)
	if !ok {
		return schema.GroupVersionKind{}
	}
	return res.KindFor(subresource)
}

// Interfaces returns the admission.ObjectInterfaces of the served
// resources for one request: conversions are made within ctx.
func Interfaces(ctx context.Context, reg *registry.Registry) admission.ObjectInterfaces {
	return interfaces{convertor{ctx: ctx, reg: reg}}
}

type interfaces struct{ c convertor }

func (o interfaces) GetObjectCreater() runtime.ObjectCreater     { return scheme{} }
func (o interfaces) GetObjectTyper() runtime.ObjectTyper         { return scheme{} }
func (o interfaces) GetObjectDefaulter() runtime.ObjectDefaulter { return scheme{} }
func (o interfaces) GetObjectConvertor() runtime.ObjectConvertor { return o.c }
func (o interfaces) GetEquivalentResourceMapper() runtime.EquivalentResourceMapper {
	return Mapper{o.c.reg}
}

// scheme creates and types unstructured objects, which is all the object
// service has; it defaults nothing (the object service defaults later).
type scheme struct{}

func (scheme) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

func (scheme) ObjectKinds(obj runtime.Object) ([]schema.GroupVersionKind, bool, error) {
	return []schema.GroupVersionKind{obj.GetObjectKind().GroupVersionKind()}, false, nil
}

func (scheme) Recognizes(schema.GroupVersionKind) bool { return true }

func (scheme) Default(runtime.Object) {}

// convertor converts unstructured objects between the served versions of
// their resource.
type convertor struct {
	// ctx is the admission call's: runtime.ObjectConvertor takes none,
	// and a conversion webhook must be called within it. A convertor
	// lives for that one call (Interfaces).
	ctx context.Context
	reg *registry.Registry
}

// Convert converts in to the kind out has (in's when out has none) and
// puts the result in out; both are unstructured. in is not changed.
func (c convertor) Convert(in, out, _ any) error {
	src, ok1 := in.(*unstructured.Unstructured)
	dst, ok2 := out.(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return fmt.Errorf("admission: cannot convert %T to %T", in, out)
	}
	if src == dst {
		return nil
	}
	to := dst.GroupVersionKind()
	if to.Empty() {
		to = src.GroupVersionKind()
	}
	conv, err := c.convert(src, to)
	if err != nil {
		return err
	}
	dst.Object = conv.Object
	return nil
}

// ConvertToVersion returns a copy of in converted to the kind gv picks
// for it.
func (c convertor) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("admission: cannot convert %T", in)
	}
	to, ok := gv.KindForGroupVersionKinds([]schema.GroupVersionKind{u.GroupVersionKind()})
	if !ok {
		to = u.GroupVersionKind()
	}
	return c.convert(u, to)
}

// convert returns a copy of src in kind to: a copy with the kind set when
// only that differs (or src has none), else converted by the resource's
// converter.
func (c convertor) convert(src *unstructured.Unstructured, to schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	from := src.GroupVersionKind()
	out := src.DeepCopy()
	if from == to || from.Empty() || from.Group != to.Group || from.Kind != to.Kind {
		if !to.Empty() {
			out.SetGroupVersionKind(to)
		}
		return out, nil
	}
	res, ok := c.reg.ForKind(from.Group, from.Version, from.Kind)
	if !ok || res.Versions == nil || res.Version != from.Version {
		return nil, fmt.Errorf("admission: cannot convert %v to %v: not served in both versions", from, to)
	}
	if !res.Versions.Remote() {
		// Strategy None: kube-apiserver's admission converter only sets
		// the apiVersion (pruning is its storage codec's), so fields of
		// one version survive a round trip through another.
		out.SetGroupVersionKind(to)
		return out, nil
	}
	if err := res.Versions.Convert(c.ctx, []*unstructured.Unstructured{out}, to.Version); err != nil {
		return nil, err
	}
	out.SetGroupVersionKind(to)
	return out, nil
}

func (convertor) ConvertFieldLabel(_ schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}
