package endpoints

import (
	"context"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// requestInfo is what a resource URL names.
type requestInfo struct {
	gvr         schema.GroupVersionResource
	namespace   string
	name        string
	subresource string
	verb        string
	// namespaceSet: the URL had /namespaces/<ns>/ before the resource.
	namespaceSet bool
}

type infoKey struct{}

// parsed is a request's parsed path, kept in its context (withInfo).
type parsed struct {
	info requestInfo
	ok   bool
}

// withInfo parses r's path once for the whole chain of filters and the
// router (resourceInfo reads it back).
func withInfo(r *http.Request) *http.Request {
	info, ok := parseResourcePath(r)
	return r.WithContext(context.WithValue(r.Context(), infoKey{}, &parsed{info, ok}))
}

// resourceInfo is parseResourcePath's answer for r, parsed once per
// request when a filter called withInfo.
func resourceInfo(r *http.Request) (requestInfo, bool) {
	if p, ok := r.Context().Value(infoKey{}).(*parsed); ok {
		return p.info, p.ok
	}
	return parseResourcePath(r)
}

// parseResourcePath parses /api/v1/... and /apis/<group>/<version>/...
// resource paths. ok is false for paths that are not resource requests.
func parseResourcePath(r *http.Request) (requestInfo, bool) {
	parts := splitPath(r.URL.Path)
	var info requestInfo
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		info.gvr.Version = parts[1]
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		info.gvr.Group, info.gvr.Version = parts[1], parts[2]
		parts = parts[3:]
	default:
		return info, false
	}
	watchPath := false
	if parts[0] == "watch" {
		watchPath = true
		parts = parts[1:]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) != 2 {
		// /namespaces/<ns>/<resource>...; but /namespaces/<name>/status or
		// /finalize address the namespace object itself.
		if len(parts) == 3 && (parts[2] == "status" || parts[2] == "finalize") {
			info.gvr.Resource, info.name, info.subresource = "namespaces", parts[1], parts[2]
		} else {
			info.namespace, info.namespaceSet = parts[1], true
			parts = parts[2:]
		}
	}
	if info.gvr.Resource == "" {
		if len(parts) == 0 || len(parts) > 3 {
			return info, false
		}
		info.gvr.Resource = parts[0]
		if len(parts) > 1 {
			info.name = parts[1]
		}
		if len(parts) > 2 {
			info.subresource = parts[2]
		}
	}
	info.verb = verbOf(r, info.name != "", watchPath)
	return info, true
}

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

func verbOf(r *http.Request, named, watchPath bool) string {
	if watchPath {
		return "watch" // whatever the method, as kube-apiserver reads it
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if !named && queryIsWatch(r.URL.Query()) {
			return "watch"
		}
		if named {
			return "get"
		}
		return "list"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if named {
			return "delete"
		}
		return "deletecollection"
	}
	return strings.ToLower(r.Method)
}
