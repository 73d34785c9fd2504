package registry

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metavalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	unversionedvalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// RBACGroup is the API group of roles and bindings.
const RBACGroup = rbacv1.GroupName

// The RBAC resources and service accounts, validated and defaulted as
// Kubernetes' rbac and core registries do (k8s.io/kubernetes
// pkg/apis/rbac/validation, pkg/apis/rbac/v1/defaults.go).

// rbacName is Kubernetes' name rule for roles and bindings: a path segment.
func rbacName(name string, _ bool) []string { return content.IsPathSegmentName(name) }

// createdAtColumn is the one column Kubernetes' default table has besides
// the name.
var createdAtColumn = Column{Name: "Created At", Type: "date",
	Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"], Value: func(obj map[string]any) any {
		ts, _, _ := unstructured.NestedString(obj, "metadata", "creationTimestamp")
		return ts
	}}

func rbacResources() []*Resource {
	roleRef := Column{Name: "Role", Type: "string", Description: "RoleRef references a Role or ClusterRole.", Value: func(obj map[string]any) any {
		kind, _, _ := unstructured.NestedString(obj, "roleRef", "kind")
		name, _, _ := unstructured.NestedString(obj, "roleRef", "name")
		return kind + "/" + name
	}}
	subjects := func(kind string) func(map[string]any) any {
		return func(obj map[string]any) any {
			list, _ := obj["subjects"].([]any)
			var out []string
			for _, s := range list {
				m, _ := s.(map[string]any)
				if m["kind"] != kind {
					continue
				}
				name, _ := m["name"].(string)
				if kind == rbacv1.ServiceAccountKind {
					ns, _ := m["namespace"].(string)
					name = ns + "/" + name
				}
				out = append(out, name)
			}
			return strings.Join(out, ", ")
		}
	}
	bindingColumns := func(what string) []Column {
		return []Column{roleRef, ageColumn,
			{Name: "Users", Type: "string", Priority: 1, Description: "Users in the " + what, Value: subjects(rbacv1.UserKind)},
			{Name: "Groups", Type: "string", Priority: 1, Description: "Groups in the " + what, Value: subjects(rbacv1.GroupKind)},
			{Name: "ServiceAccounts", Type: "string", Priority: 1, Description: "ServiceAccounts in the " + what, Value: subjects(rbacv1.ServiceAccountKind)},
		}
	}
	return []*Resource{
		{
			Group: RBACGroup, Version: "v1", Plural: "roles", Singular: "role", Kind: "Role", Namespaced: true,
			Columns: []Column{createdAtColumn}, PatchSchema: &rbacv1.Role{},
			Strategy: typed[rbacv1.Role]{nameFn: rbacName, validate: func(r, _ *rbacv1.Role) field.ErrorList {
				return validateRules(r.Rules, true)
			}},
		},
		{
			Group: RBACGroup, Version: "v1", Plural: "clusterroles", Singular: "clusterrole", Kind: "ClusterRole",
			Columns: []Column{createdAtColumn}, PatchSchema: &rbacv1.ClusterRole{},
			Strategy: typed[rbacv1.ClusterRole]{nameFn: rbacName, validate: validateClusterRole},
		},
		{
			Group: RBACGroup, Version: "v1", Plural: "rolebindings", Singular: "rolebinding", Kind: "RoleBinding", Namespaced: true,
			Columns: bindingColumns("roleBinding"), PatchSchema: &rbacv1.RoleBinding{},
			Strategy: typed[rbacv1.RoleBinding]{nameFn: rbacName, prepare: defaultRoleBinding, validate: func(b, old *rbacv1.RoleBinding) field.ErrorList {
				var oldRef *rbacv1.RoleRef
				if old != nil {
					oldRef = &old.RoleRef
				}
				return validateBinding(b.RoleRef, oldRef, b.Subjects, true)
			}},
		},
		{
			Group: RBACGroup, Version: "v1", Plural: "clusterrolebindings", Singular: "clusterrolebinding", Kind: "ClusterRoleBinding",
			Columns: bindingColumns("clusterRoleBinding"), PatchSchema: &rbacv1.ClusterRoleBinding{},
			Strategy: typed[rbacv1.ClusterRoleBinding]{nameFn: rbacName, prepare: defaultClusterRoleBinding, validate: func(b, old *rbacv1.ClusterRoleBinding) field.ErrorList {
				var oldRef *rbacv1.RoleRef
				if old != nil {
					oldRef = &old.RoleRef
				}
				return validateBinding(b.RoleRef, oldRef, b.Subjects, false)
			}},
		},
		{
			Version: "v1", Plural: "serviceaccounts", Singular: "serviceaccount", Kind: "ServiceAccount",
			ShortNames: []string{"sa"}, Namespaced: true, Columns: []Column{ageColumn},
			PatchSchema: &corev1.ServiceAccount{},
			Strategy:    typed[corev1.ServiceAccount]{},
			Reviews:     map[string]*Resource{"token": tokenRequest},
		},
	}
}

