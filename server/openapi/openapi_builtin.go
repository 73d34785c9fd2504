package openapi

import (
	"fmt"
	"net/http"
	"strings"
	"sync"

	restful "github.com/emicklei/go-restful/v3"
	"golang.org/x/text/cases"
	"golang.org/x/text/language"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/endpoints"
	endpointsopenapi "k8s.io/apiserver/pkg/endpoints/openapi"
	utilopenapi "k8s.io/apiserver/pkg/util/openapi"
	"k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/common/restfuladapter"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"
	kubeopenapi "k8s.io/kubernetes/pkg/generated/openapi"

	"github.com/objwatch/objwatch/server/registry"
)

// The OpenAPI documents of built-in resources are built the way
// kube-apiserver builds its own: go-restful routes describing each endpoint
// as k8s.io/apiserver's installer registers them, fed to kube-openapi's
// builders with the definitions openapi-gen generated from k8s.io/api
// (k8s.io/kubernetes/pkg/generated/openapi), less the fields of disabled
// feature gates. Operations, parameters (dryRun, fieldManager,
// fieldValidation, ...), descriptions, required fields, enums, defaults
// and the x-kubernetes-group-version-kind, -action, -list-type,
// -list-map-keys and -map-type extensions therefore match Kubernetes'.
// Responses are JSON only, as objwatch serves.

// openAPINamer names definitions and tags the kinds with
// x-kubernetes-group-version-kind, as kube-apiserver's namer does. Made on
// first use: start-up does not pay for it.
var openAPINamer = sync.OnceValue(func() *endpointsopenapi.DefinitionNamer {
	return endpointsopenapi.NewDefinitionNamer(registry.Scheme)
})

func definitionName(name string) (string, spec.Extensions) {
	return openAPINamer().GetDefinitionName(name)
}

// everyGroup are the models of the kinds every group version registers
// (metav1.AddToGroupVersion) that documents refer to.
var everyGroup = map[string]bool{
	"io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions": true,
	"io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent":    true,
}

// scopedDefinitionName names definitions in the document of group version
// gv. As in kube-apiserver's documents, the kinds every group registers are
// tagged with their core/v1 and gv kinds only, not with some 30 others.
func scopedDefinitionName(gv schema.GroupVersion) func(string) (string, spec.Extensions) {
	return func(name string) (string, spec.Extensions) {
		n, ext := definitionName(name)
		gvks, ok := ext[gvkExtension].([]any)
		if !everyGroup[name] || !ok {
			return n, ext
		}
		var kept []any
		for _, g := range gvks {
			m, _ := g.(map[string]any)
			if m["version"] == "v1" && m["group"] == "" || m["version"] == gv.Version && m["group"] == gv.Group {
				kept = append(kept, g)
			}
		}
		return n, spec.Extensions{gvkExtension: kept}
	}
}

const gvkExtension = "x-kubernetes-group-version-kind"

// routeAction is the x-kubernetes-action of each verb's operations.
var routeAction = map[string]string{
	"get": "get", "list": "list", "create": "post", "update": "put",
	"patch": "patch", "delete": "delete", "deletecollection": "deletecollection",
	"watch": "watch", "watchlist": "watchlist",
}

const prettyDoc = "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget)."

// definitions memoizes Kubernetes' definitions for builds that run one
// after another and refer to models alike (all v3 or all v2): making them
// allocates some 1,500 schemas. Not safe for concurrent use; the builders
// write the kinds' x-kubernetes-group-version-kind into them, the same
// values each time. The zero value is ready.
type definitions struct {
	defs map[string]common.OpenAPIDefinition
}

func (d *definitions) get(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	if d.defs == nil {
		d.defs = utilopenapi.GetOpenAPIDefinitionsWithoutDisabledFeatures(kubeopenapi.GetOpenAPIDefinitions)(ref)
	}
	return d.defs
}

// v3Config is the builder configuration of built-in resources' v3
// documents and models.
func v3Config(title, version string, defs *definitions, name func(string) (string, spec.Extensions)) *common.OpenAPIV3Config {
	return &common.OpenAPIV3Config{
		Info: &spec.Info{InfoProps: spec.InfoProps{Title: title, Version: version}},
		CommonResponses: map[int]*spec3.Response{
			http.StatusUnauthorized: {ResponseProps: spec3.ResponseProps{Description: "Unauthorized"}},
		},
		GetOperationIDAndTags: endpointsopenapi.GetOperationIDAndTags,
		GetDefinitionName:     name,
		GetDefinitions:        defs.get,
	}
}

// builtinOpenAPI builds the OpenAPI v3 document of built-in resources that
// share one group version.
func builtinOpenAPI(resources []*registry.Resource, title, version string, defs *definitions) (*spec3.OpenAPI, error) {
	ws, err := builtinWebService(resources)
	if err != nil {
		return nil, err
	}
	gv := resources[0].GVK().GroupVersion()
	return builder3.BuildOpenAPISpecFromRoutes(restfuladapter.AdaptWebServices([]*restful.WebService{ws}), v3Config(title, version, defs, scopedDefinitionName(gv)))
}

