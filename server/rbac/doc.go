// Package rbac is objwatch's RBAC decision engine: Kubernetes' RBAC
// authorizer (v1.37, plugin/pkg/auth/authorizer/rbac and
// pkg/registry/rbac/validation) over an in-memory Index of Roles,
// ClusterRoles, RoleBindings and ClusterRoleBindings, plus the pieces the
// server needs around it: the bootstrap policy and its start-up
// reconciliation, ClusterRole aggregation, the escalation check and the
// 403 message. It reads no storage; the server feeds it.
//
// # What it decides
//
// Index.Authorize allows a request when one rule of one binding that
// applies to the user allows it, exactly as Kubernetes:
//
//   - ClusterRoleBindings apply everywhere: to namespaced requests, to
//     cluster-scoped ones (Namespace "") and to non-resource paths.
//   - RoleBindings apply only to requests in their own namespace; a
//     RoleBinding may reference a Role of its namespace or a ClusterRole
//     (whose rules then apply in that namespace only). Cluster-scoped
//     requests and non-resource paths are never allowed by RoleBindings.
//   - Subjects: User by name; Group by the user's groups; ServiceAccount
//     as the user system:serviceaccount:<namespace>:<name>, the namespace
//     defaulting to the RoleBinding's (in a ClusterRoleBinding a
//     ServiceAccount without namespace matches nobody); other kinds match
//     nobody. The subject's apiGroup is not checked (nor is it by
//     Kubernetes).
//   - A referenced role that does not exist grants nothing; a denial's
//     reason names it (Kubernetes' resolution errors).
//   - A rule matches (RuleAllows) when a verb is the request's or "*", an
//     apiGroup is the request's or "*", a resource is "*", the resource,
//     "resource/subresource" or "*/subresource", and resourceNames is
//     empty or holds the request's name; a non-resource rule when a verb
//     matches and a nonResourceURL is "*", the path, or a prefix ending in
//     "*" ("/api/*" matches "/api/v1" but not "/api").
//
// The caller must:
//
//   - bypass RBAC for the group system:masters (kube-apiserver's
//     privileged-groups authorizer; see IsSystemMasters). Authorize does
//     not treat it specially.
//   - set Attributes.Name for list, watch and deletecollection from a
//     metadata.name=<name> field selector, as kube-apiserver does, or
//     rules with resourceNames never allow them; create has no name, so
//     rules with resourceNames never allow create.
//   - feed the Index: Replace after each list (or relist) of the four
//     kinds, then Set*/Delete* for each watch event.
//   - write aggregated ClusterRoles' rules back (AggregationUpdates) as
//     Kubernetes' aggregation controller does: Authorize uses each
//     ClusterRole's stored .rules, aggregated or not.
//   - at start, write what Reconcile returns (Bootstrap's defaults,
//     union-reconciled; autoupdate "false" protects an object).
//   - on writes of roles and bindings, check escalation:
//     ConfirmNoEscalation of the rules written (roles) or of RoleRefRules
//     (bindings), unless the user may "escalate" (roles) or "bind" (the
//     referenced role), and answer 403 Forbidden with its message.
//   - format denials with ForbiddenMessage (kube-apiserver's text, with
//     the "rbac: " prefix of its authorizer union).
//
// Search order (visible in allow reasons, resolution errors and RulesFor):
// ClusterRoleBindings, then the namespace's RoleBindings, each by binding
// name, and each role's rules in order. Kubernetes visits bindings in its
// informer cache's order, which is not defined; sorting by name makes
// objwatch's answers stable.
//
// # Concurrency
//
// Many readers, one writer at a time: all read methods are lock-free
// (one atomic load of an immutable snapshot) and safe from any number of
// goroutines during writes; writers are serialised by a mutex and
// publish copy-on-write snapshots (a write copies one 1/64 shard of a
// map and the binding lists of the subjects it touches). Objects given
// to the Index are kept and must not be modified afterwards.
package rbac
