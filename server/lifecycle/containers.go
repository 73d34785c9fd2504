package lifecycle

import (
	"context"
	"errors"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/objwatch/objwatch/server/gc"
	"github.com/objwatch/objwatch/server/registry"
)

// Namespaces and custom resource definitions are the garbage collector's
// containers (gc/runner.Containers): their deletion waits until their
// content is gone, which the collector deletes through Drain.

// Container reports whether the object at key, with metadata m, is a
// container being deleted, and if so which keys are its content.
func (l *Lifecycle) Container(key string, m gc.Meta) (func(string) bool, bool) {
	if !m.Deleting() {
		return nil, false
	}
	res, _, name, ok := l.env.registry.ForKey(key)
	switch {
	case !ok:
	case isNamespaceResource(res):
		return func(k string) bool { return namespaceOfKey(k) == name }, true
	case isCRDResource(res) && m.HasFinalizer(registry.CRDCleanupFinalizer):
		prefix, ok := customResourcePrefix(name)
		return func(k string) bool { return strings.HasPrefix(k, prefix) }, ok
	}
	return nil, false
}

// Drain starts the deletion of the content of the container at key and
// returns how many objects are left.
func (l *Lifecycle) Drain(ctx context.Context, key string) (int64, error) {
	res, _, name, ok := l.env.registry.ForKey(key)
	switch {
	case !ok:
		return 0, nil
	case isNamespaceResource(res):
		return l.Namespaces.drain(ctx, name)
	}
	return l.CRDs.drain(ctx, name)
}

// Finish removes the content finalizer of the emptied container at key if
// its uid is uid.
func (l *Lifecycle) Finish(ctx context.Context, key string, uid types.UID) error {
	res, _, name, ok := l.env.registry.ForKey(key)
	switch {
	case !ok:
		return nil
	case isNamespaceResource(res):
		return l.Namespaces.finish(ctx, name, uid)
	}
	return l.env.finish(ctx, res, name, "", uid, func(obj *unstructured.Unstructured) bool {
		return gc.RemoveFinalizer(obj, registry.CRDCleanupFinalizer)
	})
}

// finish updates the container res/name (through subresource) with
// removeFinalizer if its uid is uid; the update deletes it once no
// finalizer is left. Another object of that name, none, or nothing to
// remove is not an error.
func (e *env) finish(ctx context.Context, res *registry.Resource, name, subresource string, uid types.UID, removeFinalizer func(*unstructured.Unstructured) (changed bool)) error {
	err := e.update(ctx, res, "", name, subresource, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		if cur.GetUID() != uid {
			return nil, errUIDChanged
		}
		if !removeFinalizer(cur) {
			return nil, errUnchanged
		}
		cur.SetResourceVersion("") // not pinned: a conflict is retried
		return cur, nil
	})
	if apierrors.IsNotFound(err) || errors.Is(err, errUIDChanged) || errors.Is(err, errUnchanged) {
		return nil
	}
	return err
}

// errUIDChanged ends an update whose object was replaced by another of
// the same name; errUnchanged one that has nothing to change.
var (
	errUIDChanged = errors.New("another object of that name")
	errUnchanged  = errors.New("nothing to change")
)

// namespaceOfKey returns the namespace of a namespaced object's key
// (registry.Root + group/plural/namespace/name), "" for other keys.
func namespaceOfKey(key string) string {
	parts := strings.Split(strings.TrimPrefix(key, registry.Root), "/")
	if len(parts) != 4 {
		return ""
	}
	return parts[2]
}
