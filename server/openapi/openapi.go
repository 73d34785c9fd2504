package openapi

import (
	"bytes"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/munnerz/goautoneg"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/endpoints"
	"github.com/objwatch/objwatch/server/registry"
)

// OpenAPI v3 is served as kube-apiserver serves it (k8s.io/kube-openapi's
// handler3): /openapi/v3 lists a document per group version, each under a
// URL carrying a hash of its content; a document requested with its current
// hash may be cached forever, one requested with a stale hash redirects to
// the current one. kubectl uses these documents to learn that the server
// validates fields itself (the fieldValidation parameter of PATCH), to
// compute strategic merge patches for built-in kinds, and for explain.
//
// /openapi/v2 is served too (openapi_v2.go).

const openAPIV3Prefix = "/openapi/v3"

// ServeV3 serves /openapi/v3 (and 404 for other paths under /openapi/).
func (d *Docs) ServeV3(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		endpoints.WriteStatus(w, apistatus.New(http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed,
			fmt.Sprintf("%s is not supported on %s", r.Method, r.URL.Path)))
		return
	}
	p := r.URL.Path
	if p != openAPIV3Prefix && !strings.HasPrefix(p, openAPIV3Prefix+"/") {
		endpoints.WriteStatus(w, endpoints.NotFoundPath())
		return
	}
	var defs definitions // shared by the builds of this update, which run one after another
	docs := d.v3.update(d.registry.Resources(), func(rs []*registry.Resource) (*spec3.OpenAPI, error) {
		doc, err := d.buildOpenAPIV3(rs, &defs)
		if err != nil {
			// Served as 500 and left out of /openapi/v3 until the
			// resources change; kubectl then treats the group version as
			// unknown, as it does for a CRD kube-apiserver cannot publish.
			d.log.Error("openapi v3", "resource", rs[0].GVR().GroupVersion(), "err", err)
		}
		return doc, err
	})
	gv := strings.Trim(strings.TrimPrefix(p, openAPIV3Prefix), "/")
	if gv == "" {
		docs.serveDiscovery(w, r)
		return
	}
	doc, ok := docs.byGV[gv]
	if !ok {
		endpoints.WriteStatus(w, endpoints.NotFoundPath())
		return
	}
	if doc.err != nil {
		endpoints.WriteStatus(w, apierrors.NewInternalError(doc.err))
		return
	}
	doc.serve(w, r, gv)
}

// buildOpenAPIV3 builds the document of one group version: built-in
// resources from Kubernetes' definitions (memoized in defs), custom
// resources from their CRDs, merged as kube-apiserver merges the CRDs of
// one group version.
func (d *Docs) buildOpenAPIV3(resources []*registry.Resource, defs *definitions) (*spec3.OpenAPI, error) {
	var builtins []*registry.Resource
	var parts []*spec3.OpenAPI
	for _, res := range resources {
		switch {
		case !res.Custom:
			builtins = append(builtins, res)
		case res.OpenAPIV3 != nil:
			doc, err := res.OpenAPIV3()
			if err != nil {
				return nil, fmt.Errorf("openapi %s: %w", res.GVR(), err)
			}
			parts = append(parts, doc)
		}
	}
	if len(builtins) > 0 {
		doc, err := builtinOpenAPI(builtins, "Kubernetes", d.version, defs)
		if err != nil {
			return nil, err
		}
		parts = append([]*spec3.OpenAPI{doc}, parts...)
	}
	switch len(parts) {
	case 0:
		return nil, fmt.Errorf("openapi %s: no document", resources[0].GVR().GroupVersion())
	case 1:
		return parts[0], nil
	}
	return builder.MergeSpecsV3(parts...)
}

// openAPIDocs keeps the OpenAPI v3 documents of the served group versions.
// A group version's document is built (under mu, by the request that first
// needs it) when its resources change; as registry resources are immutable,
// comparing pointers detects changes. It is safe for concurrent use; the
// zero value is ready.
type openAPIDocs struct {
	mu      sync.Mutex
	current *openAPIDocSet // replaced, never modified, under mu
}

// openAPIDocSet is an immutable snapshot of the documents.
type openAPIDocSet struct {
	byGV      map[string]*openAPIDoc // keyed by "api/v1", "apis/<group>/<version>"
	discovery []byte
	etag      string
}

// openAPIDoc is the document of one group version.
type openAPIDoc struct {
	resources []*registry.Resource
	err       error // the document could not be built
	json      []byte
	etag      string
	protobuf  func() ([]byte, error)
}

