package endpoints

import (
	"net/http"
	"strings"

	"github.com/objwatch/objwatch/server/auth"
)

// authzAttributes returns what r asks to do, as Kubernetes' authorizers see
// it: a resource request's verb, group, resource, subresource, namespace
// and name, or the path and lower-case method of any other request.
func authzAttributes(r *http.Request) auth.Attributes {
	info, ok := resourceInfo(r)
	if !ok {
		return auth.Attributes{Verb: strings.ToLower(r.Method), Path: r.URL.Path}
	}
	a := auth.Attributes{
		ResourceRequest: true, Verb: info.verb, APIGroup: info.gvr.Group, Resource: info.gvr.Resource,
		Subresource: info.subresource, Namespace: info.namespace, Name: info.name,
	}
	if info.gvr.Resource == "namespaces" && info.gvr.Group == "" && info.namespace == "" {
		a.Namespace = info.name // as Kubernetes: a namespace is in itself
	}
	return a
}
