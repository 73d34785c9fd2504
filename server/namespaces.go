package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// defaultNamespaces exist on every server, as in Kubernetes.
var defaultNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

func (s *Server) namespaceResource() *registry.Resource {
	res, _ := s.registry.Get(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"})
	return res
}

// bootstrap creates the default namespaces that do not exist yet. Several
// servers may do it at once: an existing namespace is left alone.
func (s *Server) bootstrap(ctx context.Context) error {
	res := s.namespaceResource()
	for _, name := range defaultNamespaces {
		obj := &unstructured.Unstructured{Object: map[string]any{}}
		obj.SetAPIVersion("v1")
		obj.SetKind("Namespace")
		obj.SetName(name)
		obj.SetUID(uuid.NewUUID())
		obj.SetCreationTimestamp(metav1.NewTime(time.Now().UTC().Truncate(time.Second)))
		obj.SetLabels(map[string]string{"kubernetes.io/metadata.name": name})
		unstructured.SetNestedField(obj.Object, "Active", "status", "phase")
		b, err := toStorage(obj)
		if err != nil {
			return err
		}
		if _, err := s.store.Create(ctx, res.Key("", name), b); err != nil && !errors.Is(err, storage.ErrExists) {
			return err
		}
	}
	return nil
}

// finishNamespace deletes everything in a terminating namespace, then the
// namespace itself. Full namespace lifecycle (a controller that resumes
// interrupted deletions, finalizers on contents) comes with the object
// lifecycle work; this handles the common synchronous case.
func (s *Server) finishNamespace(ctx context.Context, res *registry.Resource, ns *unstructured.Unstructured) (*unstructured.Unstructured, int, error) {
	seen := map[string]bool{}
	for _, r := range s.registry.Resources() {
		if !r.Namespaced || seen[r.StoragePrefix] {
			continue
		}
		seen[r.StoragePrefix] = true
		if _, err := s.store.DeletePrefix(ctx, r.Prefix(ns.GetName())); err != nil {
			return nil, 0, storageError(err, s.gr(r), "")
		}
	}
	for attempt := 0; attempt < 10; attempt++ {
		_, kv, err := s.getCurrent(ctx, res, "", ns.GetName())
		if apierrors.IsNotFound(err) {
			return ns, http.StatusOK, nil
		}
		if err != nil {
			return nil, 0, err
		}
		if _, err := s.store.Delete(ctx, kv.Key, kv.ModRevision); err == nil || errors.Is(err, storage.ErrNotFound) {
			return ns, http.StatusOK, nil
		} else if !errors.Is(err, storage.ErrConflict) {
			return nil, 0, storageError(err, s.gr(res), ns.GetName())
		}
	}
	return nil, 0, apierrors.NewConflict(s.gr(res), ns.GetName(), errors.New(conflictMessage))
}
