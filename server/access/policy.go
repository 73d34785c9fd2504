package access

import (
	"context"
	"errors"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/rbac"
	"github.com/objwatch/objwatch/server/registry"
)

// resource returns the served RBAC resource plural.
func (a *Access) resource(plural string) *registry.Resource {
	res, ok := a.cfg.Registry.Get(schema.GroupVersionResource{Group: registry.RBACGroup, Version: "v1", Resource: plural})
	if !ok {
		panic("access: " + plural + " not served")
	}
	return res
}

func toUnstructured(obj any) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func fromUnstructured[T any](u *unstructured.Unstructured) (*T, error) {
	var v T
	return &v, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v)
}

// Bootstrap writes Kubernetes' default ClusterRoles and ClusterRoleBindings
// that are missing or lack rules or subjects (kube-apiserver's start-up
// reconciliation: it adds, never removes; an object annotated
// rbac.authorization.kubernetes.io/autoupdate: "false" is left alone).
// Several servers may do it at once.
func (a *Access) Bootstrap(ctx context.Context) error {
	rolesRes, bindingsRes := a.resource("clusterroles"), a.resource("clusterrolebindings")
	roleObjs, _, err := a.objects.ListAll(ctx, &objects.Request{Verb: "list", Resource: rolesRes}, nil)
	if err != nil {
		return err
	}
	bindingObjs, _, err := a.objects.ListAll(ctx, &objects.Request{Verb: "list", Resource: bindingsRes}, nil)
	if err != nil {
		return err
	}
	var roles []*rbacv1.ClusterRole
	for _, u := range roleObjs {
		r, err := fromUnstructured[rbacv1.ClusterRole](u)
		if err != nil {
			return err
		}
		roles = append(roles, r)
	}
	var bindings []*rbacv1.ClusterRoleBinding
	for _, u := range bindingObjs {
		b, err := fromUnstructured[rbacv1.ClusterRoleBinding](u)
		if err != nil {
			return err
		}
		bindings = append(bindings, b)
	}
	roleWrites, bindingWrites := rbac.Reconcile(roles, bindings)
	for _, w := range roleWrites {
		w.Object.TypeMeta = metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"}
		if err := a.write(ctx, rolesRes, string(w.Op), w.Object.Name, w.Object); err != nil {
			return err
		}
	}
	for _, w := range bindingWrites {
		w.Object.TypeMeta = metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"}
		if err := a.write(ctx, bindingsRes, string(w.Op), w.Object.Name, w.Object); err != nil {
			return err
		}
	}
	return nil
}

// write stores one reconciled object: create, update (over whatever is
// stored now) or recreate (delete, then create).
func (a *Access) write(ctx context.Context, res *registry.Resource, op, name string, obj any) error {
	u, err := toUnstructured(obj)
	if err != nil {
		return err
	}
	u.SetResourceVersion("")
	req := &objects.Request{Verb: "create", Resource: res}
	switch rbac.ReconcileOp(op) {
	case rbac.ReconcileUpdate:
		req = &objects.Request{Verb: "update", Resource: res, Name: name}
		_, err = a.objects.Update(ctx, req, objects.WriteOptions{FieldManager: "objwatch-rbac-bootstrap"}, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
			return u.DeepCopy(), nil
		})
		return ignore(err, apierrors.IsNotFound)
	case rbac.ReconcileRecreate:
		del := &objects.Request{Verb: "delete", Resource: res, Name: name}
		if _, err := a.objects.Delete(ctx, del, &metav1.DeleteOptions{}); ignore(err, apierrors.IsNotFound) != nil {
			return err
		}
	}
	u.SetUID("")
	_, err = a.objects.Create(ctx, req, u, objects.WriteOptions{FieldManager: "objwatch-rbac-bootstrap"})
	return ignore(err, apierrors.IsAlreadyExists)
}

func ignore(err error, is func(error) bool) error {
	if err != nil && is(err) {
		return nil
	}
	return err
}

