package fieldmanager

import (
	"fmt"
	"strings"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/objwatch/objwatch/server/registry"
)

// ApplyScale is server-side apply through the scale subresource, as
// kube-apiserver v1.37.2 does it: the object's
// managedFields are mapped to the Scale's (managedfields.ScaleHandler),
// patch is applied to scale (the Scale of live, with those managedFields)
// by a field manager of kind autoscaling/v1 Scale built as
// apiextensions-apiserver builds it (the resource's type converter, the
// CRD's converter, subresource "scale"), and the result's managedFields
// are mapped back. It returns the applied Scale and live's new
// managedFields.
//
// Kubernetes' CRD converter converts a typed Scale but refuses an
// unstructured one, which is what the field manager holds after a merge
// that changed the Scale: so, as in kube-apiserver, an apply that changes
// the replicas (or removes the manager's fields) fails with a 500 after
// the conflict check, an apply that changes nothing records the manager,
// and an apply to a Scale no manager owns the replicas of fails. Clients
// get kube-apiserver's answers; nothing is half-written.
//
// Safe for concurrent use.
func (m *Manager) ApplyScale(res *registry.Resource, live *unstructured.Unstructured, scale *autoscalingv1.Scale, patch *unstructured.Unstructured, manager string, force bool) (*autoscalingv1.Scale, []metav1.ManagedFieldsEntry, error) {
	if res.Scale == nil {
		return nil, nil, fmt.Errorf("fields: %s has no scale subresource", res.GVR())
	}
	tc, err := m.typeConverter(res)
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	gv := res.GVK().GroupVersion()
	scaleGVK := autoscalingv1.SchemeGroupVersion.WithKind("Scale")
	var fm *managedfields.FieldManager
	if res.Custom {
		fm, err = managedfields.NewDefaultCRDFieldManager(tc, scaleConvertor{convertor{versions: res.Versions}, res}, defaulter{}, creater{res}, scaleGVK, gv, "scale", nil)
	} else {
		// A built-in kind's Scale converts with the scheme, as
		// kube-apiserver's does: the CRD converter's refusal above is
		// the custom resources' alone.
		fm, err = managedfields.NewDefaultFieldManager(tc, registry.Scheme, registry.Scheme, registry.Scheme, scaleGVK, scaleGVK.GroupVersion(), "scale", nil)
	}
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	replicas := fieldpath.MakePathOrDie(stringsToAny(strings.Split(strings.TrimPrefix(res.Scale.SpecReplicas, "."), "."))...)
	h := managedfields.NewScaleHandler(live.GetManagedFields(), gv, managedfields.ResourcePathMappings{gv.String(): replicas})
	entries, err := h.ToSubresource()
	if err != nil {
		return nil, nil, err
	}
	scale = scale.DeepCopy()
	scale.ManagedFields = entries
	obj, err := fm.Apply(scale, patch, manager, force)
	if err != nil {
		return nil, nil, err
	}
	out, ok := obj.(*autoscalingv1.Scale)
	if !ok {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("wrong object passed to Scale update: %v", obj))
	}
	parent, err := h.ToParent(out.ManagedFields)
	if err != nil {
		return nil, nil, err
	}
	return out, parent, nil
}

func stringsToAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// scaleConvertor is the CRD converter of a resource with a scale
// subresource as kube-apiserver's is: a typed Scale converts with the
// built-in scheme (to itself here), anything else only to and from the
// resource's versions.
type scaleConvertor struct {
	convertor
	res *registry.Resource
}

func (c scaleConvertor) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	from := in.GetObjectKind().GroupVersionKind()
	to, ok := gv.KindForGroupVersionKinds([]schema.GroupVersionKind{from})
	if !ok {
		return nil, fmt.Errorf("%v is unstructured and is not suitable for converting to %q", from.String(), gv)
	}
	if sc, ok := in.(*autoscalingv1.Scale); ok {
		if to != from {
			return nil, fmt.Errorf("converting (autoscaling.Scale) to (%v): unknown conversion", to)
		}
		return sc.DeepCopy(), nil
	}
	valid := func(g schema.GroupVersion) bool { return g.Group == c.res.GVK().Group }
	if !valid(to.GroupVersion()) {
		return nil, fmt.Errorf("request to convert CR to an invalid group/version: %s", to.GroupVersion().String())
	}
	if !valid(from.GroupVersion()) {
		return nil, fmt.Errorf("request to convert CR from an invalid group/version: %s", from.GroupVersion().String())
	}
	return c.convertor.ConvertToVersion(in, gv)
}
