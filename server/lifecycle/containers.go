package lifecycle

import (
	"context"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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

// Finalizer returns how the content finalizer of the emptied container
// at key is removed: a namespace's "kubernetes" spec finalizer through
// /finalize, a definition's cleanup finalizer by an update. The update
// deletes the container once no finalizer is left.
func (l *Lifecycle) Finalizer(key string) (subresource string, remove func(*unstructured.Unstructured) bool, ok bool) {
	res, _, _, ok := l.env.registry.ForKey(key)
	switch {
	case !ok:
		return "", nil, false
	case isNamespaceResource(res):
		return "finalize", func(cur *unstructured.Unstructured) bool {
			fs := registry.NamespaceFinalizers(cur)
			registry.SetNamespaceFinalizers(cur, slices.DeleteFunc(fs, func(f string) bool { return f == registry.NamespaceFinalizer }))
			return true
		}, true
	}
	return "", func(cur *unstructured.Unstructured) bool {
		return gc.RemoveFinalizer(cur, registry.CRDCleanupFinalizer)
	}, true
}

// namespaceOfKey returns the namespace of a namespaced object's key
// (registry.Root + group/plural/namespace/name), "" for other keys.
func namespaceOfKey(key string) string {
	parts := strings.Split(strings.TrimPrefix(key, registry.Root), "/")
	if len(parts) != 4 {
		return ""
	}
	return parts[2]
}
