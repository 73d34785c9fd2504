package rbac

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/objwatch/objwatch/server/auth"
)

// picker draws choices from fuzz input; past its end every choice is 0.
type picker []byte

func (p *picker) n(max int) int {
	if len(*p) == 0 || max <= 0 {
		return 0
	}
	b := (*p)[0]
	*p = (*p)[1:]
	return int(b) % max
}

func (p *picker) pick(words ...string) string { return words[p.n(len(words))] }

func (p *picker) some(words ...string) []string {
	var out []string
	for range p.n(4) {
		out = append(out, p.pick(words...))
	}
	return out
}

var (
	fzNS       = []string{"a", "b"}
	fzNames    = []string{"r1", "r2", "r3"}
	fzUsers    = []string{"alice", "bob", "system:serviceaccount:a:sa", "system:serviceaccount:b:sa"}
	fzGroups   = []string{"devs", "ops", "system:authenticated"}
	fzVerbs    = []string{"get", "list", "create", "delete", "*"}
	fzAPIGroup = []string{"", "apps", "*"}
	fzRes      = []string{"pods", "pods/status", "*", "*/status", "deployments", "deployments/scale"}
	fzObj      = []string{"x", "y"}
	fzURLs     = []string{"/healthz", "/api/*", "*", "/version"}
)

func (p *picker) rules() []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for range p.n(3) {
		r := rbacv1.PolicyRule{Verbs: p.some(fzVerbs...)}
		if p.n(4) == 0 {
			r.NonResourceURLs = p.some(fzURLs...)
		} else {
			r.APIGroups, r.Resources, r.ResourceNames = p.some(fzAPIGroup...), p.some(fzRes...), p.some(fzObj...)
		}
		out = append(out, r)
	}
	return out
}

func (p *picker) subjects() []rbacv1.Subject {
	var out []rbacv1.Subject
	for range p.n(3) {
		switch p.n(4) {
		case 0:
			out = append(out, userS(p.pick(fzUsers...)))
		case 1:
			out = append(out, groupS(p.pick(fzGroups...)))
		case 2:
			out = append(out, saS(p.pick("", "a", "b"), p.pick("sa", "other")))
		default:
			out = append(out, rbacv1.Subject{Kind: "Robot", Name: p.pick(fzUsers...)})
		}
	}
	return out
}

// rbacModel is the policy as plain maps: what a direct walk reads.
type rbacModel struct {
	roles, roleBindings map[[2]string]any // by namespace and name
	clusterRoles, crbs  map[string]any
}

// allows walks every binding, with no index: a binding that applies to
// the user (in the request's namespace, for RoleBindings), whose role
// exists, allows the request when one of the role's rules does.
func (m *rbacModel) allows(user string, groups []string, a *auth.Attributes) bool {
	applies := func(subjects []rbacv1.Subject, ns string) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			switch s.Kind {
			case "User":
				return s.Name == user
			case "Group":
				return slices.Contains(groups, s.Name)
			case "ServiceAccount":
				if s.Namespace != "" {
					ns = s.Namespace
				}
				return ns != "" && user == "system:serviceaccount:"+ns+":"+s.Name
			}
			return false
		})
	}
	anyRule := func(rules []rbacv1.PolicyRule) bool {
		return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool { return directRuleAllows(a, &r) })
	}
	for _, v := range m.crbs {
		b := v.(*rbacv1.ClusterRoleBinding)
		if cr, ok := m.clusterRoles[b.RoleRef.Name]; ok && applies(b.Subjects, "") && anyRule(cr.(*rbacv1.ClusterRole).Rules) {
			return true
		}
	}
	if a.Namespace == "" {
		return false
	}
	for k, v := range m.roleBindings {
		b := v.(*rbacv1.RoleBinding)
		if k[0] != a.Namespace || !applies(b.Subjects, a.Namespace) {
			continue
		}
		var rules []rbacv1.PolicyRule
		if b.RoleRef.Kind == "ClusterRole" {
			if cr, ok := m.clusterRoles[b.RoleRef.Name]; ok {
				rules = cr.(*rbacv1.ClusterRole).Rules
			}
		} else if r, ok := m.roles[[2]string{a.Namespace, b.RoleRef.Name}]; ok {
			rules = r.(*rbacv1.Role).Rules
		}
		if anyRule(rules) {
			return true
		}
	}
	return false
}

// modelValues lists the objects of one of the model's maps.
func modelValues[T any, K comparable](m map[K]any) []T {
	var out []T
	for _, v := range m {
		out = append(out, v.(T))
	}
	return out
}