// builtinWebService describes the endpoints of built-in resources as
// go-restful routes.
func builtinWebService(resources []*registry.Resource) (*restful.WebService, error) {
	ws := new(restful.WebService)
	ws.Consumes("*/*") // as kube-apiserver: bodies but patches are decoded by Content-Type
	for _, res := range resources {
		obj, err := registry.Scheme.New(res.GVK())
		if err != nil {
			return nil, fmt.Errorf("openapi: %s: %w", res.GVR(), err)
		}
		var list runtime.Object
		if !res.Review {
			if list, err = registry.Scheme.New(res.GVK().GroupVersion().WithKind(res.ListKind)); err != nil {
				return nil, fmt.Errorf("openapi: %s: %w", res.GVR(), err)
			}
		}
		routes, err := builtinRoutes(ws, res, obj, list)
		if err != nil {
			return nil, fmt.Errorf("openapi: %s: %w", res.GVR(), err)
		}
		for _, rb := range routes {
			ws.Route(rb)
		}
	}
	return ws, nil
}

// builtinRoutes describes the endpoints of one built-in resource.
func builtinRoutes(ws *restful.WebService, res *registry.Resource, obj, list runtime.Object) ([]*restful.RouteBuilder, error) {
	root := "/apis/" + res.Group + "/" + res.Version
	if res.Group == "" {
		root = "/api/" + res.Version
	}
	kind := res.Kind
	nameParam := ws.PathParameter("name", "name of the "+kind).DataType("string")
	nsParam := ws.PathParameter("namespace", "object name and auth scope, such as for teams and projects").DataType("string")
	status := &metav1.Status{}

	type action struct {
		verb, path, sub string
		allNamespaces   bool
	}
	// Paths relative to root, and under root/watch/ for the deprecated
	// watch endpoints.
	collection := res.Plural
	var actions []action
	if res.Review {
		// Create only: a review is answered, never stored.
		if res.Namespaced {
			collection = "namespaces/{namespace}/" + res.Plural
		}
		actions = append(actions, action{verb: "create", path: collection})
	}
	if res.Namespaced && !res.Review {
		actions = append(actions,
			action{verb: "list", path: collection, allNamespaces: true},
			action{verb: "watchlist", path: collection, allNamespaces: true})
		collection = "namespaces/{namespace}/" + res.Plural
	}
	item := collection + "/{name}"
	if !res.Review {
		actions = append(actions,
			action{verb: "list", path: collection},
			action{verb: "create", path: collection},
			action{verb: "deletecollection", path: collection},
			action{verb: "watchlist", path: collection},
			action{verb: "get", path: item},
			action{verb: "update", path: item},
			action{verb: "patch", path: item},
			action{verb: "delete", path: item},
			action{verb: "watch", path: item},
		)
	}
	if res.Status {
		for _, v := range []string{"get", "update", "patch"} {
			actions = append(actions, action{verb: v, path: item + "/status", sub: "status"})
		}
	}
	if res.Scale != nil {
		for _, v := range []string{"get", "update", "patch"} {
			actions = append(actions, action{verb: v, path: item + "/scale", sub: "scale"})
		}
	}

	var routes []*restful.RouteBuilder
	var err error
	addParams := func(rb *restful.RouteBuilder, options any, excluded ...string) {
		if e := endpoints.AddObjectParams(ws, rb, options, excluded...); e != nil && err == nil {
			err = e
		}
	}
	for _, a := range actions {
		namespaced, suffix := "", cases.Title(language.English).String(a.sub)
		if res.Namespaced && !a.allNamespaces {
			namespaced = "Namespaced"
		}
		if a.allNamespaces {
			suffix += "ForAllNamespaces"
		}
		of := " the specified " + kind
		if a.sub != "" {
			of = " " + a.sub + " of the specified " + kind
		}
		article := endpoints.GetArticleForNoun(kind, " ")
		path := root + "/" + a.path
		body, gvk := obj, metav1.GroupVersionKind{Group: res.Group, Version: res.Version, Kind: kind}
		if a.sub == "scale" {
			body, gvk = &autoscalingv1.Scale{}, metav1.GroupVersionKind{Group: autoscalingv1.GroupName, Version: "v1", Kind: "Scale"}
		}
		var rb *restful.RouteBuilder
		switch a.verb {
		case "get":
			rb = ws.GET(path).Doc("read"+of).Operation("read"+namespaced+kind+suffix).
				Returns(http.StatusOK, "OK", body).Writes(body)
		case "list":
			rb = ws.GET(path).Doc("list or watch objects of kind "+kind).Operation("list"+namespaced+kind+suffix).
				Produces("application/json", "application/json;stream=watch").
				Returns(http.StatusOK, "OK", list).Writes(list)
			addParams(rb, &metav1.ListOptions{})
		case "watch":
			rb = ws.GET(root+"/watch/"+a.path).Doc("watch changes to an object of kind "+kind+". deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter.").
				Operation("watch"+namespaced+kind+suffix).
				Produces("application/json", "application/json;stream=watch").
				Returns(http.StatusOK, "OK", &metav1.WatchEvent{}).Writes(&metav1.WatchEvent{})
			addParams(rb, &metav1.ListOptions{})
		case "watchlist":
			rb = ws.GET(root+"/watch/"+a.path).Doc("watch individual changes to a list of "+kind+". deprecated: use the 'watch' parameter with a list operation instead.").
				Operation("watch"+namespaced+kind+"List"+suffix).
				Produces("application/json", "application/json;stream=watch").
				Returns(http.StatusOK, "OK", &metav1.WatchEvent{}).Writes(&metav1.WatchEvent{})
			addParams(rb, &metav1.ListOptions{})
		case "create":
			rb = ws.POST(path).Doc("create"+article+kind).Operation("create"+namespaced+kind+suffix).
				Returns(http.StatusOK, "OK", body).Returns(http.StatusCreated, "Created", body).
				Returns(http.StatusAccepted, "Accepted", body).Reads(body).Writes(body)
			addParams(rb, &metav1.CreateOptions{})
		case "update":
			rb = ws.PUT(path).Doc("replace"+of).Operation("replace"+namespaced+kind+suffix).
				Returns(http.StatusOK, "OK", body).Returns(http.StatusCreated, "Created", body).
				Reads(body).Writes(body)
			addParams(rb, &metav1.UpdateOptions{})
		case "patch":
			rb = ws.PATCH(path).Doc("partially update"+of).Operation("patch"+namespaced+kind+suffix).
				Consumes(string(types.JSONPatchType), string(types.MergePatchType),
					string(types.StrategicMergePatchType), string(types.ApplyYAMLPatchType)).
				Returns(http.StatusOK, "OK", body).Returns(http.StatusCreated, "Created", body).
				Reads(metav1.Patch{}).Writes(body)
			addParams(rb, &metav1.PatchOptions{})
		case "delete":
			rb = ws.DELETE(path).Doc("delete"+article+kind).Operation("delete"+namespaced+kind+suffix).
				Returns(http.StatusOK, "OK", status).Returns(http.StatusAccepted, "Accepted", status).
				Reads(&metav1.DeleteOptions{}).Writes(status)
			rb.ParameterNamed("body").Required(false)
			addParams(rb, &metav1.DeleteOptions{})
		case "deletecollection":
			rb = ws.DELETE(path).Doc("delete collection of "+kind).Operation("deletecollection"+namespaced+kind+suffix).
				Returns(http.StatusOK, "OK", status).Reads(&metav1.DeleteOptions{}).Writes(status)
			rb.ParameterNamed("body").Required(false)
			addParams(rb, &metav1.DeleteOptions{})
			addParams(rb, &metav1.ListOptions{}, "watch", "allowWatchBookmarks")
		}
		rb.To(func(*restful.Request, *restful.Response) {}).Param(ws.QueryParameter("pretty", prettyDoc))
		if a.verb != "list" && a.verb != "watch" && a.verb != "watchlist" {
			rb.Produces("application/json")
		}
		if strings.Contains(a.path, "{namespace}") {
			rb.Param(nsParam)
		}
		if strings.Contains(a.path, "{name}") {
			rb.Param(nameParam)
		}
		rb.Metadata(endpoints.RouteMetaGVK, gvk)
		rb.Metadata(endpoints.RouteMetaAction, routeAction[a.verb])
		routes = append(routes, rb)
	}
	return routes, err
}

// BuiltinModels returns the OpenAPI v3 models of the built-in resources'
// kinds (with autoscaling/v1 Scale) and of the types they refer to, keyed
// by model name and tagged with x-kubernetes-group-version-kind, as the
// served documents have them: the schemas server-side apply merges
// built-in objects by (package fieldmanager) and admission policies
// type-check against.
func BuiltinModels(r *registry.Registry) (map[string]*spec.Schema, error) {
	names := []string{util.GetCanonicalTypeName(&autoscalingv1.Scale{})}
	for _, res := range r.Resources() {
		if res.Custom {
			continue
		}
		obj, err := registry.Scheme.New(res.GVK())
		if err != nil {
			return nil, fmt.Errorf("openapi: %s: %w", res.GVR(), err)
		}
		names = append(names, util.GetCanonicalTypeName(obj))
	}
	return builder3.BuildOpenAPIDefinitionsForResources(v3Config("Kubernetes", "", &definitions{}, definitionName), names...)
}
