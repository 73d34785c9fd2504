package audit

import (
	"slices"
	"strings"
	"testing"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/objwatch/objwatch/server/auth"
)

// bytePicker draws choices from fuzz input; past its end every choice is 0.
type bytePicker []byte

func (p *bytePicker) n(max int) int {
	if len(*p) == 0 || max <= 0 {
		return 0
	}
	b := (*p)[0]
	*p = (*p)[1:]
	return int(b) % max
}

// some picks up to 3 of words (possibly none).
func (p *bytePicker) some(words ...string) []string {
	var out []string
	for range p.n(4) {
		out = append(out, words[p.n(len(words))])
	}
	return out
}

var (
	fuzzUsers    = []string{"alice", "bob", "system:serviceaccount:ns:sa"}
	fuzzGroups   = []string{"system:authenticated", "devs", "system:masters"}
	fuzzVerbs    = []string{"get", "list", "create", "update", "patch", "delete", "watch"}
	fuzzGroupsAP = []string{"", "apps", "*"}
	fuzzRes      = []string{"pods", "pods/status", "*", "*/status", "pods/*", "configmaps", "deployments", "status"}
	fuzzNames    = []string{"", "a", "b"}
	fuzzNS       = []string{"", "default", "kube-system"}
	fuzzURLs     = []string{"/healthz", "/healthz*", "/api/*", "*", "/version", "/api"}
	fuzzLevels   = []auditinternal.Level{auditinternal.LevelNone, auditinternal.LevelMetadata, auditinternal.LevelRequest, auditinternal.LevelRequestResponse}
	fuzzStages   = []string{string(auditinternal.StageRequestReceived), string(auditinternal.StageResponseStarted), string(auditinternal.StageResponseComplete), string(auditinternal.StagePanic)}
)

func stages(s []string) []auditinternal.Stage {
	var out []auditinternal.Stage
	for _, x := range s {
		out = append(out, auditinternal.Stage(x))
	}
	return out
}

