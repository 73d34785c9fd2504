package access

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/mirror"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// Run feeds the index from mirrors of the RBAC resources, and keeps
// aggregated ClusterRoles' rules current, until ctx ends. Synced is closed
// once each resource was listed.
func (a *Access) Run(ctx context.Context) {
	x := a.index
	var wg sync.WaitGroup
	wg.Go(func() {
		mirror.RunAll(ctx, func() { close(a.synced) },
			feed(a, "roles", x.SetRole, x.DeleteRole),
			feed(a, "clusterroles", x.SetClusterRole, func(_, name string) { x.DeleteClusterRole(name) }),
			feed(a, "rolebindings", x.SetRoleBinding, x.DeleteRoleBinding),
			feed(a, "clusterrolebindings", x.SetClusterRoleBinding, func(_, name string) { x.DeleteClusterRoleBinding(name) }))
	})
	wg.Go(func() { a.aggregate(ctx) })
	wg.Wait()
}

// feed is the mirror of one RBAC resource, whose objects enter the index
// with set and leave it with del.
func feed[E any, T interface {
	*E
	metav1.Object
}](a *Access, plural string, set func(T), del func(namespace, name string)) *mirror.Mirror[T] {
	res, ok := a.cfg.Registry.Get(schema.GroupVersionResource{Group: registry.RBACGroup, Version: "v1", Resource: plural})
	if !ok {
		panic("access: " + plural + " not served")
	}
	return mirror.New(a.objects, mirror.Config[T]{Resource: res, Log: a.cfg.Log, Decode: mirror.Convert[E, T],
		Apply: func(changes []mirror.Change[T]) {
			for _, c := range changes {
				if c.Type == objects.Deleted {
					del(c.Value.GetNamespace(), c.Value.GetName())
				} else {
					set(c.Value)
				}
			}
			a.changedNow()
		}})
}
