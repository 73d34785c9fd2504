package access

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/rbac"
	"github.com/objwatch/objwatch/server/registry"
)

// feedWatchTimeout is how long one watch of an RBAC resource lasts before
// it is started again (from a fresh list).
const feedWatchTimeout = 10 * time.Minute

// kind is how one RBAC resource's objects enter and leave the index.
type kind struct {
	plural string
	set    func(x *rbac.Index, b []byte, u runtime.Object) error
	delete func(x *rbac.Index, namespace, name string)
}

func decodeInto[T any](b []byte, u runtime.Object) (*T, error) {
	var v T
	if b != nil {
		return &v, json.Unmarshal(b, &v)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(u)
	if err != nil {
		return nil, err
	}
	return &v, runtime.DefaultUnstructuredConverter.FromUnstructured(m, &v)
}

var kinds = []kind{
	{"roles", func(x *rbac.Index, b []byte, u runtime.Object) error {
		r, err := decodeInto[rbacv1.Role](b, u)
		if err == nil {
			x.SetRole(r)
		}
		return err
	}, func(x *rbac.Index, ns, name string) { x.DeleteRole(ns, name) }},
	{"clusterroles", func(x *rbac.Index, b []byte, u runtime.Object) error {
		r, err := decodeInto[rbacv1.ClusterRole](b, u)
		if err == nil {
			x.SetClusterRole(r)
		}
		return err
	}, func(x *rbac.Index, _, name string) { x.DeleteClusterRole(name) }},
	{"rolebindings", func(x *rbac.Index, b []byte, u runtime.Object) error {
		r, err := decodeInto[rbacv1.RoleBinding](b, u)
		if err == nil {
			x.SetRoleBinding(r)
		}
		return err
	}, func(x *rbac.Index, ns, name string) { x.DeleteRoleBinding(ns, name) }},
	{"clusterrolebindings", func(x *rbac.Index, b []byte, u runtime.Object) error {
		r, err := decodeInto[rbacv1.ClusterRoleBinding](b, u)
		if err == nil {
			x.SetClusterRoleBinding(r)
		}
		return err
	}, func(x *rbac.Index, _, name string) { x.DeleteClusterRoleBinding(name) }},
}

// Run feeds the index from watches of the RBAC resources, and keeps
// aggregated ClusterRoles' rules current, until ctx ends. Synced is closed
// once each resource was listed.
func (a *Access) Run(ctx context.Context) {
	var wg sync.WaitGroup
	var left atomic.Int32
	left.Store(int32(len(kinds)))
	for _, k := range kinds {
		res, ok := a.cfg.Registry.Get(schema.GroupVersionResource{Group: registry.RBACGroup, Version: "v1", Resource: k.plural})
		if !ok {
			panic("access: " + k.plural + " not served")
		}
		var once sync.Once
		wg.Go(func() {
			a.follow(ctx, res, k, func() {
				once.Do(func() {
					if left.Add(-1) == 0 {
						close(a.synced)
					}
				})
			})
		})
	}
	wg.Go(func() { a.aggregate(ctx) })
	wg.Wait()
}

// follow keeps the index's objects of one kind current: a watch with its
// initial events, again after every failure.
func (a *Access) follow(ctx context.Context, res *registry.Resource, k kind, listed func()) {
	known := map[[2]string]bool{} // namespace, name
	var initial map[[2]string]bool
	inInitial := true
	a.objects.Follow(ctx, res, feedWatchTimeout, func() {
		initial, inInitial = map[[2]string]bool{}, true
	}, func(it objects.Item) error {
		switch {
		case it.Type == objects.Bookmark && it.InitialEnd:
			for key := range known {
				if !initial[key] {
					k.delete(a.index, key[0], key[1])
					delete(known, key)
				}
			}
			inInitial = false
			a.changedNow()
			listed()
			return nil
		case it.Type == objects.Bookmark:
			return nil
		}
		u := it.Object
		if u == nil {
			var err error
			if u, err = objects.Decode(it.JSON); err != nil {
				return err
			}
		}
		key := [2]string{u.GetNamespace(), u.GetName()}
		if it.Type == objects.Deleted {
			k.delete(a.index, key[0], key[1])
			delete(known, key)
		} else {
			var b []byte
			if it.Object == nil {
				b = it.JSON
			}
			if err := k.set(a.index, b, u); err != nil {
				a.cfg.Log.Error("access: decode "+k.plural, "name", key, "err", err)
				return nil
			}
			known[key] = true
			if inInitial {
				initial[key] = true
			}
		}
		if !inInitial {
			a.changedNow()
		}
		return nil
	})
}
