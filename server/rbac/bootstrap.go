package rbac

import (
	"sort"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
)

// The bootstrap policy: the subset of Kubernetes v1.37's default
// ClusterRoles and ClusterRoleBindings (plugin/pkg/auth/authorizer/rbac/
// bootstrappolicy/policy.go, default feature gates: DynamicResourceAllocation
// on, GenericWorkload, CompositePodGroup and EvictionRequestAPI off) that
// objwatch creates. Rules are Kubernetes' verbatim, including resources
// objwatch does not serve.

// Labels and annotations of every bootstrap object.
const (
	BootstrappingLabel      = "kubernetes.io/bootstrapping"
	BootstrappingLabelValue = "rbac-defaults"
	aggregateToAdmin        = "rbac.authorization.k8s.io/aggregate-to-admin"
	aggregateToEdit         = "rbac.authorization.k8s.io/aggregate-to-edit"
	aggregateToView         = "rbac.authorization.k8s.io/aggregate-to-view"
)

var (
	verbsWrite     = []string{"create", "update", "patch", "delete", "deletecollection"}
	verbsReadWrite = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	verbsRead      = []string{"get", "list", "watch"}
)

const (
	legacyGroup         = ""
	appsGroup           = "apps"
	authenticationGroup = "authentication.k8s.io"
	authorizationGroup  = "authorization.k8s.io"
	autoscalingGroup    = "autoscaling"
	batchGroup          = "batch"
	coordinationGroup   = "coordination.k8s.io"
	discoveryGroup      = "discovery.k8s.io"
	extensionsGroup     = "extensions"
	policyGroup         = "policy"
	rbacGroup           = "rbac.authorization.k8s.io"
	resourceGroup       = "resource.k8s.io"
	networkingGroup     = "networking.k8s.io"
	eventsGroup         = "events.k8s.io"
)

// ruleBuilder is Kubernetes' rbacv1helpers.PolicyRuleBuilder: Rule sorts
// every list, as Kubernetes' does, so the rules are stored sorted.
type ruleBuilder struct{ r rbacv1.PolicyRule }

func newRule(verbs ...string) *ruleBuilder {
	return &ruleBuilder{rbacv1.PolicyRule{Verbs: append([]string(nil), verbs...)}}
}

func (b *ruleBuilder) groups(g ...string) *ruleBuilder {
	b.r.APIGroups = append(b.r.APIGroups, g...)
	return b
}

func (b *ruleBuilder) resources(r ...string) *ruleBuilder {
	b.r.Resources = append(b.r.Resources, r...)
	return b
}

func (b *ruleBuilder) urls(u ...string) *ruleBuilder {
	b.r.NonResourceURLs = append(b.r.NonResourceURLs, u...)
	return b
}

func (b *ruleBuilder) rule() rbacv1.PolicyRule {
	sort.Strings(b.r.Resources)
	sort.Strings(b.r.ResourceNames)
	sort.Strings(b.r.APIGroups)
	sort.Strings(b.r.NonResourceURLs)
	sort.Strings(b.r.Verbs)
	return b.r
}

func viewRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		newRule(verbsRead...).groups(legacyGroup).resources("pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
			"services", "services/status", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "configmaps").rule(),
		newRule(verbsRead...).groups(legacyGroup).resources("limitranges", "resourcequotas", "bindings",
			"pods/status", "resourcequotas/status", "namespaces/status", "replicationcontrollers/status", "pods/log").rule(),
		newRule(verbsRead...).groups(legacyGroup).resources("namespaces").rule(),
		newRule(verbsRead...).groups(legacyGroup, eventsGroup).resources("events").rule(),
		newRule(verbsRead...).groups(discoveryGroup).resources("endpointslices").rule(),
		newRule(verbsRead...).groups(appsGroup).resources(
			"controllerrevisions",
			"statefulsets", "statefulsets/status", "statefulsets/scale",
			"daemonsets", "daemonsets/status",
			"deployments", "deployments/status", "deployments/scale",
			"replicasets", "replicasets/status", "replicasets/scale").rule(),
		newRule(verbsRead...).groups(autoscalingGroup).resources("horizontalpodautoscalers", "horizontalpodautoscalers/status").rule(),
		newRule(verbsRead...).groups(batchGroup).resources("jobs", "cronjobs", "cronjobs/status", "jobs/status").rule(),
		newRule(verbsRead...).groups(extensionsGroup).resources("daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status",
			"ingresses", "ingresses/status", "replicasets", "replicasets/scale", "replicasets/status", "replicationcontrollers/scale",
			"networkpolicies").rule(),
		newRule(verbsRead...).groups(policyGroup).resources("poddisruptionbudgets", "poddisruptionbudgets/status").rule(),
		newRule(verbsRead...).groups(networkingGroup).resources("networkpolicies", "ingresses", "ingresses/status").rule(),
		// DynamicResourceAllocation (GA, on).
		newRule(verbsRead...).groups(resourceGroup).resources("resourceclaims", "resourceclaims/status", "resourceclaimtemplates").rule(),
	}
}

func editRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		newRule(verbsRead...).groups(legacyGroup).resources("pods/attach", "pods/proxy", "pods/exec", "pods/portforward", "secrets", "services/proxy").rule(),
		newRule("impersonate").groups(legacyGroup).resources("serviceaccounts").rule(),
		newRule(verbsWrite...).groups(legacyGroup).resources("pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward").rule(),
		newRule("create").groups(legacyGroup).resources("pods/eviction").rule(),
		newRule(verbsWrite...).groups(legacyGroup).resources("replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
			"services", "services/proxy", "persistentvolumeclaims", "configmaps", "secrets").rule(),
		newRule("create").groups(legacyGroup).resources("serviceaccounts/token").rule(),
		newRule(verbsWrite...).groups(legacyGroup, eventsGroup).resources("events").rule(),
		newRule(verbsWrite...).groups(appsGroup).resources(
			"statefulsets", "statefulsets/scale",
			"daemonsets",
			"deployments", "deployments/scale", "deployments/rollback",
			"replicasets", "replicasets/scale").rule(),
		newRule(verbsWrite...).groups(autoscalingGroup).resources("horizontalpodautoscalers").rule(),
		newRule(verbsWrite...).groups(batchGroup).resources("jobs", "cronjobs").rule(),
		newRule(verbsWrite...).groups(extensionsGroup).resources("daemonsets",
			"deployments", "deployments/scale", "deployments/rollback", "ingresses",
			"replicasets", "replicasets/scale", "replicationcontrollers/scale",
			"networkpolicies").rule(),
		newRule(verbsWrite...).groups(policyGroup).resources("poddisruptionbudgets").rule(),
		newRule(verbsWrite...).groups(networkingGroup).resources("networkpolicies", "ingresses").rule(),
		newRule(verbsReadWrite...).groups(coordinationGroup).resources("leases").rule(),
		// DynamicResourceAllocation (GA, on).
		newRule(verbsWrite...).groups(resourceGroup).resources("resourceclaims", "resourceclaimtemplates").rule(),
	}
}

func aggregation(label string) *rbacv1.AggregationRule {
	return &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{label: "true"}}}}
}

// defaultMetadata is Kubernetes' addDefaultMetadata: the bootstrapping
// label and the autoupdate annotation, added to the object's own labels.
func defaultMetadata(m *metav1.ObjectMeta) {
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[BootstrappingLabel] = BootstrappingLabelValue
	m.Annotations = map[string]string{rbacv1.AutoUpdateAnnotationKey: "true"}
}

// Bootstrap returns the default ClusterRoles and ClusterRoleBindings
// objwatch creates and reconciles at every start (Reconcile*), as
// Kubernetes v1.37 defines them: cluster-admin, system:discovery,
// system:basic-user, system:public-info-viewer, the aggregated admin,
// edit and view (with no rules of their own: the aggregation fills them)
// and system:aggregate-to-admin, -edit and -view holding the rules for the
// built-in resources; the bindings cluster-admin to group system:masters,
// system:discovery and system:basic-user to system:authenticated, and
// system:public-info-viewer to system:authenticated and
// system:unauthenticated. Kubernetes' other defaults (controllers',
// nodes', system:monitoring...) are not included. Each call returns new
// objects.
func Bootstrap() (clusterRoles []*rbacv1.ClusterRole, clusterRoleBindings []*rbacv1.ClusterRoleBinding) {
	roles := []rbacv1.ClusterRole{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-admin"},
			Rules: []rbacv1.PolicyRule{
				newRule("*").groups("*").resources("*").rule(),
				newRule("*").urls("*").rule(),
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:discovery"},
			Rules: []rbacv1.PolicyRule{
				newRule("get").urls(
					"/livez", "/readyz", "/healthz",
					"/version", "/version/",
					"/openapi", "/openapi/*",
					"/api", "/api/*",
					"/apis", "/apis/*",
				).rule(),
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:basic-user"},
			Rules: []rbacv1.PolicyRule{
				newRule("create").groups(authorizationGroup).resources("selfsubjectaccessreviews", "selfsubjectrulesreviews").rule(),
				newRule("create").groups(authenticationGroup).resources("selfsubjectreviews").rule(),
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:public-info-viewer"},
			Rules: []rbacv1.PolicyRule{
				newRule("get").urls("/livez", "/readyz", "/healthz", "/version", "/version/").rule(),
			},
		},
		{
			ObjectMeta:      metav1.ObjectMeta{Name: "admin"},
			AggregationRule: aggregation(aggregateToAdmin),
		},
		{
			ObjectMeta:      metav1.ObjectMeta{Name: "edit", Labels: map[string]string{aggregateToAdmin: "true"}},
			AggregationRule: aggregation(aggregateToEdit),
		},
		{
			ObjectMeta:      metav1.ObjectMeta{Name: "view", Labels: map[string]string{aggregateToEdit: "true"}},
			AggregationRule: aggregation(aggregateToView),
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-admin", Labels: map[string]string{aggregateToAdmin: "true"}},
			Rules: []rbacv1.PolicyRule{
				newRule("create").groups(authorizationGroup).resources("localsubjectaccessreviews").rule(),
				newRule(verbsReadWrite...).groups(rbacGroup).resources("roles", "rolebindings").rule(),
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-edit", Labels: map[string]string{aggregateToEdit: "true"}},
			Rules:      editRules(),
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-view", Labels: map[string]string{aggregateToView: "true"}},
			Rules:      viewRules(),
		},
	}
	for i := range roles {
		defaultMetadata(&roles[i].ObjectMeta)
		clusterRoles = append(clusterRoles, &roles[i])
	}

	bind := func(role string, groups ...string) *rbacv1.ClusterRoleBinding {
		b := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		}
		for _, g := range groups {
			b.Subjects = append(b.Subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: g})
		}
		defaultMetadata(&b.ObjectMeta)
		return b
	}
	clusterRoleBindings = []*rbacv1.ClusterRoleBinding{
		bind("cluster-admin", user.SystemPrivilegedGroup),
		bind("system:discovery", user.AllAuthenticated),
		bind("system:basic-user", user.AllAuthenticated),
		bind("system:public-info-viewer", user.AllAuthenticated, user.AllUnauthenticated),
	}
	return clusterRoles, clusterRoleBindings
}
