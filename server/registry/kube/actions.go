package kube

import (
	"context"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	api "k8s.io/kubernetes/pkg/apis/core"
	corevalidation "k8s.io/kubernetes/pkg/apis/core/validation"

	"github.com/objwatch/objwatch/server/registry"
)

// A pod's binding and eviction subresources, as kube-apiserver serves them
// for a scheduler and for kubectl drain: binding assigns the pod to a node
// once; eviction deletes it unless a PodDisruptionBudget forbids it. With
// no disruption controller here, a budget's status is whatever clients
// wrote to it, and an eviction it allows does not decrement it.

var (
	podGVK = corev1.SchemeGroupVersion.WithKind("Pod")
	pdbGVR = policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets")
)

// podActions are the action subresources of pods.
func podActions() map[string]*registry.Resource {
	return map[string]*registry.Resource{
		"binding": {Version: "v1", Plural: "bindings", Singular: "binding", Kind: "Binding", Namespaced: true,
			Review: true, Action: bind},
		"eviction": {Group: "policy", Version: "v1", Plural: "evictions", Singular: "eviction", Kind: "Eviction", Namespaced: true,
			Review: true, Action: evict},
	}
}

// bind sets the pod's spec.nodeName to the Binding's target, once.
func bind(ctx context.Context, t registry.ActionTarget, body map[string]any) error {
	var b corev1.Binding
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(body, &b); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if b.Name != t.Name() {
		return apierrors.NewBadRequest("name in URL does not match name in Binding object")
	}
	var in api.Binding
	if err := legacyscheme.Scheme.Convert(&b, &in, nil); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if errs := corevalidation.ValidatePodBinding(&in); len(errs) > 0 {
		// kube-apiserver answers a plain error: 500 with no reason.
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError,
			Message: errs.ToAggregate().Error()}}
	}
	conflict := func(format string, args ...any) error {
		return apierrors.NewConflict(schema.GroupResource{Resource: "pods/binding"}, b.Name, fmt.Errorf(format, args...))
	}
	return t.Update(ctx, func(obj map[string]any) error {
		p, _, err := toInternal(podGVK, obj)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		pod := p.(*api.Pod)
		switch {
		case b.UID != "" && b.UID != pod.UID:
			return conflict("Precondition failed: UID in precondition: %v, UID in object meta: %v", b.UID, pod.UID)
		case pod.DeletionTimestamp != nil:
			return conflict("pod %s is being deleted, cannot be assigned to a host", pod.Name)
		case pod.Spec.NodeName != "":
			return conflict("pod %v is already assigned to node %q", pod.Name, pod.Spec.NodeName)
		case len(pod.Spec.SchedulingGates) != 0:
			return conflict("pod %v has non-empty .spec.schedulingGates", pod.Name)
		}
		pod.Spec.NodeName = b.Target.Name
		pod.Status.NominatedNodeName = ""
		if len(b.Annotations) > 0 && pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		for k, v := range b.Annotations {
			pod.Annotations[k] = v
		}
		podutil.DropInitContainerAnnotations(pod.Annotations)
		podutil.UpdatePodCondition(&pod.Status, &api.PodCondition{Type: api.PodScheduled, Status: api.ConditionTrue})
		return fromInternal(podGVK, pod, obj)
	})
}

// evict deletes the pod, unless it is running and the one disruption
// budget that selects it allows no disruption.
func evict(ctx context.Context, t registry.ActionTarget, body map[string]any) error {
	var e policyv1.Eviction
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(body, &e); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if e.Name != t.Name() {
		return apierrors.NewBadRequest("name in URL does not match name in Eviction object")
	}
	obj, err := t.Get(ctx)
	if err != nil {
		return err
	}
	p, _, err := toInternal(podGVK, obj)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	pod := p.(*api.Pod)
	if err := mayEvict(ctx, t, pod); err != nil {
		return err
	}
	return t.Delete(ctx, e.DeleteOptions)
}

// mayEvict applies kube-apiserver's disruption budget rules to pod.
func mayEvict(ctx context.Context, t registry.ActionTarget, pod *api.Pod) error {
	switch pod.Status.Phase {
	case api.PodPending, api.PodSucceeded, api.PodFailed:
		return nil // not running: no budget counts it
	}
	if pod.DeletionTimestamp != nil {
		return nil
	}
	items, err := t.List(ctx, pdbGVR)
	if err != nil {
		return err
	}
	var pdbs []policyv1.PodDisruptionBudget
	for _, it := range items {
		var pdb policyv1.PodDisruptionBudget
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(it, &pdb); err != nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err == nil && sel.Matches(labels.Set(pod.Labels)) {
			pdbs = append(pdbs, pdb)
		}
	}
	switch {
	case len(pdbs) == 0:
		return nil
	case len(pdbs) > 1:
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError,
			Message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}}
	}
	pdb := &pdbs[0]
	if !podutil.IsPodReady(pod) {
		if p := pdb.Spec.UnhealthyPodEvictionPolicy; p != nil && *p == policyv1.AlwaysAllow {
			return nil
		}
		if pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy && pdb.Status.DesiredHealthy > 0 {
			return nil
		}
	}
	if pdb.Status.ObservedGeneration < pdb.Generation {
		return budgetRefusal(10, "The disruption budget %s is still being processed by the server.", pdb.Name)
	}
	if pdb.Status.DisruptionsAllowed <= 0 {
		return budgetRefusal(0, "The disruption budget %s needs %d healthy pods and has %d currently", pdb.Name, pdb.Status.DesiredHealthy, pdb.Status.CurrentHealthy)
	}
	return nil
}

// budgetRefusal is the 429 an eviction a disruption budget forbids gets.
func budgetRefusal(retryAfter int, format string, args ...any) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", retryAfter)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
		Type: policyv1.DisruptionBudgetCause, Message: fmt.Sprintf(format, args...),
	})
	return err
}
