package kube

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/deprecation"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/apis/autoscaling"
	autoscalingvalidation "k8s.io/kubernetes/pkg/apis/autoscaling/validation"
	"k8s.io/kubernetes/pkg/printers"
	printersinternal "k8s.io/kubernetes/pkg/printers/internalversion"
	printerstorage "k8s.io/kubernetes/pkg/printers/storage"

	"github.com/objwatch/objwatch/server/registry"
)

// tables renders internal objects and lists as kubectl's tables, with the
// columns kube-apiserver prints.
var tables = printerstorage.TableConvertor{TableGenerator: printers.NewTableGenerator().With(printersinternal.AddHandlers)}

// Resources returns a registry resource for every served version of every
// kind in kinds. Each call returns new values.
func Resources() []*registry.Resource {
	var out []*registry.Resource
	for i := range kinds {
		k := &kinds[i]
		var conv registry.Converter
		if len(k.versions) > 1 {
			conv = converter{group: k.group, kind: k.kind, storage: k.versions[0]}
		}
		for _, v := range k.versions {
			out = append(out, k.resource(v, conv))
		}
	}
	return out
}

func (k *kind) resource(version string, conv registry.Converter) *registry.Resource {
	gvk := schema.GroupVersionKind{Group: k.group, Version: version, Kind: k.kind}
	s := &strategy{gvk: gvk, resource: k.plural, create: k.strategy, update: k.strategy, status: k.status, subresources: k.subresources}
	r := &registry.Resource{
		Group: k.group, Version: version, Plural: k.plural, Singular: k.singular, Kind: k.kind,
		ShortNames: k.short, Namespaced: !k.cluster, Status: k.status != nil, CacheOnDemand: true,
		StoragePrefix: registry.StoragePrefix(k.group, k.plural),
		Strategy:      s,
		Versions:      conv,
		ValidFieldLabel: func(label string) error {
			_, _, err := legacyscheme.Scheme.ConvertFieldLabel(gvk, label, "")
			return err
		},
		ConvertToTable: func(obj runtime.Object) (*metav1.Table, error) { return table(gvk, obj) },
	}
	if k.all {
		r.Categories = []string{"all"}
	}
	for sub := range k.subresources {
		r.UpdateSubresources = append(r.UpdateSubresources, sub)
	}
	if k.group == "" && k.plural == "pods" {
		r.Reviews = podActions()
	}
	if k.attrs != nil {
		attrs := k.attrs
		r.FieldLabels = func(u *unstructured.Unstructured) fields.Set {
			in, _, err := toInternal(gvk, u.Object)
			if err != nil {
				return nil
			}
			_, f, err := attrs(in)
			if err != nil {
				return nil
			}
			return f
		}
	}
	if ext, err := legacyscheme.Scheme.New(gvk); err == nil {
		r.PatchSchema = ext
		r.DeprecationWarning = deprecationWarning(gvk, ext)
	}
	if k.scale != nil {
		r.Scale = &registry.ScalePaths{SpecReplicas: ".spec.replicas", StatusReplicas: ".status.replicas", Selector: k.scale.selector, Validate: validateScale}
	}
	return r
}

// table renders an object or an *unstructured.UnstructuredList of gvk with
// Kubernetes' printers for its internal type.
func table(gvk schema.GroupVersionKind, obj runtime.Object) (*metav1.Table, error) {
	var in runtime.Object
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		i, _, err := toInternal(gvk, o.Object)
		if err != nil {
			return nil, err
		}
		in = i
	case *unstructured.UnstructuredList:
		list, err := legacyscheme.Scheme.New(internalVersion(gvk).WithKind(gvk.Kind + "List"))
		if err != nil {
			return nil, err
		}
		items := make([]runtime.Object, len(o.Items))
		for i := range o.Items {
			if items[i], _, err = toInternal(gvk, o.Items[i].Object); err != nil {
				return nil, err
			}
		}
		if err := meta.SetList(list, items); err != nil {
			return nil, err
		}
		in = list
	default:
		return nil, fmt.Errorf("kube: no table for %T", obj)
	}
	return tables.ConvertToTable(context.Background(), in, nil)
}

// deprecationWarning is the warning kube-apiserver v1.37 sends with every
// request to gvk when its type says it is deprecated (core/v1 Endpoints),
// or "".
func deprecationWarning(gvk schema.GroupVersionKind, ext runtime.Object) string {
	if !deprecation.IsDeprecated(ext, 1, 37) {
		return ""
	}
	ext = ext.DeepCopyObject()
	ext.GetObjectKind().SetGroupVersionKind(gvk)
	return deprecation.WarningMessage(ext)
}

// validateScale validates a Scale's replicas with Kubernetes' rules.
func validateScale(replicas int32) field.ErrorList {
	return autoscalingvalidation.ValidateScale(&autoscaling.Scale{Spec: autoscaling.ScaleSpec{Replicas: replicas}})
}

// scaleRule says how a kind's Scale reads its selector.
type scaleRule struct {
	selector func(obj map[string]any) (string, error)
}

// labelSelectorScale: spec.selector is a LabelSelector (deployments,
// replica sets, stateful sets).
var labelSelectorScale = &scaleRule{selector: func(obj map[string]any) (string, error) {
	m, found, err := unstructured.NestedMap(obj, "spec", "selector")
	if err != nil || !found {
		return "", err
	}
	var ls metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &ls); err != nil {
		return "", err
	}
	sel, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil {
		return "", err
	}
	return sel.String(), nil
}}

// mapSelectorScale: spec.selector is a map of labels (replication
// controllers).
var mapSelectorScale = &scaleRule{selector: func(obj map[string]any) (string, error) {
	m, _, err := unstructured.NestedStringMap(obj, "spec", "selector")
	if err != nil {
		return "", err
	}
	return labels.SelectorFromSet(m).String(), nil
}}

// converter converts the objects of a kind served in several versions
// (HorizontalPodAutoscaler) through its internal type, with Kubernetes'
// conversions.
type converter struct {
	group, kind, storage string
}

func (c converter) StorageVersion() string { return c.storage }
func (c converter) Remote() bool           { return false }

func (c converter) Convert(_ context.Context, objs []*unstructured.Unstructured, version string) error {
	out := make([]map[string]any, len(objs))
	to := schema.GroupVersionKind{Group: c.group, Version: version, Kind: c.kind}
	for i, o := range objs {
		gv, err := schema.ParseGroupVersion(o.GetAPIVersion())
		if err != nil {
			return err
		}
		if gv.Version == version {
			continue
		}
		in, _, err := toInternal(gv.WithKind(c.kind), o.Object)
		if err != nil {
			return err
		}
		m := map[string]any{}
		if err := fromInternal(to, in, m); err != nil {
			return err
		}
		out[i] = m
	}
	for i, o := range objs {
		if out[i] != nil {
			replace(o.Object, out[i])
		}
	}
	return nil
}
