package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// defaultNamespaces exist on every server, as in Kubernetes.
var defaultNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

// Namespaces is the life of namespaces.
type Namespaces struct{ *env }

func (n *Namespaces) resource() *registry.Resource { return n.env.resource("", "namespaces") }

// bootstrap creates the default namespaces that do not exist yet.
func (n *Namespaces) bootstrap(ctx context.Context) error {
	res := n.resource()
	for _, name := range defaultNamespaces {
		obj := &unstructured.Unstructured{Object: map[string]any{}}
		obj.SetAPIVersion("v1")
		obj.SetKind("Namespace")
		obj.SetName(name)
		obj.SetUID(uuid.NewUUID())
		obj.SetCreationTimestamp(metav1.NewTime(time.Now().UTC().Truncate(time.Second)))
		res.Lifecycle.PrepareCreate(obj) // phase, spec finalizer and name label
		b, err := objects.ToStorage(obj)
		if err != nil {
			return err
		}
		if _, err := n.store.Create(ctx, res.Key("", name), b); err != nil && !errors.Is(err, storage.ErrExists) {
			return err
		}
	}
	return nil
}

// deletionStarted waits (up to a second) for the namespaces' watch cache
// to see the deletion mark written at rev: creates check the cache.
func (n *Namespaces) deletionStarted(ctx context.Context, res *registry.Resource, rev int64) {
	if c := n.objects.Caches().For(res); c != nil {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_ = c.WaitFor(wctx, rev) // at worst a create slips in, and is drained
	}
}

// checkActive makes sure a namespaced object's namespace exists and is
// not being deleted. Like Kubernetes' NamespaceLifecycle admission it
// trusts the namespaces' watch cache, and asks etcd only when the cache
// does not (yet) have the namespace.
func (n *Namespaces) checkActive(ctx context.Context, ns, name string, res *registry.Resource) error {
	nsRes := n.resource()
	if c := n.objects.Caches().For(nsRes); c != nil {
		if o, _, ok := c.Get(nsRes.Key("", ns)); ok {
			return namespaceState(res, ns, name, o.Fields["status.phase"] == "Terminating")
		}
	}
	obj, err := n.objects.Get(ctx, &objects.Request{Verb: "get", Resource: nsRes, Name: ns}, nil)
	if err != nil {
		return err
	}
	phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
	return namespaceState(res, ns, name, phase == "Terminating" || obj.GetDeletionTimestamp() != nil)
}

// namespaceState is nil, or Kubernetes' 403 for new content of name in
// a terminating namespace, with the NamespaceTerminating cause clients
// look for (client-go's HasStatusCause: controllers stop retrying).
func namespaceState(res *registry.Resource, ns, name string, terminating bool) error {
	if !terminating {
		return nil
	}
	err := apierrors.NewForbidden(gr(res), name, fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
		Type: corev1.NamespaceTerminatingCause, Message: fmt.Sprintf("namespace %s is being terminated", ns), Field: "metadata.namespace",
	})
	return err
}

func isNamespaceResource(res *registry.Resource) bool {
	return res.Plural == "namespaces" && res.Group == ""
}

// The life of a namespace, as in Kubernetes: a new one gets the
// "kubernetes" spec finalizer; a DELETE makes it Terminating (a
// deletionTimestamp); the garbage collector (package gc, through
// gc/runner), after server.Config.NamespaceDeletionDelay (objwatch serve:
// 5 s, as Kubernetes' namespace controller), then deletes its content
// through the API, so that the
// content's own finalizers are waited for, and once it is empty removes
// the "kubernetes" finalizer and deletes the namespace when no finalizer
// is left. Only /finalize changes spec.finalizers. What a namespace adds
// to the generic deletion is its registry.Lifecycle.

