package endpoints

import (
	"net/http"
	"slices"
	"sort"

	"github.com/munnerz/goautoneg"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/objwatch/objwatch/server/registry"
)

// discovery serves Kubernetes' legacy (unaggregated) discovery documents;
// clients that ask for aggregated discovery fall back to these when the
// response is not the aggregated type. Safe for concurrent use (the
// registry is).
type discovery struct{ registry *registry.Registry }

// DiscoveryAPI serves /api.
func (d *discovery) DiscoveryAPI(w http.ResponseWriter, r *http.Request) {
	writeDiscovery(w, r, groupsAccepted, &metav1.APIVersions{
		TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
		Versions: []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
			{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host},
		},
	})
}

// kube-apiserver's 406s of discovery documents for an Accept header of
// no type it serves them in: its own for /api, /apis and a group's,
// go-restful's for a group version's resources.
const (
	groupsAccepted    = "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
	resourcesAccepted = "406: Not Acceptable\n\nAvailable representations: application/json, application/yaml, application/vnd.kubernetes.protobuf"
)

// writeDiscovery sends a discovery document as r's Accept header asks,
// as kube-apiserver does: in YAML when the first clause of a type it
// knows asks for YAML, else in JSON (a client asking for protobuf or an
// aggregated document decodes JSON by its Content-Type), or the 406 with
// refusal when the header names no type it knows.
func writeDiscovery(w http.ResponseWriter, r *http.Request, refusal string, doc runtime.Object) {
	clauses := acceptClauses(r)
	i := slices.IndexFunc(clauses, func(c goautoneg.Accept) bool {
		_, ok := clauseEncoding(c.Type, c.SubType)
		return ok
	})
	switch {
	case len(clauses) > 0 && i < 0:
		WriteStatus(w, notAcceptable("%s", refusal))
	case i >= 0 && clauses[i].Type == "application" && clauses[i].SubType == "yaml":
		if err := encYAML.encode(w, http.StatusOK, doc); err != nil {
			WriteStatus(w, err)
		}
	default:
		WriteJSON(w, http.StatusOK, doc)
	}
}

func (d *discovery) apiGroups() []metav1.APIGroup {
	var out []metav1.APIGroup
	for g, vs := range d.registry.Groups() {
		if g == "" {
			continue
		}
		out = append(out, apiGroup(g, vs))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func apiGroup(g string, vs []string) metav1.APIGroup {
	group := metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: g}
	for _, v := range vs {
		group.Versions = append(group.Versions, metav1.GroupVersionForDiscovery{GroupVersion: g + "/" + v, Version: v})
	}
	group.PreferredVersion = group.Versions[0]
	return group
}

// DiscoveryAPIs serves /apis.
func (d *discovery) DiscoveryAPIs(w http.ResponseWriter, r *http.Request) {
	writeDiscovery(w, r, groupsAccepted, &metav1.APIGroupList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
		Groups:   d.apiGroups(),
	})
}

// discoveryGroup serves /apis/<group>; ok is false if the group is unknown.
func (d *discovery) discoveryGroup(w http.ResponseWriter, r *http.Request, group string) bool {
	vs, ok := d.registry.Groups()[group]
	if !ok || group == "" {
		return false
	}
	g := apiGroup(group, vs)
	writeDiscovery(w, r, groupsAccepted, &g)
	return true
}

// discoveryResources serves /api/v1 and /apis/<group>/<version>.
func (d *discovery) discoveryResources(w http.ResponseWriter, r *http.Request, group, version string) bool {
	list := &metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: version,
	}
	if group != "" {
		list.GroupVersion = group + "/" + version
	}
	found := false
	for _, res := range d.registry.Resources() {
		if res.Group != group || res.Version != version {
			continue
		}
		found = true
		list.APIResources = append(list.APIResources, apiResources(res)...)
	}
	if !found {
		return false
	}
	writeDiscovery(w, r, resourcesAccepted, list)
	return true
}

