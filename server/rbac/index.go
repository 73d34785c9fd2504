package rbac

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/objwatch/objwatch/server/auth"
)

// serviceAccountPrefix is the user name prefix of service accounts:
// system:serviceaccount:<namespace>:<name>.
const serviceAccountPrefix = "system:serviceaccount:"

// binding is a RoleBinding (namespace set) or ClusterRoleBinding
// (namespace "") as the index keeps it.
type binding struct {
	namespace, name string
	roleRef         rbacv1.RoleRef
	subjects        []rbacv1.Subject
}

func (b *binding) less(o *binding) bool {
	if b.name != o.name {
		return b.name < o.name
	}
	return b.namespace < o.namespace
}

// snapshot is one immutable state of the index. Readers load it with one
// atomic load and never lock.
type snapshot struct {
	roles        smap[*rbacv1.Role]        // {ns, kindObject, name}
	clusterRoles smap[*rbacv1.ClusterRole] // {"", kindObject, name}
	// Bindings by subject: {"", kindUser|kindGroup, name} for
	// ClusterRoleBindings, {ns, ...} for RoleBindings in ns. Each list is
	// sorted by binding name and holds a binding once.
	clusterBindings smap[[]*binding]
	bindings        smap[[]*binding]
}

// Index is the in-memory RBAC state (Roles, ClusterRoles, RoleBindings,
// ClusterRoleBindings) and decides requests from it.
//
// Concurrency: any number of goroutines may call the read methods
// (Authorize, RulesFor, PolicyRules, RoleRefRules, ConfirmNoEscalation,
// ClusterRoles, AggregationUpdates) at any time, without locks: they see
// one consistent snapshot. Writes (Set*, Delete*, Replace) are serialised
// by a mutex and publish a new snapshot copy-on-write; a write costs
// O(size of one 1/64 shard + bindings of the touched subjects), not O(all).
//
// Objects passed to the index are kept by pointer and must not be
// modified afterwards (pass a copy if the caller keeps changing it).
type Index struct {
	cur atomic.Pointer[snapshot]

	mu sync.Mutex // serialises writers
	// The bindings by object key, to find what an update or delete
	// replaces. Only writers (holding mu) use them.
	roleBindings        map[key]*binding
	clusterRoleBindings map[string]*binding
}

// NewIndex returns an empty index: it allows nothing.
func NewIndex() *Index {
	x := &Index{roleBindings: map[key]*binding{}, clusterRoleBindings: map[string]*binding{}}
	x.cur.Store(&snapshot{})
	return x
}

// write runs f on a copy of the current snapshot and publishes it.
func (x *Index) write(f func(next *snapshot)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	next := *x.cur.Load()
	f(&next)
	x.cur.Store(&next)
}

// SetRole adds or replaces a Role.
func (x *Index) SetRole(r *rbacv1.Role) {
	x.write(func(s *snapshot) {
		t := smapTx[*rbacv1.Role]{m: &s.roles}
		t.set(key{ns: r.Namespace, name: r.Name}, r)
	})
}

// DeleteRole removes a Role.
func (x *Index) DeleteRole(namespace, name string) {
	x.write(func(s *snapshot) {
		t := smapTx[*rbacv1.Role]{m: &s.roles}
		t.del(key{ns: namespace, name: name})
	})
}

// SetClusterRole adds or replaces a ClusterRole. Its stored .rules are
// what it grants, as in Kubernetes: for an aggregated ClusterRole the
// caller writes the aggregated rules back (see AggregationUpdates).
func (x *Index) SetClusterRole(r *rbacv1.ClusterRole) {
	x.write(func(s *snapshot) {
		t := smapTx[*rbacv1.ClusterRole]{m: &s.clusterRoles}
		t.set(key{name: r.Name}, r)
	})
}

// DeleteClusterRole removes a ClusterRole.
func (x *Index) DeleteClusterRole(name string) {
	x.write(func(s *snapshot) {
		t := smapTx[*rbacv1.ClusterRole]{m: &s.clusterRoles}
		t.del(key{name: name})
	})
}