// drain starts the deletion of every object in namespace ns that
// is not being deleted yet (in the background, as Kubernetes' namespace
// controller does) and returns how many objects are left in it. It reports
// what is left in the namespace's status conditions, with Kubernetes'
// types and messages (NamespaceContentRemaining, NamespaceFinalizersRemaining),
// which is what kubectl describe shows of a namespace stuck terminating.
func (n *Namespaces) drain(ctx context.Context, ns string) (int64, error) {
	var left int64
	var remaining []string         // "configmaps. has 2 resource instances"
	finalizers := map[string]int{} // finalizer -> objects held by it
	seen := map[string]bool{}
	for _, res := range n.registry.Resources() {
		if !res.Namespaced || seen[res.StoragePrefix] {
			continue
		}
		seen[res.StoragePrefix] = true
		// Counting first skips the lists of the many resources a
		// namespace holds none of (and so does not start their
		// on-demand caches).
		if count, err := n.store.Count(ctx, res.Prefix(ns)); err != nil {
			return 0, apistatus.Storage(err, gr(res), "")
		} else if count == 0 {
			continue
		}
		items, _, err := n.listAll(ctx, res, ns)
		if err != nil {
			return 0, err
		}
		held, err := n.deleteContent(ctx, res, items)
		if err != nil {
			return 0, err
		}
		for f, c := range held {
			finalizers[f] += c
		}
		count, err := n.store.Count(ctx, res.Prefix(ns))
		if err != nil {
			return 0, apistatus.Storage(err, gr(res), "")
		}
		if count > 0 {
			remaining = append(remaining, fmt.Sprintf("%s.%s has %d resource instances", res.Plural, res.Group, count))
		}
		left += count
	}
	n.setConditions(ctx, ns, remaining, finalizers)
	return left, nil
}

// drainWorkers bounds the deletes one drain sends at once.
const drainWorkers = 8

// deleteContent starts the deletion (in the background, conditional on
// each uid) of the items not being deleted yet, drainWorkers at a time,
// and counts the finalizers holding those that remain.
func (e *env) deleteContent(ctx context.Context, res *registry.Resource, items []*unstructured.Unstructured) (map[string]int, error) {
	background := metav1.DeletePropagationBackground
	var mu sync.Mutex
	held := map[string]int{}
	hold := func(obj *unstructured.Unstructured) {
		mu.Lock()
		defer mu.Unlock()
		for _, f := range obj.GetFinalizers() {
			held[f]++
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(drainWorkers)
	for _, it := range items {
		if it.GetDeletionTimestamp() != nil {
			hold(it)
			continue
		}
		g.Go(func() error {
			uid := it.GetUID()
			opts := &metav1.DeleteOptions{PropagationPolicy: &background, Preconditions: &metav1.Preconditions{UID: &uid}}
			req := &objects.Request{Actor: "system:serviceaccount:kube-system:namespace-controller", Verb: "delete", Resource: res, Namespace: it.GetNamespace(), Name: it.GetName()}
			out, err := e.objects.Delete(gctx, req, opts)
			switch {
			case apierrors.IsNotFound(err) || err != nil && objects.UIDChanged(err):
			case err != nil:
				return err
			case !out.Deleted:
				hold(out.Object)
			}
			return nil
		})
	}
	return held, g.Wait()
}

// setConditions records in a terminating namespace's status what
// content and which finalizers are left. A failure only loses the report.
func (n *Namespaces) setConditions(ctx context.Context, ns string, remaining []string, finalizers map[string]int) {
	content := namespaceCondition("NamespaceContentRemaining", "ContentRemoved", "All content successfully removed")
	if len(remaining) > 0 {
		slices.Sort(remaining)
		content = namespaceCondition("NamespaceContentRemaining", "SomeResourcesRemain", "Some resources are remaining: "+strings.Join(remaining, ", "))
	}
	held := namespaceCondition("NamespaceFinalizersRemaining", "ContentHasNoFinalizers", "All content-preserving finalizers finished")
	if len(finalizers) > 0 {
		var parts []string
		for f, n := range finalizers {
			parts = append(parts, fmt.Sprintf("%s in %d resource instances", f, n))
		}
		slices.Sort(parts)
		held = namespaceCondition("NamespaceFinalizersRemaining", "SomeFinalizersRemain", "Some content in the namespace has finalizers remaining: "+strings.Join(parts, ", "))
	}
	res := n.resource()
	err := n.update(ctx, res, "", ns, "status", func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
		for _, c := range []map[string]any{content, held} {
			conds = registry.SetCondition(conds, c)
		}
		unstructured.SetNestedSlice(cur.Object, conds, "status", "conditions")
		cur.SetResourceVersion("")
		return cur, nil
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		n.log.Warn("namespace: set status conditions", "namespace", ns, "err", err)
	}
}

// namespaceCondition is a condition that is true while something is left
// (reason and message say what) and false once nothing is.
func namespaceCondition(typ, reason, message string) map[string]any {
	status := "True"
	if reason == "ContentRemoved" || reason == "ContentHasNoFinalizers" {
		status = "False"
	}
	return map[string]any{"type": typ, "status": status, "reason": reason, "message": message}
}
