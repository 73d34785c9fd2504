package endpoints

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// kubeRequestInfo is the oracle of parseResourcePath: kube-apiserver's own
// request info parser.
var kubeRequestInfo = &request.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// FuzzParseResourcePath checks the resource path parser against
// kube-apiserver's. Where they differ on purpose the oracle's answer is
// mapped first: objwatch names no namespace for a namespace object itself
// (Kubernetes repeats its name as the namespace), it does not take a name
// from a metadata.name field selector, and paths it does not serve
// (more than resource/name/subresource) are not resource requests.
func FuzzParseResourcePath(f *testing.F) {
	for _, s := range []string{
		"/api/v1/namespaces/default/configmaps", "/api/v1/namespaces/default/configmaps/a",
		"/api/v1/namespaces/ns/status", "/api/v1/namespaces/ns/finalize", "/api/v1/namespaces/ns",
		"/api/v1/namespaces", "/apis/apps/v1/deployments", "/apis/example.com/v1/namespaces/x/widgets/w/status",
		"/api/v1/watch/namespaces/default/configmaps", "/api/v1/watch/configmaps", "/apis/g/v1/watch/namespaces/a/r/n",
		"/api/v1/namespaces//configmaps", "/api//v1/x", "/apis/g", "/api/v1/watch", "/api/v1/namespaces/a/b/c/d/e",
		"/api/v1/configmaps?watch=True", "/api/v1/configmaps/x?watch=1",
	} {
		for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
			f.Add(m, s)
		}
	}
	f.Fuzz(func(t *testing.T, method, target string) {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return
		}
		r := &http.Request{Method: method, URL: u}
		got, ok := parseResourcePath(r)
		want, err := kubeRequestInfo.NewRequestInfo(r)
		if err != nil || !want.IsResourceRequest || len(want.Parts) > 3 || len(want.Parts) == 0 {
			if ok && err == nil && want.IsResourceRequest {
				t.Fatalf("parseResourcePath(%s %s) = %+v, kube-apiserver: parts %q", method, target, got, want.Parts)
			}
			return
		}
		switch method {
		case "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD":
		default:
			return // objwatch answers 405 for other methods before parsing matters
		}
		if !ok {
			t.Fatalf("parseResourcePath(%s %s) is not a resource request; kube-apiserver: %+v", method, target, want)
		}
		ns, name := want.Namespace, want.Name
		if addressesNamespaceObject(u.Path) {
			ns = ""
		}
		if len(want.Parts) < 2 {
			name = "" // a name from a field selector
		}
		verb := want.Verb
		if got.gvr.Group != want.APIGroup || got.gvr.Version != want.APIVersion || got.gvr.Resource != want.Resource ||
			got.namespace != ns || got.name != name || got.subresource != want.Subresource || got.verb != verb {
			t.Fatalf("parseResourcePath(%s %s) = %+v\nkube-apiserver: group %q version %q resource %q ns %q name %q sub %q verb %q",
				method, target, got, want.APIGroup, want.APIVersion, want.Resource, ns, name, want.Subresource, verb)
		}
	})
}

// addressesNamespaceObject reports whether a resource path names a
// namespace object itself (…/namespaces/NAME, …/namespaces/NAME/status or
// /finalize), in any group: kube-apiserver then repeats the name as the
// request's namespace, objwatch names none.
func addressesNamespaceObject(path string) bool {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return false
	}
	if len(parts) > 0 && parts[0] == "watch" {
		parts = parts[1:]
	}
	if len(parts) < 2 || parts[0] != "namespaces" {
		return false
	}
	return len(parts) == 2 || len(parts) == 3 && (parts[2] == "status" || parts[2] == "finalize")
}