// SetRoleBinding adds or replaces a RoleBinding.
func (x *Index) SetRoleBinding(rb *rbacv1.RoleBinding) {
	b := &binding{namespace: rb.Namespace, name: rb.Name, roleRef: rb.RoleRef, subjects: rb.Subjects}
	x.write(func(s *snapshot) {
		t := smapTx[[]*binding]{m: &s.bindings}
		k := key{ns: rb.Namespace, name: rb.Name}
		if old := x.roleBindings[k]; old != nil {
			unindex(&t, old)
		}
		x.roleBindings[k] = b
		index(&t, b)
	})
}

// DeleteRoleBinding removes a RoleBinding.
func (x *Index) DeleteRoleBinding(namespace, name string) {
	x.write(func(s *snapshot) {
		k := key{ns: namespace, name: name}
		if old := x.roleBindings[k]; old != nil {
			t := smapTx[[]*binding]{m: &s.bindings}
			unindex(&t, old)
			delete(x.roleBindings, k)
		}
	})
}

// SetClusterRoleBinding adds or replaces a ClusterRoleBinding.
func (x *Index) SetClusterRoleBinding(crb *rbacv1.ClusterRoleBinding) {
	b := &binding{name: crb.Name, roleRef: crb.RoleRef, subjects: crb.Subjects}
	x.write(func(s *snapshot) {
		t := smapTx[[]*binding]{m: &s.clusterBindings}
		if old := x.clusterRoleBindings[crb.Name]; old != nil {
			unindex(&t, old)
		}
		x.clusterRoleBindings[crb.Name] = b
		index(&t, b)
	})
}

// DeleteClusterRoleBinding removes a ClusterRoleBinding.
func (x *Index) DeleteClusterRoleBinding(name string) {
	x.write(func(s *snapshot) {
		if old := x.clusterRoleBindings[name]; old != nil {
			t := smapTx[[]*binding]{m: &s.clusterBindings}
			unindex(&t, old)
			delete(x.clusterRoleBindings, name)
		}
	})
}

// Replace sets the whole state at once (after a list or relist),
// dropping everything the index held before.
func (x *Index) Replace(roles []*rbacv1.Role, clusterRoles []*rbacv1.ClusterRole, roleBindings []*rbacv1.RoleBinding, clusterRoleBindings []*rbacv1.ClusterRoleBinding) {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := &snapshot{}
	rt := smapTx[*rbacv1.Role]{m: &s.roles}
	for _, r := range roles {
		rt.set(key{ns: r.Namespace, name: r.Name}, r)
	}
	ct := smapTx[*rbacv1.ClusterRole]{m: &s.clusterRoles}
	for _, r := range clusterRoles {
		ct.set(key{name: r.Name}, r)
	}
	// Collect every subject's list unsorted, then sort each once.
	x.roleBindings = make(map[key]*binding, len(roleBindings))
	x.clusterRoleBindings = make(map[string]*binding, len(clusterRoleBindings))
	lists := map[key][]*binding{}
	for _, rb := range roleBindings {
		k := key{ns: rb.Namespace, name: rb.Name}
		if old := x.roleBindings[k]; old != nil { // a duplicate in the input: the last wins
			removeFrom(lists, old)
		}
		b := &binding{namespace: rb.Namespace, name: rb.Name, roleRef: rb.RoleRef, subjects: rb.Subjects}
		x.roleBindings[k] = b
		for _, sk := range subjectKeys(b) {
			lists[sk] = append(lists[sk], b)
		}
	}
	for _, crb := range clusterRoleBindings {
		if old := x.clusterRoleBindings[crb.Name]; old != nil {
			removeFrom(lists, old)
		}
		b := &binding{name: crb.Name, roleRef: crb.RoleRef, subjects: crb.Subjects}
		x.clusterRoleBindings[crb.Name] = b
		for _, sk := range subjectKeys(b) {
			lists[sk] = append(lists[sk], b)
		}
	}
	bt := smapTx[[]*binding]{m: &s.bindings}
	cbt := smapTx[[]*binding]{m: &s.clusterBindings}
	for k, l := range lists {
		slices.SortFunc(l, func(a, b *binding) int {
			if a.less(b) {
				return -1
			}
			if b.less(a) {
				return 1
			}
			return 0
		})
		if k.ns == "" {
			cbt.set(k, l)
		} else {
			bt.set(k, l)
		}
	}
	x.cur.Store(s)
}

func removeFrom(lists map[key][]*binding, b *binding) {
	for _, sk := range subjectKeys(b) {
		lists[sk] = slices.DeleteFunc(lists[sk], func(o *binding) bool { return o == b })
	}
}