// FuzzPolicyEvaluate checks the audit policy's decision for a request
// against a direct walk of its rules as Kubernetes documents them: the
// first rule that matches (users, userGroups, verbs, resources with
// resourceNames, namespaces, nonResourceURLs) gives the level, its
// omitStages joined with the policy's, and its omitManagedFields or else
// the policy's; no rule matching is level None. Policies and requests are
// drawn from a small vocabulary so that rules do match. Any bytes given to
// ParsePolicy give a policy or an error.
func FuzzPolicyEvaluate(f *testing.F) {
	f.Add([]byte{1, 1, 0, 1, 2, 0, 0, 1, 3, 4, 5, 6, 7, 8, 9}, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"))
	f.Add([]byte{3, 2, 1, 2, 2, 1, 1, 1, 0, 2, 1, 1, 0, 1, 1, 2, 2, 3, 1, 0, 0, 0, 2, 1}, []byte(`{"apiVersion":"audit.k8s.io/v1","kind":"Policy","rules":[{"level":"None","users":["a"]}]}`))
	f.Add([]byte("a policy of many rules, some matching and others not, with omitted stages"), []byte("rules: [{level: Bogus}]"))
	f.Fuzz(func(t *testing.T, choices []byte, doc []byte) {
		if p, err := ParsePolicy(doc); err == nil {
			p.Evaluate(Attributes{Verb: "get", Path: "/"})
		}
		p := bytePicker(choices)
		pol := &auditinternal.Policy{OmitStages: stages(p.some(fuzzStages...)), OmitManagedFields: p.n(2) == 1}
		for range p.n(5) {
			r := auditinternal.PolicyRule{
				Level: fuzzLevels[p.n(len(fuzzLevels))], Users: p.some(fuzzUsers...), UserGroups: p.some(fuzzGroups...),
				Verbs: p.some(fuzzVerbs...), Namespaces: p.some(fuzzNS...), OmitStages: stages(p.some(fuzzStages...)),
			}
			if p.n(2) == 1 {
				r.NonResourceURLs = p.some(fuzzURLs...)
			}
			for range p.n(3) {
				r.Resources = append(r.Resources, auditinternal.GroupResources{
					Group: fuzzGroupsAP[p.n(len(fuzzGroupsAP))], Resources: p.some(fuzzRes...), ResourceNames: p.some(fuzzNames[1:]...)})
			}
			if p.n(3) == 1 {
				v := p.n(2) == 1
				r.OmitManagedFields = &v
			}
			pol.Rules = append(pol.Rules, r)
		}
		a := Attributes{Verb: fuzzVerbs[p.n(len(fuzzVerbs))], ResourceRequest: p.n(3) != 0}
		if p.n(4) != 0 {
			a.User = &auth.User{Name: fuzzUsers[p.n(len(fuzzUsers))], Groups: p.some(fuzzGroups...)}
		}
		if a.ResourceRequest {
			a.APIGroup, a.Resource, a.Namespace, a.Name = fuzzGroupsAP[p.n(2)], []string{"pods", "configmaps", "deployments"}[p.n(3)], fuzzNS[p.n(3)], fuzzNames[p.n(3)]
			a.Subresource = []string{"", "status", "scale"}[p.n(3)]
		} else {
			a.Path = []string{"/healthz", "/healthz/etcd", "/api", "/api/v1", "/version", "/"}[p.n(6)]
		}

		want := Decision{Level: auditv1.LevelNone, OmitManagedFields: pol.OmitManagedFields}
		wantStages := pol.OmitStages
		for _, r := range pol.Rules {
			if auditRuleMatches(&r, a) {
				want.Level, wantStages = auditv1.Level(r.Level), append(slices.Clone(pol.OmitStages), r.OmitStages...)
				if r.OmitManagedFields != nil {
					want.OmitManagedFields = *r.OmitManagedFields
				}
				break
			}
		}
		got := NewPolicy(pol).Evaluate(a)
		if got.Level != want.Level || got.OmitManagedFields != want.OmitManagedFields {
			t.Fatalf("policy %+v\nrequest %+v (user %+v)\n= %+v, the rules' walk %+v", pol, a, a.User, got, want)
		}
		for _, s := range fuzzStages {
			if got.omits(auditv1.Stage(s)) != slices.Contains(wantStages, auditinternal.Stage(s)) {
				t.Fatalf("policy %+v\nrequest %+v: omits %s = %v, want %v", pol, a, s, got.omits(auditv1.Stage(s)), !got.omits(auditv1.Stage(s)))
			}
		}
	})
}

// auditRuleMatches is the audit.k8s.io/v1 PolicyRule documentation read
// directly.
func auditRuleMatches(r *auditinternal.PolicyRule, a Attributes) bool {
	if len(r.Users) > 0 && (a.User == nil || !slices.Contains(r.Users, a.User.Name)) {
		return false
	}
	if len(r.UserGroups) > 0 && (a.User == nil || !slices.ContainsFunc(a.User.Groups, func(g string) bool { return slices.Contains(r.UserGroups, g) })) {
		return false
	}
	if len(r.Verbs) > 0 && !slices.Contains(r.Verbs, a.Verb) {
		return false
	}
	if len(r.Namespaces) > 0 || len(r.Resources) > 0 {
		if !a.ResourceRequest || (len(r.Namespaces) > 0 && !slices.Contains(r.Namespaces, a.Namespace)) {
			return false
		}
		if len(r.Resources) == 0 {
			return true
		}
		combined := a.Resource
		if a.Subresource != "" {
			combined += "/" + a.Subresource
		}
		for _, gr := range r.Resources {
			if gr.Group != a.APIGroup && gr.Group != "*" {
				continue
			}
			if len(gr.Resources) == 0 {
				return true
			}
			if len(gr.ResourceNames) > 0 && !slices.Contains(gr.ResourceNames, a.Name) {
				continue
			}
			for _, res := range gr.Resources {
				if res == "*" || res == combined || (a.Subresource != "" && res == "*/"+a.Subresource) || res == a.Resource+"/*" {
					return true
				}
			}
		}
		return false
	}
	if len(r.NonResourceURLs) > 0 {
		if a.ResourceRequest {
			return false
		}
		for _, u := range r.NonResourceURLs {
			if u == "*" || u == a.Path || (strings.HasSuffix(u, "*") && strings.HasPrefix(a.Path, strings.TrimRight(u, "*"))) {
				return true
			}
		}
		return false
	}
	return true
}
