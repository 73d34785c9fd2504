package audit

import (
	"fmt"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	kaudit "k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/objwatch/objwatch/server/auth"
)

// Policy decides what is recorded of a request: Kubernetes' audit.k8s.io/v1
// Policy, evaluated by Kubernetes' own rule evaluator. A Policy is safe for
// concurrent use.
type Policy struct {
	eval kaudit.PolicyRuleEvaluator
}

// LoadPolicy reads an audit.k8s.io Policy file (--audit-policy-file). An
// empty path is the default policy: every request at Metadata level (a
// kube-apiserver without a policy file records nothing; objwatch records
// who did what unless told otherwise).
func LoadPolicy(path string) (*Policy, error) {
	if path == "" {
		return NewPolicy(&auditinternal.Policy{Rules: []auditinternal.PolicyRule{{Level: auditinternal.LevelMetadata}}}), nil
	}
	p, err := policy.LoadPolicyFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit policy: %w", err)
	}
	return NewPolicy(p), nil
}

// ParsePolicy reads a Policy from YAML or JSON.
func ParsePolicy(b []byte) (*Policy, error) {
	p, err := policy.LoadPolicyFromBytes(b)
	if err != nil {
		return nil, fmt.Errorf("audit policy: %w", err)
	}
	return NewPolicy(p), nil
}

// NewPolicy returns p's evaluator.
func NewPolicy(p *auditinternal.Policy) *Policy {
	return &Policy{eval: policy.NewPolicyRuleEvaluator(p)}
}

// Attributes are what a policy rule matches a request on.
type Attributes struct {
	User *auth.User
	Verb string
	// Resource requests: ResourceRequest, and the resource's names; else
	// Path (a non-resource URL).
	ResourceRequest                    bool
	APIGroup, APIVersion, Resource     string
	Subresource, Namespace, Name, Path string
}

// Decision is a policy's answer for one request.
type Decision struct {
	Level             auditv1.Level
	OmitStages        []auditv1.Stage
	OmitManagedFields bool
}

// omits reports whether stage is not recorded.
func (d Decision) omits(stage auditv1.Stage) bool {
	for _, s := range d.OmitStages {
		if s == stage {
			return true
		}
	}
	return false
}

// atLeast reports whether d's level includes l's detail.
func (d Decision) atLeast(l auditv1.Level) bool {
	return auditinternal.Level(d.Level).GreaterOrEqual(auditinternal.Level(l))
}

// Evaluate returns the policy's decision for a request.
func (p *Policy) Evaluate(a Attributes) Decision {
	rec := authorizer.AttributesRecord{
		Verb: a.Verb, ResourceRequest: a.ResourceRequest, APIGroup: a.APIGroup, APIVersion: a.APIVersion,
		Resource: a.Resource, Subresource: a.Subresource, Namespace: a.Namespace, Name: a.Name, Path: a.Path,
	}
	if a.User != nil {
		rec.User = &user.DefaultInfo{Name: a.User.Name, UID: a.User.UID, Groups: a.User.Groups, Extra: a.User.Extra}
	}
	c := p.eval.EvaluatePolicyRule(rec)
	d := Decision{Level: auditv1.Level(c.Level), OmitManagedFields: c.OmitManagedFields}
	for _, s := range c.OmitStages {
		d.OmitStages = append(d.OmitStages, auditv1.Stage(s))
	}
	return d
}
