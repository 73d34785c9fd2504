// Package lifecycle is what the server does around the generic object
// service for particular resources, as Kubernetes' controllers and
// admission plugins do:
//
//   - custom resource definitions: names accepted, Established, served
//     (the registry follows the stored definitions), and their objects
//     removed before a definition goes (crds.go);
//   - namespaces: the default ones created at start, no new content in a
//     terminating one, its content deleted before it goes (namespaces.go);
//   - Services: cluster IPs allocated and released (serviceips.go);
//   - the garbage collector's backend, and the lease that elects the one
//     server running it (gcbackend.go, elect.go).
//
// It plugs into the object service only at its named places (Hooks:
// Admit and Written) and writes only through it, except the records no
// API serves (cluster IP claims, the collector's lease), the default
// objects created before anything is served, and a definition's status,
// which several servers race to write conditionally on one revision.
//
// # Concurrency
//
// A Lifecycle's methods are safe for concurrent use. RunCRDs and RunGC
// block until their context ends; the caller owns those goroutines.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/server/webhook"
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
	// GCWorkers is how many objects the garbage collector processes at once.
	GCWorkers int
	// GCLeaseDuration is the duration of the collector's lease (negative:
	// no election, this server always runs it).
	GCLeaseDuration time.Duration
}

// Lifecycle holds the resource-specific behaviour. Create it with New,
// give its Hooks to the object service, then Use that service.
type Lifecycle struct {
	cfg      Config
	registry *registry.Registry
	store    storage.Interface
	objects  *objects.Service
	gc       *gcRunner
	// webhooks calls CRDs' conversion webhooks (see UseWebhooks).
	webhooks *webhook.Client

	// crdTerminating holds the names of the custom resource definitions
	// being deleted (see checkCRDActive).
	crdTerminating sync.Map

	serviceRange netip.Prefix // see serviceips.go
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
	l := &Lifecycle{cfg: cfg, registry: cfg.Registry, store: cfg.Storage, serviceRange: serviceRange}
	l.gc = newGCRunner(l)
	return l, nil
}

// Use sets the object service the lifecycle writes through. Call it once,
// before anything else but Hooks.
func (l *Lifecycle) Use(s *objects.Service) { l.objects = s }

// UseWebhooks gives the lifecycle the client that calls CRDs' conversion
// webhooks; call it before RunCRDs. Without one, a CRD whose conversion
// strategy is Webhook is not served.
func (l *Lifecycle) UseWebhooks(c *webhook.Client) { l.webhooks = c }

// Hooks are what the lifecycle adds to every request of the object
// service: before a write, a namespace's and a definition's state is
// checked and a Service's cluster IP allocated; after one, the start of a
// namespace's or definition's deletion is made visible at once and a
// deleted Service's IP released.
func (l *Lifecycle) Hooks() objects.Hooks {
	return objects.Hooks{
		Admit:   []func(context.Context, *objects.Request, *unstructured.Unstructured, *unstructured.Unstructured) (func(), error){l.admit},
		Written: []func(context.Context, objects.Write){l.written},
	}
}

func (l *Lifecycle) admit(ctx context.Context, req *objects.Request, obj, _ *unstructured.Unstructured) (undo func(), err error) {
	if req.Verb != "create" {
		return nil, nil
	}
	res := req.Resource
	if res.Namespaced {
		if err := l.checkNamespaceActive(ctx, obj.GetNamespace(), res); err != nil {
			return nil, err
		}
	}
	if res.Custom {
		if err := l.checkCRDActive(res); err != nil {
			return nil, err
		}
	}
	if req.DryRun {
		return nil, nil
	}
	return l.allocate(ctx, res, obj)
}

func (l *Lifecycle) written(ctx context.Context, w objects.Write) {
	res := w.Request.Resource
	switch {
	case w.New == nil:
		l.released(ctx, res, w.Old)
	case w.New.GetDeletionTimestamp() != nil && (w.Old == nil || w.Old.GetDeletionTimestamp() == nil):
		l.deletionStarted(ctx, res, w.New, w.Revision)
	}
}

// deletionStarted makes this server refuse new content of a namespace or
// custom resource definition whose deletion it just started, before the
// DELETE is answered: creates check the namespaces' watch cache, so it
// waits (up to a second) for the cache to see the mark, and it marks the
// definition terminating at once. Other servers learn of it from their
// watches, moments later, as in Kubernetes.
func (l *Lifecycle) deletionStarted(ctx context.Context, res *registry.Resource, obj *unstructured.Unstructured, rev int64) {
	switch {
	case isNamespaceResource(res):
		if c := l.objects.Caches().For(res); c != nil {
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_ = c.WaitFor(wctx, rev) // at worst a create slips in, and is drained
		}
	case isCRDResource(res):
		l.crdTerminating.Store(obj.GetName(), true)
	}
}

// checkNamespaceActive makes sure a namespaced object's namespace exists
// and is not being deleted. Like Kubernetes' NamespaceLifecycle admission it
// trusts the namespaces' watch cache, and asks etcd only when the cache does
// not (yet) have the namespace.
func (l *Lifecycle) checkNamespaceActive(ctx context.Context, ns string, res *registry.Resource) error {
	nsRes := l.namespaceResource()
	if c := l.objects.Caches().For(nsRes); c != nil {
		if o, _, ok := c.Get(nsRes.Key("", ns)); ok {
			return namespaceState(res, ns, o.Fields["status.phase"] == "Terminating")
		}
	}
	obj, err := l.objects.Get(ctx, &objects.Request{Verb: "get", Resource: nsRes, Name: ns}, nil)
	if err != nil {
		return err
	}
	phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
	return namespaceState(res, ns, phase == "Terminating" || obj.GetDeletionTimestamp() != nil)
}

func namespaceState(res *registry.Resource, ns string, terminating bool) error {
	if terminating {
		return apierrors.NewForbidden(gr(res), "", fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
	}
	return nil
}

func isNamespaceResource(res *registry.Resource) bool {
	return res.Plural == "namespaces" && res.Group == ""
}

func gr(res *registry.Resource) schema.GroupResource {
	return schema.GroupResource{Group: res.Group, Resource: res.Plural}
}

// update is an update by the server itself through the object service;
// a conflict is retried unless mutate pins a resourceVersion.
func (l *Lifecycle) update(ctx context.Context, res *registry.Resource, ns, name, subresource string, mutate objects.Mutation) error {
	req := &objects.Request{Verb: "update", Resource: res, Namespace: ns, Name: name, Subresource: subresource}
	_, err := l.objects.Update(ctx, req, objects.WriteOptions{}, mutate)
	return err
}

// listAll lists every object of res in ns ("" for all) with a quorum
// read, and the revision read at.
func (l *Lifecycle) listAll(ctx context.Context, res *registry.Resource, ns string) ([]*unstructured.Unstructured, int64, error) {
	return l.objects.ListAll(ctx, &objects.Request{Verb: "list", Resource: res, Namespace: ns}, nil)
}