// aggregate keeps aggregated ClusterRoles' rules the union of the rules of
// the ClusterRoles their selectors match, as Kubernetes' aggregation
// controller does: it writes them into the role's rules whenever they
// differ. It runs until ctx ends, woken by every change of the index.
func (a *Access) aggregate(ctx context.Context) {
	res := a.resource("clusterroles")
	for {
		a.mu.Lock()
		changed := a.changed
		a.mu.Unlock()
		for name, rules := range a.index.AggregationUpdates() {
			req := &objects.Request{Verb: "update", Resource: res, Name: name}
			_, err := a.objects.Update(ctx, req, objects.WriteOptions{FieldManager: "clusterrole-aggregation-controller"}, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
				r, err := fromUnstructured[rbacv1.ClusterRole](cur)
				if err != nil {
					return nil, err
				}
				if r.AggregationRule == nil {
					return nil, errNotAggregated
				}
				r.Rules = rules
				out, err := toUnstructured(r)
				if err == nil {
					out.SetResourceVersion("")
				}
				return out, err
			})
			if err != nil && !apierrors.IsNotFound(err) && !errors.Is(err, errNotAggregated) && ctx.Err() == nil {
				a.cfg.Log.Warn("access: aggregate cluster role", "name", name, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed.Done():
		}
		// Let a burst of changes (a relist) settle first.
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

var errNotAggregated = errors.New("no longer aggregated")

// Settle waits, up to timeout, until the index's aggregated ClusterRoles
// hold their aggregated rules (after Synced, the aggregation loop's first
// writes): requests are then decided on the final rules.
func (a *Access) Settle(ctx context.Context, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for len(a.index.AggregationUpdates()) > 0 && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// admit refuses RBAC writes that would escalate: a role with rules the
// user does not hold (unless the user may "escalate" it), a binding to a
// role whose rules the user does not hold (unless the user may "bind"
// it), as Kubernetes' RBAC registry does.
func (a *Access) admit(ctx context.Context, req *objects.Request, obj, _ *unstructured.Unstructured) (func(), error) {
	res := req.Resource
	if res.Group != registry.RBACGroup || (req.Verb != "create" && req.Verb != "update" && req.Verb != "patch") || a.unrestricted(req.User) {
		return nil, nil
	}
	u := req.User
	ns := obj.GetNamespace()
	switch res.Plural {
	case "roles", "clusterroles":
		if ok, _ := a.index.Authorize(u.Name, u.Groups, auth.Attributes{ResourceRequest: true, Verb: "escalate", APIGroup: registry.RBACGroup,
			Resource: res.Plural, Namespace: ns, Name: obj.GetName()}); ok {
			return nil, nil
		}
		var rules []rbacv1.PolicyRule
		if res.Plural == "roles" {
			r, err := fromUnstructured[rbacv1.Role](obj)
			if err != nil {
				return nil, err
			}
			rules = r.Rules
		} else {
			r, err := fromUnstructured[rbacv1.ClusterRole](obj)
			if err != nil {
				return nil, err
			}
			rules = r.Rules
		}
		if err := a.index.ConfirmNoEscalation(u.Name, u.Groups, ns, res.Plural, rules); err != nil {
			return nil, apierrors.NewForbidden(schema.GroupResource{Group: res.Group, Resource: res.Plural}, obj.GetName(), err)
		}
	case "rolebindings", "clusterrolebindings":
		ref, err := roleRefOf(obj)
		if err != nil {
			return nil, err
		}
		plural := "clusterroles"
		if ref.Kind == "Role" {
			plural = "roles"
		}
		if ok, _ := a.index.Authorize(u.Name, u.Groups, auth.Attributes{ResourceRequest: true, Verb: "bind", APIGroup: registry.RBACGroup,
			Resource: plural, Namespace: ns, Name: ref.Name}); ok {
			return nil, nil
		}
		rules, err := a.index.RoleRefRules(ref, ns)
		if err == nil {
			err = a.index.ConfirmNoEscalation(u.Name, u.Groups, ns, res.Plural, rules)
		}
		if err != nil {
			return nil, apierrors.NewForbidden(schema.GroupResource{Group: res.Group, Resource: res.Plural}, obj.GetName(), err)
		}
	}
	return nil, nil
}

func roleRefOf(obj *unstructured.Unstructured) (rbacv1.RoleRef, error) {
	var ref rbacv1.RoleRef
	m, _, _ := unstructured.NestedMap(obj.Object, "roleRef")
	return ref, runtime.DefaultUnstructuredConverter.FromUnstructured(m, &ref)
}
