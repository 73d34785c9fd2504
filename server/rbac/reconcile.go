package rbac

import (
	"maps"
	"reflect"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/auth/rbac/validation"
)

// ReconcileOp is the write reconciling a bootstrap object needs, as
// Kubernetes' reconciliation (k8s.io/component-helpers/auth/rbac/
// reconciliation, which objwatch cannot use: it needs client-go) names it.
type ReconcileOp string

const (
	ReconcileNone     ReconcileOp = "none"     // nothing to write
	ReconcileCreate   ReconcileOp = "create"   // create the object
	ReconcileUpdate   ReconcileOp = "update"   // update the existing object to the returned one
	ReconcileRecreate ReconcileOp = "recreate" // delete the existing binding and create the returned one (roleRef is immutable)
)

// protected: the existing object opted out of reconciliation with the
// annotation rbac.authorization.kubernetes.io/autoupdate: "false".
func protected(m *metav1.ObjectMeta) bool {
	return m.Annotations[rbacv1.AutoUpdateAnnotationKey] == "false"
}

// mergeMaps is Kubernetes' merge of label or annotation maps, later maps
// winning; nil when all are nil.
func mergeMaps(ms ...map[string]string) map[string]string {
	var out map[string]string
	for _, m := range ms {
		if m != nil && out == nil {
			out = map[string]string{}
		}
		maps.Copy(out, m)
	}
	return out
}

// ReconcileClusterRole is Kubernetes' start-up reconciliation of a
// bootstrap ClusterRole wanted against the stored existing (nil: none),
// in its union mode (kube-apiserver never removes permissions): create a
// missing role; else add wanted labels and annotations the existing lacks
// (existing values win), add the wanted rules the existing rules do not
// cover, add missing aggregation selectors, and drop an aggregationRule
// the wanted role does not have. protected (annotation autoupdate "false"
// on existing) means: write nothing, whatever op says.
func ReconcileClusterRole(existing, wanted *rbacv1.ClusterRole) (op ReconcileOp, result *rbacv1.ClusterRole, isProtected bool) {
	if existing == nil {
		return ReconcileCreate, wanted.DeepCopy(), false
	}
	op = ReconcileNone
	result = existing.DeepCopy()
	if mergeMeta(&result.ObjectMeta, &wanted.ObjectMeta) {
		op = ReconcileUpdate
	}
	if _, missing := validation.Covers(existing.Rules, wanted.Rules); len(missing) > 0 {
		result.Rules = append(result.Rules, missing...)
		op = ReconcileUpdate
	}
	switch {
	case wanted.AggregationRule == nil && existing.AggregationRule != nil:
		result.AggregationRule = nil
		op = ReconcileUpdate
	case wanted.AggregationRule != nil:
		var missing []metav1.LabelSelector
		for _, w := range wanted.AggregationRule.ClusterRoleSelectors {
			found := false
			if existing.AggregationRule != nil {
				for _, e := range existing.AggregationRule.ClusterRoleSelectors {
					if equality.Semantic.DeepEqual(e, w) {
						found = true
						break
					}
				}
			}
			if !found {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 {
			if result.AggregationRule == nil {
				result.AggregationRule = &rbacv1.AggregationRule{}
			}
			result.AggregationRule.ClusterRoleSelectors = append(result.AggregationRule.ClusterRoleSelectors, missing...)
			op = ReconcileUpdate
		}
	}
	return op, result, protected(&existing.ObjectMeta)
}

// ReconcileClusterRoleBinding is Kubernetes' start-up reconciliation of a
// bootstrap ClusterRoleBinding (union mode): create a missing binding;
// recreate one whose roleRef differs; else add wanted labels and
// annotations it lacks (existing values win) and the wanted subjects it
// lacks, never removing any. protected as for ReconcileClusterRole.
func ReconcileClusterRoleBinding(existing, wanted *rbacv1.ClusterRoleBinding) (op ReconcileOp, result *rbacv1.ClusterRoleBinding, isProtected bool) {
	if existing == nil {
		return ReconcileCreate, wanted.DeepCopy(), false
	}
	isProtected = protected(&existing.ObjectMeta)
	if existing.RoleRef != wanted.RoleRef {
		return ReconcileRecreate, wanted.DeepCopy(), isProtected
	}
	op = ReconcileNone
	result = existing.DeepCopy()
	if mergeMeta(&result.ObjectMeta, &wanted.ObjectMeta) {
		op = ReconcileUpdate
	}
	var missing []rbacv1.Subject
	for _, w := range wanted.Subjects {
		if !containsSubject(existing.Subjects, w) && !containsSubject(missing, w) {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		result.Subjects = append(result.Subjects, missing...)
		op = ReconcileUpdate
	}
	return op, result, isProtected
}

// mergeMeta adds to result (a copy of the existing object's metadata)
// the wanted labels and annotations it lacks, existing values winning,
// and reports whether that changed anything.
func mergeMeta(result, wanted *metav1.ObjectMeta) bool {
	a := mergeMaps(wanted.Annotations, result.Annotations)
	l := mergeMaps(wanted.Labels, result.Labels)
	changed := !reflect.DeepEqual(a, result.Annotations) || !reflect.DeepEqual(l, result.Labels)
	result.Annotations, result.Labels = a, l
	return changed
}

func containsSubject(l []rbacv1.Subject, s rbacv1.Subject) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
}

// ClusterRoleWrite and ClusterRoleBindingWrite are writes Reconcile asks
// for: Op on Object.
type ClusterRoleWrite struct {
	Op     ReconcileOp
	Object *rbacv1.ClusterRole
}

type ClusterRoleBindingWrite struct {
	Op     ReconcileOp
	Object *rbacv1.ClusterRoleBinding
}

// Reconcile is what the server writes at every start: the bootstrap
// policy (Bootstrap) reconciled against the stored ClusterRoles and
// ClusterRoleBindings, as kube-apiserver's ensureRBACPolicy does (roles
// first, then bindings; each in Bootstrap's order). Only writes are
// returned: objects already up to date or protected (autoupdate "false")
// are left out.
func Reconcile(existingRoles []*rbacv1.ClusterRole, existingBindings []*rbacv1.ClusterRoleBinding) ([]ClusterRoleWrite, []ClusterRoleBindingWrite) {
	roles, bindings := Bootstrap()
	haveRoles := map[string]*rbacv1.ClusterRole{}
	for _, r := range existingRoles {
		haveRoles[r.Name] = r
	}
	haveBindings := map[string]*rbacv1.ClusterRoleBinding{}
	for _, b := range existingBindings {
		haveBindings[b.Name] = b
	}
	var rw []ClusterRoleWrite
	for _, w := range roles {
		if op, r, p := ReconcileClusterRole(haveRoles[w.Name], w); op != ReconcileNone && !p {
			rw = append(rw, ClusterRoleWrite{op, r})
		}
	}
	var bw []ClusterRoleBindingWrite
	for _, w := range bindings {
		if op, b, p := ReconcileClusterRoleBinding(haveBindings[w.Name], w); op != ReconcileNone && !p {
			bw = append(bw, ClusterRoleBindingWrite{op, b})
		}
	}
	return rw, bw
}
