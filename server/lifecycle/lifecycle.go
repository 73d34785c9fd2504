// Package lifecycle is what the server does around the generic object
// service for particular resources, as Kubernetes' controllers and
// admission plugins do, one type per concern:
//
//   - CRDs: custom resource definitions' names accepted, Established,
//     served (the registry follows the stored definitions), and their
//     objects removed before a definition goes (crds.go);
//   - Namespaces: the default ones created at start, no new content in a
//     terminating one, its content deleted before it goes (namespaces.go);
//   - ServiceIPs: Services' cluster IPs allocated and released, webhook
//     Services resolved (serviceips.go);
//   - ServiceAccountKeys: the token keys shared by the servers of an etcd
//     (sakeys.go);
//   - StorageReadiness: the readyz check of the watch caches
//     (storageready.go).
//
// Lifecycle puts the first three together: the object service's hooks
// (hooks.go) and, for the garbage collector (package gc/runner), the
// containers whose deletion waits for their content (containers.go).
//
// It plugs into the object service only at its named places (Hooks:
// Admit and Written) and writes only through it, except the records no
// API serves (cluster IP claims, service-account keys), the default
// objects created before anything is served, and a definition's status,
// which several servers race to write conditionally on one revision.
//
// # Concurrency
//
// The types' methods are safe for concurrent use. The Run methods block
// until their context ends; the caller owns those goroutines.
package lifecycle

import (
	"context"
	"errors"
	"log/slog"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/server/webhookclient"
	"github.com/objwatch/objwatch/storage"
)

// Config configures a Lifecycle.
type Config struct {
	Registry *registry.Registry
	Storage  storage.Interface
	Log      *slog.Logger
	// ServiceClusterIPRange is the IPv4 CIDR cluster IPs come from.
	ServiceClusterIPRange string
	// APIServerPort is the target port of the default/kubernetes service.
	APIServerPort int
	// KindsChanged, if set, is called when the served custom resources
	// changed (the garbage collector's gc/runner.Runner.KindsChanged).
	KindsChanged func()
}

// Lifecycle holds the resource-specific behaviour. Create it with New,
// give its Hooks to the object service, then Use that service.
type Lifecycle struct {
	env        *env
	Namespaces *Namespaces
	CRDs       *CRDs
	ServiceIPs *ServiceIPs
}

// env is what every part reads and writes through.
type env struct {
	registry *registry.Registry
	store    storage.Interface
	log      *slog.Logger
	objects  *objects.Service // set by Use
}

// New returns a Lifecycle; it starts nothing.
func New(cfg Config) (*Lifecycle, error) {
	if cfg.Registry == nil || cfg.Storage == nil || cfg.Log == nil {
		return nil, errors.New("lifecycle: incomplete config")
	}
	serviceRange, err := parseServiceRange(cfg.ServiceClusterIPRange)
	if err != nil {
		return nil, err
	}
	e := &env{registry: cfg.Registry, store: cfg.Storage, log: cfg.Log}
	kindsChanged := cfg.KindsChanged
	if kindsChanged == nil {
		kindsChanged = func() {}
	}
	return &Lifecycle{
		env:        e,
		Namespaces: &Namespaces{env: e},
		CRDs:       &CRDs{env: e, kindsChanged: kindsChanged},
		ServiceIPs: &ServiceIPs{env: e, serviceRange: serviceRange, apiServerPort: cfg.APIServerPort, recreate: make(chan struct{}, 1)},
	}, nil
}

// Use sets the object service the lifecycle writes through, and the
// client that calls CRDs' conversion webhooks (nil: a CRD whose
// conversion strategy is Webhook is not served). Call it once, before
// anything else but Hooks.
func (l *Lifecycle) Use(s *objects.Service, conversion *webhookclient.Client) {
	l.env.objects, l.CRDs.webhooks = s, conversion
}

// Bootstrap creates the default namespaces and the default/kubernetes
// service that do not exist yet. Several servers may do it at once: an
// existing object is left alone.
func (l *Lifecycle) Bootstrap(ctx context.Context) error {
	if err := l.Namespaces.bootstrap(ctx); err != nil {
		return err
	}
	return l.ServiceIPs.bootstrapKubernetesService(ctx)
}

func (e *env) resource(group, resource string) *registry.Resource {
	res, _ := e.registry.Get(schema.GroupVersionResource{Group: group, Version: "v1", Resource: resource})
	return res
}

// update is an update by the server itself through the object service;
// a conflict is retried unless mutate pins a resourceVersion.
func (e *env) update(ctx context.Context, res *registry.Resource, ns, name, subresource string, mutate objects.Mutation) error {
	req := &objects.Request{Verb: "update", Resource: res, Namespace: ns, Name: name, Subresource: subresource}
	_, err := e.objects.Update(ctx, req, objects.WriteOptions{}, mutate)
	return err
}

// listAll lists every object of res in ns ("" for all) with a quorum
// read, and the revision read at.
func (e *env) listAll(ctx context.Context, res *registry.Resource, ns string) ([]*unstructured.Unstructured, int64, error) {
	return e.objects.ListAll(ctx, &objects.Request{Verb: "list", Resource: res, Namespace: ns}, nil)
}
