package client

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Resource addresses a kind of object on the server.
type Resource struct {
	GVR        schema.GroupVersionResource
	Namespaced bool
	// Kind, if set, is filled into decoded objects that lack it (list
	// items usually do).
	Kind string
}

// GVK returns the resource's group, version and kind.
func (r Resource) GVK() schema.GroupVersionKind { return r.GVR.GroupVersion().WithKind(r.Kind) }

func (r Resource) String() string {
	if r.GVR.Group == "" {
		return r.GVR.Resource
	}
	return r.GVR.Resource + "." + r.GVR.Group
}

type apiResource struct {
	name, kind string
	namespaced bool
}

// resources returns the discovery document of gv, cached after the first
// successful read; refresh bypasses the cache.
func (r *REST) resources(ctx context.Context, gv schema.GroupVersion, refresh bool) ([]apiResource, error) {
	r.discoveryMu.Lock()
	cached, ok := r.discovery[gv]
	r.discoveryMu.Unlock()
	if ok && !refresh {
		return cached, nil
	}
	path := "/apis/" + gv.Group + "/" + gv.Version
	if gv.Group == "" {
		path = "/api/" + gv.Version
	}
	var list metav1.APIResourceList
	b, err := r.call(ctx, request{method: http.MethodGet, path: path})
	if err == nil {
		err = unmarshal(b, &list)
	}
	if err != nil {
		return nil, fmt.Errorf("discovery %s: %w", gv, err)
	}
	out := make([]apiResource, 0, len(list.APIResources))
	for _, ar := range list.APIResources {
		if strings.Contains(ar.Name, "/") {
			continue // subresource
		}
		out = append(out, apiResource{name: ar.Name, kind: ar.Kind, namespaced: ar.Namespaced})
	}
	r.discoveryMu.Lock()
	r.discovery[gv] = out
	r.discoveryMu.Unlock()
	return out, nil
}

// find looks a resource up in gv's discovery document, re-reading it once
// if it is not there (it may be a new custom resource).
func (r *REST) find(ctx context.Context, gv schema.GroupVersion, match func(apiResource) bool) (apiResource, error) {
	for _, refresh := range []bool{false, true} {
		list, err := r.resources(ctx, gv, refresh)
		if err != nil {
			return apiResource{}, err
		}
		for _, ar := range list {
			if match(ar) {
				return ar, nil
			}
		}
	}
	return apiResource{}, ErrNotFound
}

// Resource resolves gvr through discovery: whether it is namespaced and its
// kind. An unknown resource is an error matching ErrNotFound.
func (r *REST) Resource(ctx context.Context, gvr schema.GroupVersionResource) (Resource, error) {
	ar, err := r.find(ctx, gvr.GroupVersion(), func(ar apiResource) bool { return ar.name == gvr.Resource })
	if err != nil {
		return Resource{}, fmt.Errorf("resource %s: %w", gvr, err)
	}
	return Resource{GVR: gvr, Namespaced: ar.namespaced, Kind: ar.kind}, nil
}

// ResourceFor resolves a kind to its resource through discovery.
func (r *REST) ResourceFor(ctx context.Context, gvk schema.GroupVersionKind) (Resource, error) {
	ar, err := r.find(ctx, gvk.GroupVersion(), func(ar apiResource) bool { return ar.kind == gvk.Kind })
	if err != nil {
		return Resource{}, fmt.Errorf("kind %s: %w", gvk, err)
	}
	return Resource{GVR: gvk.GroupVersion().WithResource(ar.name), Namespaced: ar.namespaced, Kind: ar.kind}, nil
}