// IsServiceAccountResource reports whether res is core/v1 serviceaccounts.
func IsServiceAccountResource(res *Resource) bool {
	return res.Group == "" && res.Plural == "serviceaccounts"
}

func defaultSubjects(ss []rbacv1.Subject) {
	for i := range ss {
		if ss[i].APIGroup == "" && (ss[i].Kind == rbacv1.UserKind || ss[i].Kind == rbacv1.GroupKind) {
			ss[i].APIGroup = RBACGroup
		}
	}
}

func defaultRoleBinding(b, _ *rbacv1.RoleBinding) {
	if b.RoleRef.APIGroup == "" {
		b.RoleRef.APIGroup = RBACGroup
	}
	defaultSubjects(b.Subjects)
}

func defaultClusterRoleBinding(b, _ *rbacv1.ClusterRoleBinding) {
	if b.RoleRef.APIGroup == "" {
		b.RoleRef.APIGroup = RBACGroup
	}
	defaultSubjects(b.Subjects)
}

func validateRules(rules []rbacv1.PolicyRule, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	for i, rule := range rules {
		p := field.NewPath("rules").Index(i)
		if len(rule.Verbs) == 0 {
			errs = append(errs, field.Required(p.Child("verbs"), "verbs must contain at least one value"))
		}
		if len(rule.NonResourceURLs) > 0 {
			if namespaced {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
			}
			if len(rule.APIGroups) > 0 || len(rule.Resources) > 0 || len(rule.ResourceNames) > 0 {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
			}
			continue
		}
		if len(rule.APIGroups) == 0 {
			errs = append(errs, field.Required(p.Child("apiGroups"), "resource rules must supply at least one api group"))
		}
		if len(rule.Resources) == 0 {
			errs = append(errs, field.Required(p.Child("resources"), "resource rules must supply at least one resource"))
		}
	}
	return errs
}

func validateClusterRole(r, _ *rbacv1.ClusterRole) field.ErrorList {
	errs := validateRules(r.Rules, false)
	if r.AggregationRule != nil {
		p := field.NewPath("aggregationRule", "clusterRoleSelectors")
		if len(r.AggregationRule.ClusterRoleSelectors) == 0 {
			errs = append(errs, field.Required(p, "at least one clusterRoleSelector required if aggregationRule is non-nil"))
		}
		for i, sel := range r.AggregationRule.ClusterRoleSelectors {
			errs = append(errs, unversionedvalidation.ValidateLabelSelector(&sel, unversionedvalidation.LabelSelectorValidationOptions{}, p.Index(i))...)
			if _, err := metav1.LabelSelectorAsSelector(&sel); err != nil {
				errs = append(errs, field.Invalid(p.Index(i), sel, "invalid label selector."))
			}
		}
	}
	return errs
}

func validateBinding(ref rbacv1.RoleRef, old *rbacv1.RoleRef, subjects []rbacv1.Subject, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("roleRef")
	if ref.APIGroup != RBACGroup {
		errs = append(errs, field.NotSupported(p.Child("apiGroup"), ref.APIGroup, []string{RBACGroup}))
	}
	kinds := []string{"ClusterRole"}
	if namespaced {
		kinds = []string{"Role", "ClusterRole"}
	}
	if !slices.Contains(kinds, ref.Kind) {
		errs = append(errs, field.NotSupported(p.Child("kind"), ref.Kind, kinds))
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	} else {
		for _, msg := range rbacName(ref.Name, false) {
			errs = append(errs, field.Invalid(p.Child("name"), ref.Name, msg))
		}
	}
	for i, s := range subjects {
		sp := field.NewPath("subjects").Index(i)
		if s.Name == "" {
			errs = append(errs, field.Required(sp.Child("name"), ""))
		}
		switch s.Kind {
		case rbacv1.ServiceAccountKind:
			if s.Name != "" {
				for _, msg := range metavalidation.NameIsDNSSubdomain(s.Name, false) {
					errs = append(errs, field.Invalid(sp.Child("name"), s.Name, msg))
				}
			}
			if s.APIGroup != "" {
				errs = append(errs, field.NotSupported(sp.Child("apiGroup"), s.APIGroup, []string{""}))
			}
			if !namespaced && s.Namespace == "" {
				errs = append(errs, field.Required(sp.Child("namespace"), ""))
			}
		case rbacv1.UserKind, rbacv1.GroupKind:
			if s.APIGroup != RBACGroup {
				errs = append(errs, field.NotSupported(sp.Child("apiGroup"), s.APIGroup, []string{RBACGroup}))
			}
		default:
			errs = append(errs, field.NotSupported(sp.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
		}
	}
	if old != nil {
		errs = append(errs, metavalidation.ValidateImmutableField(ref, *old, p)...)
	}
	return errs
}
