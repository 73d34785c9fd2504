package policy

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// lookupTimeout bounds one read made for a policy (a namespace, a param),
// as Kubernetes bounds its direct reads on an informer miss.
const lookupTimeout = 5 * time.Second

// reader reads objects through the object service as the server itself
// (nil user): from the watch cache ("0") or, for a miss, with a quorum
// read, as Kubernetes' admission reads its informers and falls back to a
// direct read. Its methods are safe for concurrent use.
type reader struct {
	p *Policies
}

func (r reader) get(res *registry.Resource, ns, name string, quorum bool) (*unstructured.Unstructured, error) {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	opts := &metav1.GetOptions{ResourceVersion: "0"}
	if quorum {
		opts = nil
	}
	return r.p.objects.Get(ctx, &objects.Request{Verb: "get", Resource: res, Namespace: ns, Name: name}, opts)
}

func (r reader) list(res *registry.Resource, ns string, sel labels.Selector) ([]runtime.Object, error) {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	l, err := r.p.objects.List(ctx, &objects.Request{Verb: "list", Resource: res, Namespace: ns},
		&internalversion.ListOptions{ResourceVersion: "0", LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	items, err := l.Objects()
	if err != nil {
		return nil, err
	}
	out := make([]runtime.Object, len(items))
	for i, u := range items {
		out[i] = u
	}
	return out, nil
}

// namespaceLister is the client-go NamespaceLister the policy matcher
// wants, over the watch cache. List is never called by the matcher and
// lists nothing.
type namespaceLister struct{ reader }

func (l namespaceLister) List(labels.Selector) ([]*corev1.Namespace, error) { return nil, nil }

func (l namespaceLister) Get(name string) (*corev1.Namespace, error) {
	return l.namespace(name, false)
}

func (l namespaceLister) namespace(name string, quorum bool) (*corev1.Namespace, error) {
	u, err := l.get(l.p.namespaces, "", name, quorum)
	if err != nil {
		return nil, err
	}
	var ns corev1.Namespace
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ns); err != nil {
		return nil, err
	}
	return &ns, nil
}

var _ corelisters.NamespaceLister = namespaceLister{}

// namespaceClient is the one call of a kubernetes.Interface the policy
// matcher makes (CoreV1().Namespaces().Get, when the lister misses): a
// quorum read. Every other method is absent and panics; nothing calls
// them.
type namespaceClient struct {
	kubernetes.Interface
	l namespaceLister
}

func (c namespaceClient) CoreV1() corev1client.CoreV1Interface { return namespaceCoreV1{l: c.l} }

// Embedding the wide interfaces keeps the shim to the one method used.
type namespaceCoreV1 struct {
	corev1client.CoreV1Interface
	l namespaceLister
}

type namespaceIface struct {
	corev1client.NamespaceInterface
	l namespaceLister
}

func (c namespaceCoreV1) Namespaces() corev1client.NamespaceInterface {
	return namespaceIface{l: c.l}
}

func (c namespaceIface) Get(_ context.Context, name string, _ metav1.GetOptions) (*corev1.Namespace, error) {
	return c.l.namespace(name, true)
}

// params is the client-go GenericInformer the policy dispatchers read a
// binding's params from: a lister over the param resource's watch cache,
// always synced. Get falls back to a quorum read on a miss, as
// Kubernetes falls back to its dynamic client.
type params struct {
	reader
	res *registry.Resource
	ns  string
}

func (p params) Informer() cache.SharedIndexInformer { return syncedInformer{} }

func (p params) Lister() cache.GenericLister { return p }

func (p params) ByNamespace(ns string) cache.GenericNamespaceLister {
	p.ns = ns
	return p
}

func (p params) List(sel labels.Selector) ([]runtime.Object, error) { return p.list(p.res, p.ns, sel) }

func (p params) Get(name string) (runtime.Object, error) {
	u, err := p.get(p.res, p.ns, name, false)
	if err != nil && apierrors.IsNotFound(err) {
		u, err = p.get(p.res, p.ns, name, true)
	}
	if err != nil {
		return nil, err
	}
	return u, nil
}

// syncedInformer is the informer CollectParams asks whether it has
// synced; the watch cache always has. It has no other method.
type syncedInformer struct{ cache.SharedIndexInformer }

func (syncedInformer) HasSynced() bool { return true }

// authz is the CEL authorizer's view of the server's authorization: the
// same decisions as for requests (RBAC), for the user of the check (the
// request's); the server's own writes are allowed everything, as they are
// everywhere (auth.Authorizer).
type authz struct {
	authorized func(u *auth.User, attrs auth.Attributes) (bool, string)
}

func (z authz) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	var u *auth.User
	switch info := a.GetUser().(type) {
	case *serverUser, nil:
	default:
		u = &auth.User{Name: info.GetName(), UID: info.GetUID(), Groups: info.GetGroups(), Extra: info.GetExtra()}
	}
	return auth.Authorizer(u, z.authorized).Authorize(ctx, a)
}

func gvkOf(apiVersion, kind string) (schema.GroupVersionKind, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	return gv.WithKind(kind), err
}
