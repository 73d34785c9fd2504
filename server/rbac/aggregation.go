package rbac

import (
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// AggregatedRules is what Kubernetes' ClusterRole aggregation controller
// (pkg/controller/clusterroleaggregation) writes into the .rules of cr,
// which has an aggregationRule, given all ClusterRoles and rulesOf (the
// current rules of each by name; nil: their stored .rules): for each
// selector in order, the ClusterRoles other than cr whose labels match,
// by name, and their rules in order, each rule once (semantic equality).
// A selector that does not convert is an error, as in Kubernetes, and
// nothing is written.
func AggregatedRules(cr *rbacv1.ClusterRole, all []*rbacv1.ClusterRole, rulesOf map[string][]rbacv1.PolicyRule) ([]rbacv1.PolicyRule, error) {
	byName := slices.Clone(all)
	slices.SortFunc(byName, func(a, b *rbacv1.ClusterRole) int { return strings.Compare(a.Name, b.Name) })
	out := []rbacv1.PolicyRule{}
	if cr.AggregationRule == nil {
		return out, nil
	}
	for i := range cr.AggregationRule.ClusterRoleSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&cr.AggregationRule.ClusterRoleSelectors[i])
		if err != nil {
			return nil, err
		}
		for _, o := range byName {
			if o.Name == cr.Name || !sel.Matches(labels.Set(o.Labels)) {
				continue
			}
			rules := o.Rules
			if r, ok := rulesOf[o.Name]; ok {
				rules = r
			}
			for _, r := range rules {
				if !slices.ContainsFunc(out, func(e rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(e, r) }) {
					out = append(out, r)
				}
			}
		}
	}
	return out, nil
}

// AggregationUpdates returns, for each ClusterRole of all with an
// aggregationRule whose stored .rules differ (semantically) from the
// aggregated ones, the rules to write into its .rules. It computes where
// Kubernetes' controller converges: aggregated roles that aggregate
// others (admin selects edit, which selects view) see the others'
// aggregated rules, iterated to a fixed point. The server writes the
// result back (an update of each ClusterRole's rules) whenever a
// ClusterRole changed, as the controller does.
func AggregationUpdates(all []*rbacv1.ClusterRole) map[string][]rbacv1.PolicyRule {
	current := map[string][]rbacv1.PolicyRule{}
	var aggregated []*rbacv1.ClusterRole
	for _, cr := range all {
		current[cr.Name] = cr.Rules
		if cr.AggregationRule != nil {
			aggregated = append(aggregated, cr)
		}
	}
	slices.SortFunc(aggregated, func(a, b *rbacv1.ClusterRole) int { return strings.Compare(a.Name, b.Name) })
	for range len(aggregated) + 1 {
		changed := false
		for _, cr := range aggregated {
			rules, err := AggregatedRules(cr, all, current)
			if err != nil || equality.Semantic.DeepEqual(rules, current[cr.Name]) {
				continue
			}
			current[cr.Name] = rules
			changed = true
		}
		if !changed {
			break
		}
	}
	updates := map[string][]rbacv1.PolicyRule{}
	for _, cr := range aggregated {
		if !equality.Semantic.DeepEqual(current[cr.Name], cr.Rules) {
			updates[cr.Name] = current[cr.Name]
		}
	}
	return updates
}

// AggregationUpdates is AggregationUpdates of the index's ClusterRoles.
func (x *Index) AggregationUpdates() map[string][]rbacv1.PolicyRule {
	return AggregationUpdates(x.ClusterRoles())
}
