package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/controller"
)

// reconciler makes a ConfigSet's ConfigMaps match its template. It reads
// both kinds from the informers' caches through controller Clients, so
// each reconcile sees the operator's own earlier writes.
type reconciler struct {
	sets *controller.Client[*ConfigSet]
	cms  *controller.Client[*corev1.ConfigMap]
}

func (r *reconciler) Reconcile(ctx context.Context, req controller.Request) (controller.Result, error) {
	set, ok, err := r.sets.Get(ctx, req.Namespace, req.Name)
	if err != nil || !ok {
		return controller.Result{}, err // gone: its ConfigMaps went before the finalizer did
	}
	if set.DeletionTimestamp != nil {
		return controller.Result{}, r.finalize(ctx, set)
	}
	if !hasFinalizer(set) {
		set = set.DeepCopy()
		set.Finalizers = append(set.Finalizers, finalizer)
		if set, err = r.sets.Update(ctx, set, metav1.UpdateOptions{}); err != nil {
			return controller.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
	}
	if set.Spec.Replicas < 0 {
		return controller.Result{}, r.setReady(ctx, set, 0, metav1.ConditionFalse, "InvalidSpec", "spec.replicas is negative")
	}

	var ready int32
	for i := range set.Spec.Replicas {
		if err := r.syncConfigMap(ctx, set, i); err != nil {
			_ = r.setReady(ctx, set, ready, metav1.ConditionFalse, "SyncFailed", err.Error())
			return controller.Result{}, err
		}
		ready++
	}
	owned, err := r.owned(ctx, set)
	if err != nil {
		return controller.Result{}, err
	}
	for _, cm := range owned {
		if i, ok := index(set, cm.Name); ok && i < set.Spec.Replicas {
			continue
		}
		if err := r.cms.Delete(ctx, cm.Namespace, cm.Name, metav1.DeleteOptions{}); err != nil && !errors.Is(err, client.ErrNotFound) {
			return controller.Result{}, fmt.Errorf("delete %s: %w", cm.Name, err)
		}
	}
	return controller.Result{}, r.setReady(ctx, set, ready, metav1.ConditionTrue, "InSync",
		fmt.Sprintf("%d of %d ConfigMaps match the template", ready, set.Spec.Replicas))
}

// syncConfigMap creates or updates the set's i-th ConfigMap.
func (r *reconciler) syncConfigMap(ctx context.Context, set *ConfigSet, i int32) error {
	want := desired(set, i)
	cm, ok, err := r.cms.Get(ctx, set.Namespace, want.Name)
	switch {
	case err != nil:
		return err
	case !ok:
		if _, err := r.cms.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create %s: %w", want.Name, err)
		}
		return nil
	case !metav1.IsControlledBy(cm, set):
		return controller.TerminalError(fmt.Errorf("ConfigMap %s exists and is not controlled by this ConfigSet", want.Name))
	case maps.Equal(cm.Data, want.Data) && maps.Equal(cm.Labels, want.Labels):
		return nil
	}
	cm = cm.DeepCopy()
	cm.Data, cm.Labels = want.Data, want.Labels
	if _, err := r.cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update %s: %w", cm.Name, err)
	}
	return nil
}

// finalize deletes the set's ConfigMaps, waits until the cache has seen
// them go, then removes the finalizer so that the server deletes the set.
// The garbage collector would delete them too; the finalizer shows how
// cleanup that must finish first (external resources) is done.
func (r *reconciler) finalize(ctx context.Context, set *ConfigSet) error {
	if !hasFinalizer(set) {
		return nil
	}
	owned, err := r.owned(ctx, set)
	if err != nil {
		return err
	}
	for _, cm := range owned {
		if err := r.cms.Delete(ctx, cm.Namespace, cm.Name, metav1.DeleteOptions{}); err != nil && !errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("delete %s: %w", cm.Name, err)
		}
	}
	if left, err := r.owned(ctx, set); err != nil || len(left) > 0 {
		return fmt.Errorf("%d ConfigMaps still cached after their deletion: %w", len(left), err)
	}
	set = set.DeepCopy()
	set.Finalizers = slices.DeleteFunc(set.Finalizers, func(f string) bool { return f == finalizer })
	if _, err := r.sets.Update(ctx, set, metav1.UpdateOptions{}); err != nil && !errors.Is(err, client.ErrNotFound) {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	return nil
}

// owned lists the ConfigMaps the set controls (a ConfigMap that only
// carries the label is left alone).
func (r *reconciler) owned(ctx context.Context, set *ConfigSet) ([]*corev1.ConfigMap, error) {
	all, err := r.cms.List(ctx, set.Namespace, labels.SelectorFromSet(labels.Set{setLabel: set.Name}))
	if err != nil {
		return nil, err
	}
	var out []*corev1.ConfigMap
	for _, cm := range all {
		if metav1.IsControlledBy(cm, set) && cm.DeletionTimestamp == nil {
			out = append(out, cm)
		}
	}
	return out, nil
}

// setReady writes the status if it changed.
func (r *reconciler) setReady(ctx context.Context, set *ConfigSet, ready int32, status metav1.ConditionStatus, reason, msg string) error {
	next := set.DeepCopy()
	next.Status.ObservedGeneration = set.Generation
	next.Status.ReadyReplicas = ready
	meta.SetStatusCondition(&next.Status.Conditions, metav1.Condition{
		Type: conditionReady, Status: status, Reason: reason, Message: msg, ObservedGeneration: set.Generation,
	})
	if statusEqual(set.Status, next.Status) {
		return nil
	}
	if _, err := r.sets.UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	return nil
}

// desired is the set's i-th ConfigMap.
func desired(set *ConfigSet, i int32) *corev1.ConfigMap {
	lbls := maps.Clone(set.Spec.Template.Labels)
	if lbls == nil {
		lbls = map[string]string{}
	}
	lbls[setLabel] = set.Name
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: set.Namespace,
			Name:      fmt.Sprintf("%s-%d", set.Name, i),
			Labels:    lbls,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: group + "/" + version, Kind: kind, Name: set.Name, UID: set.UID,
				Controller: ptr(true), BlockOwnerDeletion: ptr(true),
			}},
		},
		Data: maps.Clone(set.Spec.Template.Data),
	}
}

// index parses the i of <set>-<i>.
func index(set *ConfigSet, name string) (int32, bool) {
	s, ok := strings.CutPrefix(name, set.Name+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(s, 10, 32)
	return int32(i), err == nil && i >= 0 && strconv.FormatInt(i, 10) == s
}

func hasFinalizer(set *ConfigSet) bool { return slices.Contains(set.Finalizers, finalizer) }

// statusEqual compares statuses ignoring conditions' transition times
// (SetStatusCondition keeps them when the status does not change).
func statusEqual(a, b ConfigSetStatus) bool {
	if a.ObservedGeneration != b.ObservedGeneration || a.ReadyReplicas != b.ReadyReplicas || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return true
}
