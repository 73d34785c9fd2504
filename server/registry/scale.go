package registry

import (
	"slices"
	"strings"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ScaleGVK is autoscaling/v1 Scale, the kind of every /scale subresource.
var ScaleGVK = autoscalingv1.SchemeGroupVersion.WithKind("Scale")

// ScaleOf returns obj's Scale as Kubernetes' apiextensions-apiserver
// derives it (scaleFromCustomResource), and whether obj has the spec
// replicas field (the Scale says 0 when it has not).
func (p *ScalePaths) ScaleOf(obj *unstructured.Unstructured) (*autoscalingv1.Scale, bool, error) {
	spec, found, err := unstructured.NestedInt64(obj.Object, ScalePath(p.SpecReplicas)...)
	if err != nil {
		return nil, false, err
	}
	status, _, err := unstructured.NestedInt64(obj.Object, ScalePath(p.StatusReplicas)...)
	if err != nil {
		return nil, false, err
	}
	var selector string
	if p.Selector != nil {
		if selector, err = p.Selector(obj.Object); err != nil {
			return nil, false, err
		}
	} else if p.LabelSelector != "" {
		if selector, _, err = unstructured.NestedString(obj.Object, ScalePath(p.LabelSelector)...); err != nil {
			return nil, false, err
		}
	}
	return &autoscalingv1.Scale{
		TypeMeta: metav1.TypeMeta{APIVersion: ScaleGVK.GroupVersion().String(), Kind: ScaleGVK.Kind},
		ObjectMeta: metav1.ObjectMeta{
			Name: obj.GetName(), Namespace: obj.GetNamespace(), UID: obj.GetUID(),
			ResourceVersion: obj.GetResourceVersion(), CreationTimestamp: obj.GetCreationTimestamp(),
		},
		Spec:   autoscalingv1.ScaleSpec{Replicas: int32(spec)},
		Status: autoscalingv1.ScaleStatus{Replicas: int32(status), Selector: selector},
	}, found, nil
}

// ScaleView is obj's Scale as an unstructured object: what admission
// sees of a write through /scale, as kube-apiserver's ScaleREST hands its
// admission the Scale of the object.
func (p *ScalePaths) ScaleView(obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	sc, _, err := p.ScaleOf(obj)
	if err != nil {
		return nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(sc)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// SetReplicas writes the spec.replicas of scale (a Scale as an
// unstructured object, such as an admission plugin's mutation of
// ScaleView's) to obj's spec replicas field, as ScaleREST writes the
// mutated Scale back to the object.
func (p *ScalePaths) SetReplicas(obj, scale *unstructured.Unstructured) error {
	var sc autoscalingv1.Scale
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(scale.Object, &sc); err != nil {
		return err
	}
	return unstructured.SetNestedField(obj.Object, int64(sc.Spec.Replicas), ScalePath(p.SpecReplicas)...)
}

// ScalePath splits a scale path such as ".spec.replicas" into fields.
func ScalePath(p string) []string {
	return strings.Split(strings.TrimPrefix(p, "."), ".")
}

// HasSubresource reports whether r serves subresource ("" is the main
// resource; status and scale as declared; a review subresource).
func (r *Resource) HasSubresource(sub string) bool {
	switch sub {
	case "":
		return true
	case "status":
		return r.Status
	case "scale":
		return r.Scale != nil
	}
	_, ok := r.Reviews[sub]
	return ok || slices.Contains(r.UpdateSubresources, sub)
}

// KindFor is the kind of r's objects through subresource: autoscaling/v1
// Scale for /scale, a review subresource's kind, else r's.
func (r *Resource) KindFor(sub string) schema.GroupVersionKind {
	switch {
	case sub == "scale":
		return ScaleGVK
	case r.Reviews[sub] != nil:
		return r.Reviews[sub].GVK()
	}
	return r.GVK()
}
