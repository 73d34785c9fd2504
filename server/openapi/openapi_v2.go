package openapi

import (
	"net/http"
	"slices"
	"strconv"
	"sync"

	restful "github.com/emicklei/go-restful/v3"
	crdbuilder "k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	endpointsopenapi "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/cached"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/common/restfuladapter"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/objwatch/objwatch/server/registry"
)

// /openapi/v2 is served as kube-apiserver serves it, by k8s.io/kube-openapi's
// handler: one swagger document of every served resource, as JSON or (what
// kubectl and client-go's discovery ask for) protobuf, with an ETag. The
// built-in resources' part comes from kube-openapi's v2 builder fed the same
// routes and definitions as their v3 documents; each custom resource version
// adds the document apiextensions-apiserver's builder makes of its CRD,
// merged as kube-apiserver merges them (the built-in part wins conflicts).
// kubectl validates against it client-side where it cannot leave validation
// to the server, e.g. the items of a `kind: List` file.

// V2Path is where the OpenAPI v2 document is served.
const V2Path = "/openapi/v2"

// openAPIV2Doc is the v2 document, rebuilt when the served resources
// change. The zero value is ready.
type openAPIV2Doc struct {
	once    sync.Once
	handler http.Handler

	mu        sync.Mutex
	resources []*registry.Resource // what swagger was built from
	gen       int                  // counts the builds: the document's version
	swagger   *spec.Swagger
	err       error
}

// ServeV2 serves V2Path.
func (d *Docs) ServeV2(w http.ResponseWriter, r *http.Request) {
	v2 := &d.v2
	v2.once.Do(func() {
		svc := handler.NewOpenAPIServiceLazy(cached.Func(d.currentOpenAPIV2))
		mux := http.NewServeMux()
		svc.RegisterOpenAPIVersionedService(V2Path, mux)
		v2.handler = mux
	})
	v2.handler.ServeHTTP(w, r)
}

// currentOpenAPIV2 returns the document of the served resources and a tag
// that changes with it (kube-openapi then encodes it again).
func (d *Docs) currentOpenAPIV2() (*spec.Swagger, string, error) {
	v2 := &d.v2
	rs := d.registry.Resources()
	v2.mu.Lock()
	defer v2.mu.Unlock()
	if v2.gen == 0 || !slices.Equal(rs, v2.resources) {
		v2.resources, v2.gen = rs, v2.gen+1
		if v2.swagger, v2.err = d.buildOpenAPIV2(rs); v2.err != nil {
			d.log.Error("openapi v2", "err", v2.err)
		}
	}
	return v2.swagger, strconv.Itoa(v2.gen), v2.err
}

// buildOpenAPIV2 builds the document of resources. A custom resource whose
// part cannot be built is left out (and logged), as kube-apiserver leaves
// out such a CRD.
func (d *Docs) buildOpenAPIV2(resources []*registry.Resource) (*spec.Swagger, error) {
	var builtins []*registry.Resource
	var crds []*spec.Swagger
	for _, res := range resources {
		switch {
		case !res.Custom:
			builtins = append(builtins, res)
		case res.OpenAPIV2 != nil:
			sw, err := res.OpenAPIV2()
			if err != nil {
				d.log.Error("openapi v2", "resource", res.GVR(), "err", err)
				continue
			}
			crds = append(crds, sw)
		}
	}
	ws, err := builtinWebService(builtins)
	if err != nil {
		return nil, err
	}
	static, err := builder.BuildOpenAPISpecFromRoutes(restfuladapter.AdaptWebServices([]*restful.WebService{ws}), &common.Config{
		Info: &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes", Version: d.version}},
		CommonResponses: map[int]spec.Response{
			http.StatusUnauthorized: {ResponseProps: spec.ResponseProps{Description: "Unauthorized"}},
		},
		GetOperationIDAndTags: endpointsopenapi.GetOperationIDAndTags,
		GetDefinitionName:     definitionName,
		GetDefinitions:        (&definitions{}).get,
	})
	if err != nil {
		return nil, err
	}
	// As kube-apiserver's: v2 clients do not expect defaults (openapi-gen
	// writes some for fields that need no value, such as "" for strings).
	static.Definitions = handler.PruneDefaults(static.Definitions)
	return crdbuilder.MergeSpecs(static, crds...)
}
