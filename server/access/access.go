// Package access decides who may do what: it keeps the RBAC decision
// index (package rbac) in step with the stored roles and bindings, plugs
// its decisions into the object service's Authorize hook, and answers the
// review resources (SelfSubjectReview, TokenReview, the access reviews
// kubectl auth can-i uses, and a service account's TokenRequest).
//
// # Decisions
//
// The server itself (a request without a user) and members of
// system:masters may do everything, as kube-apiserver's privileged-group
// authorizer allows them; everyone else is asked of RBAC. Decisions come
// from an in-memory index fed by watches of the four RBAC resources
// through the object service, so no request reads etcd to be authorized,
// and a change to a role or binding takes effect as soon as this server's
// watch delivers it (milliseconds; every server on one etcd follows its
// own watch). Open watches are asked again on every change (the object
// service's AuthorizationChanged hook): a revoked permission ends them
// with a 403 ERROR event.
//
// Resource requests are authorized by the object service before it reads
// anything; other paths (discovery, OpenAPI, version, health, metrics) by
// the endpoints' filter, through Authorized.
//
// # Concurrency
//
// An Access is safe for concurrent use. Run feeds the index and blocks
// until its context ends; the caller owns that goroutine.
package access

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/rbac"
	"github.com/objwatch/objwatch/server/registry"
)

// Config configures an Access.
type Config struct {
	Registry *registry.Registry
	Log      *slog.Logger
	// AlwaysAllow turns authorization off: every authenticated user may
	// do everything (the behaviour before RBAC; for tests and
	// single-user setups).
	AlwaysAllow bool
	// Authenticator answers TokenReviews; nil answers them with 405.
	Authenticator *auth.Authenticator
	// TokenIssuer answers TokenRequests; nil answers them with 405.
	TokenIssuer *auth.TokenIssuer
}

// Access holds the RBAC index and answers reviews.
type Access struct {
	cfg     Config
	index   *rbac.Index
	objects *objects.Service

	mu sync.Mutex
	// changed is done at the next change of the index: a signal Access
	// owns (it creates and cancels each), not a caller's context; watches
	// join it with context.AfterFunc, which needs no goroutine per watch.
	changed context.Context
	change  context.CancelFunc
	synced  chan struct{} // closed once every RBAC resource was listed
}

// New returns an Access with an empty index; give its Hooks to the object
// service, Use that service, then Run.
func New(cfg Config) (*Access, error) {
	if cfg.Registry == nil || cfg.Log == nil {
		return nil, errors.New("access: incomplete config")
	}
	a := &Access{cfg: cfg, index: rbac.NewIndex(), synced: make(chan struct{})}
	a.changed, a.change = context.WithCancel(context.Background())
	return a, nil
}

// Use sets the object service the index is fed from. Call it once,
// before Run.
func (a *Access) Use(s *objects.Service) { a.objects = s }

// Index returns the RBAC decision index.
func (a *Access) Index() *rbac.Index { return a.index }

// Synced is closed once the index holds every stored role and binding.
func (a *Access) Synced() <-chan struct{} { return a.synced }

// Hooks are the object service hooks of authorization: Authorize,
// AuthorizationChanged, Review, and an Admit that refuses RBAC writes
// that would escalate.
func (a *Access) Hooks() objects.Hooks {
	return objects.Hooks{
		Authorize: a.authorize, AuthorizationChanged: a.authorizationChanged, Review: a.review,
		Admit: []func(context.Context, *objects.Request, *unstructured.Unstructured, *unstructured.Unstructured) (func(), error){a.admit},
	}
}

// unrestricted reports whether u may do everything without asking RBAC.
func (a *Access) unrestricted(u *auth.User) bool {
	return a.cfg.AlwaysAllow || u == nil || rbac.IsSystemMasters(u.Groups)
}

// Authorized reports whether u may do what attrs describe, and RBAC's
// reason.
func (a *Access) Authorized(u *auth.User, attrs auth.Attributes) (bool, string) {
	if a.unrestricted(u) {
		return true, ""
	}
	return a.index.Authorize(u.Name, u.Groups, attrs)
}

// Authorize is nil when u may do what attrs describe, else the 403.
func (a *Access) Authorize(u *auth.User, attrs auth.Attributes) error {
	if a.unrestricted(u) || a.index.Allows(u.Name, u.Groups, &attrs) {
		return nil
	}
	_, reason := a.index.Authorize(u.Name, u.Groups, attrs)
	return Forbidden(u, attrs, reason)
}

// Forbidden is kube-apiserver's 403 for a denied request.
func Forbidden(u *auth.User, attrs auth.Attributes, reason string) error {
	msg := rbac.ForbiddenMessage(u.Name, attrs, rbac.ServerReason(reason))
	return apierrors.NewForbidden(schema.GroupResource{Group: attrs.APIGroup, Resource: attrs.Resource}, attrs.Name, errors.New(msg))
}

// Attributes is what req asks, as authorizers see it.
func Attributes(req *objects.Request) auth.Attributes {
	res := req.Resource
	attrs := auth.Attributes{
		ResourceRequest: true, Verb: req.Verb, APIGroup: res.Group, Resource: res.Plural,
		Subresource: req.Subresource, Namespace: req.Namespace, Name: req.Name,
	}
	if attrs.Name == "" {
		attrs.Name = req.SelectedName
	}
	if res.Group == "" && res.Plural == "namespaces" && attrs.Namespace == "" {
		attrs.Namespace = attrs.Name // as Kubernetes: a namespace is in itself
	}
	return attrs
}

func (a *Access) authorize(ctx context.Context, req *objects.Request) error {
	if a.unrestricted(req.User) {
		return nil
	}
	attrs := Attributes(req)
	rec := audit.RecordFrom(ctx)
	if rec == nil && a.index.Allows(req.User.Name, req.User.Groups, &attrs) {
		return nil
	}
	// Refused, or audited: the audit record keeps RBAC's reason, as
	// kube-apiserver's does.
	ok, reason := a.index.Authorize(req.User.Name, req.User.Groups, attrs)
	if rec != nil {
		rec.Authorized(reason)
	}
	if ok {
		return nil
	}
	return Forbidden(req.User, attrs, reason)
}

func (a *Access) authorizationChanged(req *objects.Request) context.Context {
	if a.unrestricted(req.User) {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.changed
}

// changedNow tells waiting watches that decisions may have changed.
func (a *Access) changedNow() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.change()
	a.changed, a.change = context.WithCancel(context.Background())
}
