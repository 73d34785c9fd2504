// Package kube defines the built-in kinds whose rules objwatch takes from
// Kubernetes itself (k8s.io/kubernetes v1.37.2): pods, nodes, persistent
// volumes and claims, the apps, batch, autoscaling, networking, policy,
// storage, discovery, scheduling, node, certificates, flowcontrol and
// resource groups — every resource kube-apiserver serves by default that
// package registry does not define by hand.
//
// For each kind, Kubernetes' registry strategy (pkg/registry/...) prepares
// and validates objects, its defaulters fill in defaults, its printers
// render the tables kubectl shows, and its GetAttrs gives the field
// selectors (spec.nodeName and status.phase for pods). Objects stay
// unstructured everywhere else in the server; this package converts them
// to the kind's versioned Go type (k8s.io/api), applies defaults, converts
// to the internal type the strategy takes and back, exactly as
// kube-apiserver's decoder and rest.BeforeCreate/BeforeUpdate do:
//
//	Normalize        decode + defaults (unknown fields reported)
//	PrepareForCreate strategy.PrepareForCreate, Canonicalize
//	PrepareForUpdate generation reset to the old one, strategy (or status
//	                 strategy).PrepareForUpdate, Canonicalize
//	Validate         rest.ValidateCreate / rest.ValidateUpdate: the
//	                 strategy's checks, common metadata checks and
//	                 declarative validation
//
// The strategies read the request's group, version, resource, subresource,
// namespace and user (a CertificateSigningRequest records who asked) from
// the context, which this package builds for each call; their warnings
// (WarningsOnCreate, WarningsOnUpdate) are sent with valid writes, and a
// deprecated version's warning with every request to it.
//
// Beyond /status and /scale, a pod has binding (spec.nodeName, once) and
// eviction (a delete that running pods' PodDisruptionBudgets may refuse;
// with no disruption controller, a budget's status is what clients wrote
// and an eviction does not decrement it), and a CertificateSigningRequest
// has approval, each with Kubernetes' rules. testdata/parity.json holds
// kube-apiserver's answers to a valid and an invalid create, an immutable
// field's update, status through the main resource and /status, and /scale
// for every kind; TestKindsParity checks objwatch gives the same.
//
// What is not here: controllers (no scheduler, kubelet or workload
// controllers, as in envtest); the subresources that need a node (log,
// exec, attach, portforward, proxy); and, of what kube-apiserver serves by
// default, core/v1 bindings and componentstatuses, apiregistration's
// apiservices, and the kinds whose strategies need the requesting user or
// an authorizer (resource.k8s.io resourceclaims and
// resourceclaimtemplates, certificates.k8s.io podcertificaterequests).
//
// Everything in this package is safe for concurrent use.
package kube