// subjectKeys are the index keys of b's subjects, each once. A
// ServiceAccount subject is the user system:serviceaccount:<ns>:<name>,
// its namespace defaulting to the RoleBinding's (a ClusterRoleBinding's
// ServiceAccount without a namespace matches nobody, as in Kubernetes);
// subjects of other kinds match nobody.
func subjectKeys(b *binding) []key {
	keys := make([]key, 0, len(b.subjects))
	for _, s := range b.subjects {
		var k key
		switch s.Kind {
		case rbacv1.UserKind:
			k = key{ns: b.namespace, kind: kindUser, name: s.Name}
		case rbacv1.GroupKind:
			k = key{ns: b.namespace, kind: kindGroup, name: s.Name}
		case rbacv1.ServiceAccountKind:
			ns := s.Namespace
			if ns == "" {
				ns = b.namespace
			}
			if ns == "" {
				continue
			}
			k = key{ns: b.namespace, kind: kindUser, name: serviceAccountPrefix + ns + ":" + s.Name}
		default:
			continue
		}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// index adds b to the list of each of its subjects (copying the lists).
func index(t *smapTx[[]*binding], b *binding) {
	for _, k := range subjectKeys(b) {
		old, _ := t.m.get(k)
		i := sort.Search(len(old), func(i int) bool { return !old[i].less(b) })
		l := make([]*binding, 0, len(old)+1)
		l = append(append(append(l, old[:i]...), b), old[i:]...)
		t.set(k, l)
	}
}

// unindex removes b from the list of each of its subjects.
func unindex(t *smapTx[[]*binding], b *binding) {
	for _, k := range subjectKeys(b) {
		old, _ := t.m.get(k)
		i := slices.Index(old, b)
		if i < 0 {
			continue
		}
		if len(old) == 1 {
			t.del(k)
			continue
		}
		l := make([]*binding, 0, len(old)-1)
		t.set(k, append(append(l, old[:i]...), old[i+1:]...))
	}
}

// candidates are the bindings in m bound (in namespace ns, "" for
// ClusterRoleBindings) to the user or one of the groups, sorted by name,
// each once.
func candidates(m *smap[[]*binding], ns, userName string, groups []string) []*binding {
	out, _ := m.get(key{ns: ns, kind: kindUser, name: userName})
	for _, g := range groups {
		l, _ := m.get(key{ns: ns, kind: kindGroup, name: g})
		out = merge(out, l)
	}
	return out
}

// merge is the sorted union of two sorted lists; it returns one of them
// when the other is empty (the lists are never modified).
func merge(a, b []*binding) []*binding {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 {
		return b
	}
	out := make([]*binding, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			out = append(out, a[i])
			i++
			j++
		case a[i].less(b[j]):
			out = append(out, a[i])
			i++
		default:
			out = append(out, b[j])
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// roleRefRules are the rules a binding's roleRef names, or Kubernetes'
// error for a missing role (role.rbac.authorization.k8s.io "x" not
// found) or an unknown kind.
//
// notFound (nil: the authorizer's) makes the error for a missing role of
// kind Role or ClusterRole.
func (s *snapshot) roleRefRules(ref rbacv1.RoleRef, bindingNamespace string, notFound func(kind, name string) error) ([]rbacv1.PolicyRule, error) {
	if notFound == nil {
		notFound = authorizerNotFound
	}
	switch ref.Kind {
	case "Role":
		r, ok := s.roles.get(key{ns: bindingNamespace, name: ref.Name})
		if !ok || bindingNamespace == "" {
			return nil, notFound(ref.Kind, ref.Name)
		}
		return r.Rules, nil
	case "ClusterRole":
		r, ok := s.clusterRoles.get(key{name: ref.Name})
		if !ok {
			return nil, notFound(ref.Kind, ref.Name)
		}
		return r.Rules, nil
	default:
		return nil, fmt.Errorf("unsupported role reference kind: %q", ref.Kind)
	}
}

// authorizerNotFound is the error of kube-apiserver's RBAC authorizer
// (its informer listers) for a missing role: role.rbac.authorization.k8s.io
// "x" not found, or clusterrole.rbac.authorization.k8s.io "x" not found.
func authorizerNotFound(kind, name string) error {
	return apierrors.NewNotFound(rbacv1.Resource(strings.ToLower(kind)), name)
}

// RoleRefRules returns the rules that roleRef of a binding in
// bindingNamespace ("" for a ClusterRoleBinding) grants, or the error
// Kubernetes gives when the role is missing. The server needs it to check
// that a user creating a binding holds the rules it grants (Kubernetes'
// BindingAuthorized: "bind" on the role, or ConfirmNoEscalation of these
// rules).
func (x *Index) RoleRefRules(roleRef rbacv1.RoleRef, bindingNamespace string) ([]rbacv1.PolicyRule, error) {
	return x.cur.Load().roleRefRules(roleRef, bindingNamespace, nil)
}

// visit calls f with each rule that applies to the user in namespace, in
// Kubernetes' order (ClusterRoleBindings, then the namespace's
// RoleBindings when namespace is not ""; bindings by name, rules in their
// role's order), with the binding it comes from; f returning false stops.
// It returns the resolution errors met (missing roles) in order.
func (s *snapshot) visit(userName string, groups []string, namespace string, notFound func(kind, name string) error, f func(b *binding, r *rbacv1.PolicyRule) bool) []error {
	var errs []error
	if !s.visitBindings(candidates(&s.clusterBindings, "", userName, groups), "", notFound, &errs, f) || namespace == "" {
		return errs
	}
	s.visitBindings(candidates(&s.bindings, namespace, userName, groups), namespace, notFound, &errs, f)
	return errs
}

// visitBindings calls f with each rule of each binding's role, the
// bindings being in namespace ns ("" for ClusterRoleBindings), adding
// resolution errors to errs; it returns false when f stopped it.
func (s *snapshot) visitBindings(bs []*binding, ns string, notFound func(kind, name string) error, errs *[]error, f func(b *binding, r *rbacv1.PolicyRule) bool) bool {
	for _, b := range bs {
		rules, err := s.roleRefRules(b.roleRef, ns, notFound)
		if err != nil {
			*errs = append(*errs, err)
			continue
		}
		for i := range rules {
			if !f(b, &rules[i]) {
				return false
			}
		}
	}
	return true
}

// Allows is Authorize without the reason: whether some rule allows a, at
// no cost for describing the binding. Callers ask Authorize for the
// reason of a denial.
func (x *Index) Allows(userName string, groups []string, a *auth.Attributes) bool {
	s := x.cur.Load()
	allowed := false
	s.visit(userName, groups, a.Namespace, nil, func(b *binding, r *rbacv1.PolicyRule) bool {
		allowed = RuleAllows(a, r)
		return !allowed
	})
	return allowed
}

// Authorize decides the request a of the user userName in groups as
// Kubernetes' RBAC authorizer does. allowed true: reason says which
// binding allowed it, e.g.
//
//	RBAC: allowed by RoleBinding "read-pods/default" of Role "pod-reader" to User "jane"
//
// allowed false: reason is "" or names the roles that bound bindings
// reference but that do not exist, e.g.
//
//	RBAC: [role.rbac.authorization.k8s.io "a" not found, clusterrole.rbac.authorization.k8s.io "b" not found]
//
// (kube-apiserver's union of authorizers prefixes a denial's reason with
// "rbac: "; ForbiddenMessage and ServerReason do that.)
//
// For list, watch and deletecollection a rule with resourceNames applies
// only when a.Name is set: the caller sets it from a metadata.name=<name>
// field selector, as kube-apiserver does. create has no name, so
// resourceNames never allow it.
func (x *Index) Authorize(userName string, groups []string, a auth.Attributes) (allowed bool, reason string) {
	s := x.cur.Load()
	var by *binding
	errs := s.visit(userName, groups, a.Namespace, nil, func(b *binding, r *rbacv1.PolicyRule) bool {
		if RuleAllows(&a, r) {
			by = b
			return false
		}
		return true
	})
	if by != nil {
		return true, "RBAC: allowed by " + describe(by, userName, groups)
	}
	if len(errs) > 0 {
		return false, "RBAC: " + utilerrors.NewAggregate(errs).Error()
	}
	return false, ""
}

// describe is Kubernetes' description of binding b and its first subject
// that applies to the user.
func describe(b *binding, userName string, groups []string) string {
	var subject string
	for _, s := range b.subjects {
		if appliesToUser(&s, userName, groups, b.namespace) {
			if s.Kind == rbacv1.ServiceAccountKind {
				ns := s.Namespace
				if ns == "" {
					ns = b.namespace
				}
				subject = fmt.Sprintf("%s %q", s.Kind, s.Name+"/"+ns)
			} else {
				subject = fmt.Sprintf("%s %q", s.Kind, s.Name)
			}
			break
		}
	}
	if b.namespace == "" {
		return fmt.Sprintf("ClusterRoleBinding %q of %s %q to %s", b.name, b.roleRef.Kind, b.roleRef.Name, subject)
	}
	return fmt.Sprintf("RoleBinding %q of %s %q to %s", b.name+"/"+b.namespace, b.roleRef.Kind, b.roleRef.Name, subject)
}

// appliesToUser is Kubernetes' appliesToUser: whether subject s of a
// binding in namespace ns ("" for a ClusterRoleBinding) is the user.
func appliesToUser(s *rbacv1.Subject, userName string, groups []string, ns string) bool {
	switch s.Kind {
	case rbacv1.UserKind:
		return s.Name == userName
	case rbacv1.GroupKind:
		return slices.Contains(groups, s.Name)
	case rbacv1.ServiceAccountKind:
		if s.Namespace != "" {
			ns = s.Namespace
		}
		if ns == "" {
			return false
		}
		rest, ok := strings.CutPrefix(userName, serviceAccountPrefix)
		return ok && rest == ns+":"+s.Name
	}
	return false
}

// PolicyRules returns every rule that applies to the user in namespace
// ("" for cluster-wide only: ClusterRoleBindings), in the order of
// Authorize's search, and the resolution errors (missing roles) as one
// aggregate error; the rules are valid even when the error is not nil.
func (x *Index) PolicyRules(userName string, groups []string, namespace string) ([]rbacv1.PolicyRule, error) {
	return x.policyRules(userName, groups, namespace, nil)
}

func (x *Index) policyRules(userName string, groups []string, namespace string, notFound func(kind, name string) error) ([]rbacv1.PolicyRule, error) {
	var rules []rbacv1.PolicyRule
	errs := x.cur.Load().visit(userName, groups, namespace, notFound, func(_ *binding, r *rbacv1.PolicyRule) bool {
		rules = append(rules, *r)
		return true
	})
	return rules, utilerrors.NewAggregate(errs)
}

// RulesFor is what a SelfSubjectRulesReview of the user in namespace
// answers, as Kubernetes' RBAC authorizer computes it: every rule that
// applies (ClusterRoleBindings' then the namespace's RoleBindings',
// bindings by name, rules in their role's order, duplicates kept), a rule
// with resources giving a ResourceRule and one with nonResourceURLs a
// NonResourceRule. incomplete is always false (RBAC knows all its rules);
// evaluationError is the resolution errors' text (missing roles), for
// status.evaluationError, "" when none.
func (x *Index) RulesFor(userName string, groups []string, namespace string) (resourceRules []authorizationv1.ResourceRule, nonResourceRules []authorizationv1.NonResourceRule, incomplete bool, evaluationError string) {
	rules, err := x.PolicyRules(userName, groups, namespace)
	for _, r := range rules {
		if len(r.Resources) > 0 {
			resourceRules = append(resourceRules, authorizationv1.ResourceRule{
				Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames,
			})
		}
		if len(r.NonResourceURLs) > 0 {
			nonResourceRules = append(nonResourceRules, authorizationv1.NonResourceRule{
				Verbs: r.Verbs, NonResourceURLs: r.NonResourceURLs,
			})
		}
	}
	if err != nil {
		evaluationError = err.Error()
	}
	return resourceRules, nonResourceRules, false, evaluationError
}

// ClusterRoles returns every ClusterRole the index holds, by name.
func (x *Index) ClusterRoles() []*rbacv1.ClusterRole {
	s := x.cur.Load()
	out := make([]*rbacv1.ClusterRole, 0, s.clusterRoles.len())
	s.clusterRoles.each(func(_ key, r *rbacv1.ClusterRole) { out = append(out, r) })
	slices.SortFunc(out, func(a, b *rbacv1.ClusterRole) int { return strings.Compare(a.Name, b.Name) })
	return out
}