// directRuleAllows is Kubernetes' RuleAllows as its RBAC documentation
// states it.
func directRuleAllows(a *auth.Attributes, r *rbacv1.PolicyRule) bool {
	if !slices.Contains(r.Verbs, "*") && !slices.Contains(r.Verbs, a.Verb) {
		return false
	}
	if !a.ResourceRequest {
		return slices.ContainsFunc(r.NonResourceURLs, func(u string) bool {
			return u == "*" || u == a.Path || (strings.HasSuffix(u, "*") && strings.HasPrefix(a.Path, strings.TrimRight(u, "*")))
		})
	}
	combined := a.Resource
	if a.Subresource != "" {
		combined += "/" + a.Subresource
	}
	return (slices.Contains(r.APIGroups, "*") || slices.Contains(r.APIGroups, a.APIGroup)) &&
		slices.ContainsFunc(r.Resources, func(res string) bool {
			return res == "*" || res == combined || (a.Subresource != "" && res == "*/"+a.Subresource)
		}) &&
		(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, a.Name))
}

// FuzzIndexAuthorize applies a sequence of writes (Replace, Set*,
// Delete*) to an Index and to a plain model of the policy, then checks
// Allows and Authorize for a request against a direct walk of every
// binding in the model: the index's shards, subject lists and
// copy-on-write snapshots must not change a decision.
func FuzzIndexAuthorize(f *testing.F) {
	f.Add([]byte{0, 2, 1, 0, 1, 0, 1, 1, 1, 2, 3, 3, 1, 0, 0, 1, 0, 0, 0, 0, 1})
	f.Add([]byte("rolebindings of ClusterRoles in two namespaces, then deletions"))
	f.Add([]byte{6, 6, 6, 3, 1, 2, 1, 0, 1, 1, 4, 4, 2, 2, 1, 0, 0, 1, 2, 3, 0, 7, 7, 1, 1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, choices []byte) {
		p := picker(choices)
		x := NewIndex()
		m := &rbacModel{roles: map[[2]string]any{}, roleBindings: map[[2]string]any{}, clusterRoles: map[string]any{}, crbs: map[string]any{}}
		for range p.n(12) + 1 {
			ns, name := p.pick(fzNS...), p.pick(fzNames...)
			switch p.n(9) {
			case 0:
				r := role(ns, name, p.rules()...)
				x.SetRole(r)
				m.roles[[2]string{ns, name}] = r
			case 1:
				r := clusterRole(name, p.rules()...)
				x.SetClusterRole(r)
				m.clusterRoles[name] = r
			case 2:
				b := rb(ns, name, p.pick("Role", "ClusterRole"), p.pick(fzNames...), p.subjects()...)
				x.SetRoleBinding(b)
				m.roleBindings[[2]string{ns, name}] = b
			case 3:
				b := crb(name, p.pick(fzNames...), p.subjects()...)
				x.SetClusterRoleBinding(b)
				m.crbs[name] = b
			case 4:
				x.DeleteRole(ns, name)
				delete(m.roles, [2]string{ns, name})
			case 5:
				x.DeleteClusterRole(name)
				delete(m.clusterRoles, name)
			case 6:
				x.DeleteRoleBinding(ns, name)
				delete(m.roleBindings, [2]string{ns, name})
			case 7:
				x.DeleteClusterRoleBinding(name)
				delete(m.crbs, name)
			default: // a relist: the index from scratch, as the model has it
				x.Replace(modelValues[*rbacv1.Role](m.roles), modelValues[*rbacv1.ClusterRole](m.clusterRoles),
					modelValues[*rbacv1.RoleBinding](m.roleBindings), modelValues[*rbacv1.ClusterRoleBinding](m.crbs))
			}
		}
		for range 4 {
			user, groups := p.pick(fzUsers...), p.some(fzGroups...)
			var a auth.Attributes
			if p.n(4) == 0 {
				a = path(p.pick("get", "post"), p.pick("/healthz", "/healthz/etcd", "/api/v1", "/version", "/api"))
			} else {
				a = res(p.pick(fzVerbs[:4]...), p.pick("", "apps"), p.pick("pods", "deployments"), p.pick("", "status", "scale"), p.pick("", "a", "b"), p.pick("", "x", "y"))
			}
			want := m.allows(user, groups, &a)
			if got := x.Allows(user, groups, &a); got != want {
				t.Fatalf("Allows(%s %v, %+v) = %v, the direct walk %v\nmodel %+v", user, groups, a, got, want, m)
			}
			if got, reason := x.Authorize(user, groups, a); got != want {
				t.Fatalf("Authorize(%s %v, %+v) = %v (%s), the direct walk %v", user, groups, a, got, reason, want)
			}
		}
	})
}
