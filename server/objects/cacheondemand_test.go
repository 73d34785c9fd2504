package objects_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
)

// TestCacheOnDemand: Start starts the watch caches of the resources that
// are not CacheOnDemand; such a resource's cache starts at its first list.
func TestCacheOnDemand(t *testing.T) {
	onDemand := &registry.Resource{Group: "example.com", Version: "v1", Plural: "widgets", Singular: "widget", Kind: "Widget",
		Namespaced: true, CacheOnDemand: true, StoragePrefix: registry.StoragePrefix("example.com", "widgets")}
	reg := registry.New(onDemand)
	s, err := objects.New(objects.Config{Storage: etcdtest.Start(t), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	s.Caches().Start()
	cms, _ := reg.Get(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	if !objects.CacheStarted(s, cms) {
		t.Error("configmaps' cache did not start with Start")
	}
	if objects.CacheStarted(s, onDemand) {
		t.Fatal("a CacheOnDemand resource's cache started with Start")
	}
	if _, err := s.List(context.Background(), &objects.Request{Verb: "list", Resource: onDemand, Namespace: "default"}, &internalversion.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if !objects.CacheStarted(s, onDemand) {
		t.Error("a CacheOnDemand resource's cache did not start at its first list")
	}
}
