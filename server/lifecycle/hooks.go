package lifecycle

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

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
		if err := l.Namespaces.checkActive(ctx, obj.GetNamespace(), obj.GetName(), res); err != nil {
			return nil, err
		}
	}
	if res.Custom {
		if err := l.CRDs.checkActive(res); err != nil {
			return nil, err
		}
	}
	return l.ServiceIPs.allocate(ctx, res, obj, req.DryRun)
}

func (l *Lifecycle) written(ctx context.Context, w objects.Write) {
	res := w.Request.Resource
	switch {
	case w.New == nil:
		l.ServiceIPs.released(ctx, res, w.Old)
	case w.New.GetDeletionTimestamp() != nil && (w.Old == nil || w.Old.GetDeletionTimestamp() == nil):
		// This server refuses new content of a namespace or definition
		// whose deletion it just started before the DELETE is answered;
		// other servers learn of it from their watches, moments later,
		// as in Kubernetes.
		switch {
		case isNamespaceResource(res):
			l.Namespaces.deletionStarted(ctx, res, w.Revision)
		case isCRDResource(res):
			l.CRDs.terminating.Store(w.New.GetName(), true)
		}
	}
}

func gr(res *registry.Resource) schema.GroupResource {
	return schema.GroupResource{Group: res.Group, Resource: res.Plural}
}