// update returns the documents for resources, building those whose group
// version changed with build.
func (d *openAPIDocs) update(resources []*registry.Resource, build func([]*registry.Resource) (*spec3.OpenAPI, error)) *openAPIDocSet {
	byGV := map[string][]*registry.Resource{}
	for _, res := range resources {
		gv := "apis/" + res.Group + "/" + res.Version
		if res.Group == "" {
			gv = "api/" + res.Version
		}
		byGV[gv] = append(byGV[gv], res)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if cur := d.current; cur != nil && len(cur.byGV) == len(byGV) {
		same := true
		for gv, rs := range byGV {
			if doc, ok := cur.byGV[gv]; !ok || !slices.Equal(doc.resources, rs) {
				same = false
				break
			}
		}
		if same {
			return cur
		}
	}
	next := &openAPIDocSet{byGV: make(map[string]*openAPIDoc, len(byGV))}
	disc := handler3.OpenAPIV3Discovery{Paths: map[string]handler3.OpenAPIV3DiscoveryGroupVersion{}}
	for gv, rs := range byGV {
		var doc *openAPIDoc
		if d.current != nil {
			doc = d.current.byGV[gv]
		}
		if doc == nil || !slices.Equal(doc.resources, rs) {
			doc = newOpenAPIDoc(rs, build)
		}
		next.byGV[gv] = doc
		if doc.err == nil {
			disc.Paths[gv] = handler3.OpenAPIV3DiscoveryGroupVersion{ServerRelativeURL: openAPIV3URL(gv, doc.etag)}
		}
	}
	var err error
	if next.discovery, err = json.Marshal(disc); err != nil {
		panic(err) // maps of strings always marshal
	}
	next.etag = openAPIETag(next.discovery)
	d.current = next
	return next
}

func newOpenAPIDoc(resources []*registry.Resource, build func([]*registry.Resource) (*spec3.OpenAPI, error)) *openAPIDoc {
	doc := &openAPIDoc{resources: resources}
	spec, err := build(resources)
	if err == nil {
		doc.json, err = json.Marshal(spec)
	}
	if err != nil {
		doc.err = err
		return doc
	}
	doc.etag = openAPIETag(doc.json)
	doc.protobuf = sync.OnceValues(func() ([]byte, error) { return handler3.ToV3ProtoBinary(doc.json) })
	return doc
}

// openAPIV3URL is the URL of the document of gv with content hash etag.
func openAPIV3URL(gv, etag string) string {
	u := url.URL{Path: openAPIV3Prefix + "/" + gv, RawQuery: url.Values{"hash": {etag}}.Encode()}
	return u.String()
}

// openAPIETag is the content hash kube-openapi uses as ETag and URL hash.
func openAPIETag(b []byte) string {
	return fmt.Sprintf("%X", sha512.Sum512(b))
}

func (ds *openAPIDocSet) serveDiscovery(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Etag", strconv.Quote(ds.etag))
	w.Header().Set("Content-Type", "application/json")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(ds.discovery))
}

// The media types of OpenAPI v3 documents, as kube-openapi names them.
var openAPIV3MediaTypes = []struct {
	subType, contentType string
	protobuf             bool
}{
	{"json", "application/json", false},
	{"com.github.proto-openapi.spec.v3.v1.0+protobuf", "application/com.github.proto-openapi.spec.v3.v1.0+protobuf", true},
	{"com.github.proto-openapi.spec.v3@v1.0+protobuf", "application/com.github.proto-openapi.spec.v3.v1.0+protobuf", true},
}

func (d *openAPIDoc) serve(w http.ResponseWriter, r *http.Request, gv string) {
	w.Header().Add("Vary", "Accept")
	accept := r.Header.Get("Accept")
	if accept == "" {
		accept = "*/*"
	}
	for _, clause := range goautoneg.ParseAccept(accept) {
		for _, mt := range openAPIV3MediaTypes {
			if (clause.Type != "application" && clause.Type != "*") || (clause.SubType != mt.subType && clause.SubType != "*") {
				continue
			}
			body := d.json
			if mt.protobuf {
				var err error
				if body, err = d.protobuf(); err != nil {
					endpoints.WriteStatus(w, apierrors.NewInternalError(err))
					return
				}
			}
			w.Header().Set("Content-Type", mt.contentType)
			w.Header().Set("Etag", strconv.Quote(d.etag))
			if hash := r.URL.Query().Get("hash"); hash != "" {
				if hash != d.etag {
					http.Redirect(w, r, openAPIV3URL(gv, d.etag), http.StatusMovedPermanently)
					return
				}
				// The content of a hashed URL never changes.
				w.Header().Set("Cache-Control", "public, immutable")
				w.Header().Set("Expires", time.Now().AddDate(1, 0, 0).Format(time.RFC1123))
			}
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
			return
		}
	}
	endpoints.WriteStatus(w, apistatus.New(http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable,
		"only the following media types are accepted: application/json, application/com.github.proto-openapi.spec.v3.v1.0+protobuf"))
}
