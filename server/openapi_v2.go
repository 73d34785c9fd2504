package server

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

const openAPIV2Path = "/openapi/v2"

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

func (s *Server) openAPIV2(w http.ResponseWriter, r *http.Request) {
	d := &s.openapiV2
	d.once.Do(func() {
		svc := handler.NewOpenAPIServiceLazy(cached.Func(s.currentOpenAPIV2))
		mux := http.NewServeMux()
		svc.RegisterOpenAPIVersionedService(openAPIV2Path, mux)
		d.handler = mux
	})
	d.handler.ServeHTTP(w, r)
}

// currentOpenAPIV2 returns the document of the served resources and a tag
// that changes with it (kube-openapi then encodes it again).
func (s *Server) currentOpenAPIV2() (*spec.Swagger, string, error) {
	d := &s.openapiV2
	rs := s.registry.Resources()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gen == 0 || !slices.Equal(rs, d.resources) {
		d.resources, d.gen = rs, d.gen+1
		if d.swagger, d.err = s.buildOpenAPIV2(rs); d.err != nil {
			s.cfg.Log.Error("openapi v2", "err", d.err)
		}
	}
	return d.swagger, strconv.Itoa(d.gen), d.err
}

// buildOpenAPIV2 builds the document of resources. A custom resource whose
// part cannot be built is left out (and logged), as kube-apiserver leaves
// out such a CRD.
func (s *Server) buildOpenAPIV2(resources []*registry.Resource) (*spec.Swagger, error) {
	var builtins []*registry.Resource
	var crds []*spec.Swagger
	for _, res := range resources {
		switch {
		case !res.Custom:
			builtins = append(builtins, res)
		case res.OpenAPIV2 != nil:
			sw, err := res.OpenAPIV2()
			if err != nil {
				s.cfg.Log.Error("openapi v2", "resource", res.GVR(), "err", err)
				continue
			}
			crds = append(crds, sw)
		}
	}
	ws, roots, err := builtinWebService(builtins)
	if err != nil {
		return nil, err
	}
	static, err := builder.BuildOpenAPISpecFromRoutes(restfuladapter.AdaptWebServices([]*restful.WebService{ws}), &common.Config{
		Info: &spec.Info{InfoProps: spec.InfoProps{Title: "Kubernetes", Version: s.cfg.Version}},
		CommonResponses: map[int]spec.Response{
			http.StatusUnauthorized: {ResponseProps: spec.ResponseProps{Description: "Unauthorized"}},
		},
		GetOperationIDAndTags: endpointsopenapi.GetOperationIDAndTags,
		GetDefinitionName:     openAPINamer.GetDefinitionName,
		GetDefinitions:        builtinDefinitions(roots),
	})
	if err != nil {
		return nil, err
	}
	return crdbuilder.MergeSpecs(static, crds...)
}