func apiResources(res *registry.Resource) []metav1.APIResource {
	main := metav1.APIResource{
		Name: res.Plural, SingularName: res.Singular, Namespaced: res.Namespaced,
		Kind: res.Kind, Verbs: res.Verbs(), ShortNames: res.ShortNames, Categories: res.Categories,
	}
	out := []metav1.APIResource{main}
	if res.Status {
		out = append(out, metav1.APIResource{
			Name: res.Plural + "/status", Namespaced: res.Namespaced, Kind: res.Kind,
			Verbs: []string{"get", "patch", "update"},
		})
	}
	for _, sub := range res.UpdateSubresources {
		out = append(out, metav1.APIResource{
			Name: res.Plural + "/" + sub, Namespaced: res.Namespaced, Kind: res.Kind,
			Verbs: []string{"get", "patch", "update"},
		})
	}
	if res.Scale != nil {
		// As Kubernetes' apiextensions discovery: the subresource's kind is
		// autoscaling/v1 Scale, not the resource's.
		out = append(out, metav1.APIResource{
			Name: res.Plural + "/scale", Namespaced: res.Namespaced,
			Group: scaleResource.Group, Version: scaleResource.Version, Kind: scaleResource.Kind,
			Verbs: []string{"get", "patch", "update"},
		})
	}
	for sub, rr := range res.Reviews {
		r := metav1.APIResource{
			Name: res.Plural + "/" + sub, Namespaced: res.Namespaced,
			Kind: rr.Kind, Verbs: []string{"create"},
		}
		// As kube-apiserver: group and version only for a kind of
		// another group version (a pod's Binding is core/v1's own).
		if rr.Group != res.Group || rr.Version != res.Version {
			r.Group, r.Version = rr.Group, rr.Version
		}
		out = append(out, r)
	}
	return out
}

// Resources serves every path under /api/ and /apis/: discovery
// documents and resource requests.
func (a *API) Resources(w http.ResponseWriter, r *http.Request) {
	parts := splitPath(r.URL.Path)
	switch {
	case len(parts) == 2 && parts[0] == "api" && r.Method == http.MethodGet:
		if a.discovery.discoveryResources(w, r, "", parts[1]) {
			return
		}
	case len(parts) == 2 && parts[0] == "apis" && r.Method == http.MethodGet:
		if a.discovery.discoveryGroup(w, r, parts[1]) {
			return
		}
	case len(parts) == 3 && parts[0] == "apis" && r.Method == http.MethodGet:
		if a.discovery.discoveryResources(w, r, parts[1], parts[2]) {
			return
		}
	default:
		if info, ok := resourceInfo(r); ok {
			a.serveResource(w, r, info)
			return
		}
	}
	WriteStatus(w, NotFoundPath())
}

// RootPaths lists the served paths, as GET / does in Kubernetes.
func (d *discovery) RootPaths(w http.ResponseWriter, r *http.Request) {
	paths := []string{"/api", "/api/v1", "/apis", "/healthz", "/livez", "/metrics", "/openapi/v2", "/openapi/v3", "/readyz", "/version"}
	for g, vs := range d.registry.Groups() {
		if g == "" {
			continue
		}
		paths = append(paths, "/apis/"+g)
		for _, v := range vs {
			paths = append(paths, "/apis/"+g+"/"+v)
		}
	}
	WriteJSON(w, http.StatusOK, metav1.RootPaths{Paths: paths})
}

// DiscoveryAPI serves /api (the core group's versions).
func (a *API) DiscoveryAPI(w http.ResponseWriter, r *http.Request) { a.discovery.DiscoveryAPI(w, r) }

// DiscoveryAPIs serves /apis (every other group).
func (a *API) DiscoveryAPIs(w http.ResponseWriter, r *http.Request) { a.discovery.DiscoveryAPIs(w, r) }

// RootPaths serves / (the paths the server serves).
func (a *API) RootPaths(w http.ResponseWriter, r *http.Request) { a.discovery.RootPaths(w, r) }
