package openapi

import (
	"reflect"
	"slices"
	"strings"

	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// Kubernetes publishes schemas that openapi-gen generates from the Go
// sources of k8s.io/api, comments included; only kube-apiserver's
// non-importable pkg/generated/openapi holds them for the core and
// coordination groups. apiextensions-apiserver ships generated definitions
// for the meta types and its own (CustomResourceDefinition), which objwatch
// uses as they are. The remaining built-in types are described by
// reflecting over their Go structs:
//
//   - properties follow the json tags (inlined structs flattened);
//   - descriptions come from the SwaggerDoc methods generated in k8s.io/api;
//   - fields without omitempty are required, but those optionalFields
//     lists (openapi-gen honours +optional comments, which reflection
//     cannot see; check new built-in kinds against Kubernetes' schemas);
//   - patchStrategy and patchMergeKey tags become x-kubernetes-patch-*
//     extensions, which kubectl apply needs for strategic merge patches;
//   - list-type, list-map-key and map-type markers live in comments only:
//     fieldMarkers has those of the served types, with the defaults of
//     list-map keys (server-side apply needs both: a Service's ports are
//     keyed by port and protocol, TCP when unset); enum markers are not
//     published.

// optionalFields are the fields of reflected models that have no omitempty
// but a +optional comment.
var optionalFields = map[string][]string{
	"io.k8s.api.core.v1.Event": {"reportingComponent", "reportingInstance"},
}

// fieldMarkers are the extensions Kubernetes (v1.37.2's generated OpenAPI)
// publishes for fields of the reflected models from their +listType,
// +listMapKey and +mapType comments, by model name and property; a list
// with a patch merge key and no list type is taken as a map keyed by it,
// one without either as atomic, which is what these say too. Check new
// built-in kinds against Kubernetes' schemas.
var fieldMarkers = map[string]map[string]spec.Extensions{
	"io.k8s.api.core.v1.ServiceSpec": {
		"ports":                    listMap("port", "protocol"),
		"selector":                 {"x-kubernetes-map-type": "atomic"},
		"clusterIPs":               atomicList(),
		"externalIPs":              atomicList(),
		"loadBalancerSourceRanges": atomicList(),
		"ipFamilies":               atomicList(),
	},
	"io.k8s.api.core.v1.ServiceStatus":       {"conditions": listMap("type")},
	"io.k8s.api.core.v1.LoadBalancerStatus":  {"ingress": atomicList()},
	"io.k8s.api.core.v1.LoadBalancerIngress": {"ports": atomicList()},
	"io.k8s.api.core.v1.NamespaceSpec":       {"finalizers": atomicList()},
	"io.k8s.api.core.v1.NamespaceStatus":     {"conditions": listMap("type")},
	"io.k8s.api.core.v1.ServiceAccount":      {"secrets": listMap("name"), "imagePullSecrets": atomicList()},
	"io.k8s.api.rbac.v1.AggregationRule":     {"clusterRoleSelectors": atomicList()},
	"io.k8s.api.rbac.v1.ClusterRole":         {"rules": atomicList()},
	"io.k8s.api.rbac.v1.Role":                {"rules": atomicList()},
	"io.k8s.api.rbac.v1.ClusterRoleBinding":  {"subjects": atomicList()},
	"io.k8s.api.rbac.v1.RoleBinding":         {"subjects": atomicList()},
	"io.k8s.api.rbac.v1.PolicyRule":          {"verbs": atomicList(), "apiGroups": atomicList(), "resources": atomicList(), "resourceNames": atomicList(), "nonResourceURLs": atomicList()},
}

// fieldDefaults are the defaults Kubernetes publishes for fields that key
// a list map (server-side apply keys an item without them by the
// default).
var fieldDefaults = map[string]map[string]any{
	"io.k8s.api.core.v1.ServicePort": {"protocol": "TCP"},
}

func listMap(keys ...string) spec.Extensions {
	k := make([]any, len(keys))
	for i, key := range keys {
		k[i] = key
	}
	return spec.Extensions{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": k}
}

func atomicList() spec.Extensions { return spec.Extensions{"x-kubernetes-list-type": "atomic"} }

// reflectDefinitions adds to defs the definitions of every type reachable
// from roots that defs lacks, keyed by OpenAPI model name. ref makes the
// reference to a model.
func reflectDefinitions(defs map[string]common.OpenAPIDefinition, ref common.ReferenceCallback, roots ...reflect.Type) {
	r := reflector{defs: defs, ref: ref}
	for _, t := range roots {
		r.model(t)
	}
}

type reflector struct {
	defs map[string]common.OpenAPIDefinition
	ref  common.ReferenceCallback
}

type swaggerDoc interface{ SwaggerDoc() map[string]string }

// Implemented by apimachinery types with a custom JSON form (IntOrString).
type (
	openAPISchemaType   interface{ OpenAPISchemaType() []string }
	openAPISchemaFormat interface{ OpenAPISchemaFormat() string }
)

// modelName is the OpenAPI model name of a named struct type, or "".
func modelName(t reflect.Type) string {
	if t.Kind() != reflect.Struct || t.Name() == "" {
		return ""
	}
	// A method promoted from an embedded struct (TypeMeta) names that struct.
	if n, ok := reflect.Zero(t).Interface().(util.OpenAPIModelNamer); ok && strings.HasSuffix(n.OpenAPIModelName(), "."+t.Name()) {
		return n.OpenAPIModelName()
	}
	return util.ToRESTFriendlyName(t.PkgPath() + "." + t.Name())
}

// model makes sure the named struct type t has a definition and returns its
// model name.
func (r *reflector) model(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	name := modelName(t)
	if _, ok := r.defs[name]; ok {
		return name
	}
	// Placeholder first: types may refer to themselves.
	r.defs[name] = common.OpenAPIDefinition{}
	s := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}}}
	var deps []string
	r.fields(&s, t, &deps)
	r.defs[name] = common.OpenAPIDefinition{Schema: s, Dependencies: deps}
	return name
}

// fields adds the JSON fields of struct t to s.
func (r *reflector) fields(s *spec.Schema, t reflect.Type, deps *[]string) {
	docs := map[string]string{}
	if d, ok := reflect.Zero(t).Interface().(swaggerDoc); ok {
		docs = d.SwaggerDoc()
	}
	if s.Description == "" {
		s.Description = docs[""]
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			sub := spec.Schema{}
			r.fields(&sub, ft, deps)
			for k, v := range sub.Properties {
				s.SetProperty(k, v)
			}
			s.Required = append(s.Required, sub.Required...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		p := r.schema(f.Type, deps)
		p.Description = docs[name]
		if v := f.Tag.Get("patchStrategy"); v != "" {
			p.AddExtension("x-kubernetes-patch-strategy", v)
		}
		if v := f.Tag.Get("patchMergeKey"); v != "" {
			p.AddExtension("x-kubernetes-patch-merge-key", v)
		}
		for k, v := range fieldMarkers[modelName(t)][name] {
			p.AddExtension(k, v)
		}
		if v, ok := fieldDefaults[modelName(t)][name]; ok {
			p.Default = v
		}
		s.SetProperty(name, p)
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") && !slices.Contains(optionalFields[modelName(t)], name) {
			s.Required = append(s.Required, name)
		}
	}
}

// schema describes a value of type t, referring to named structs.
func (r *reflector) schema(t reflect.Type, deps *[]string) spec.Schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if name := modelName(t); name != "" {
		if _, ok := r.defs[name]; ok || !hasCustomJSON(t) {
			r.model(t)
			*deps = append(*deps, name)
			return spec.Schema{SchemaProps: spec.SchemaProps{Ref: r.ref(name)}}
		}
	}
	zero := reflect.Zero(t).Interface()
	if st, ok := zero.(openAPISchemaType); ok {
		s := spec.Schema{SchemaProps: spec.SchemaProps{Type: st.OpenAPISchemaType()}}
		if sf, ok := zero.(openAPISchemaFormat); ok {
			s.Format = sf.OpenAPISchemaFormat()
		}
		return s
	}
	typed := func(typ, format string) spec.Schema {
		return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{typ}, Format: format}}
	}
	switch t.Kind() {
	case reflect.String:
		return typed("string", "")
	case reflect.Bool:
		return typed("boolean", "")
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint8, reflect.Uint16:
		return typed("integer", "int32")
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint32, reflect.Uint64:
		return typed("integer", "int64")
	case reflect.Float32:
		return typed("number", "float")
	case reflect.Float64:
		return typed("number", "double")
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return typed("string", "byte")
		}
		items := r.schema(t.Elem(), deps)
		return spec.Schema{SchemaProps: spec.SchemaProps{
			Type: []string{"array"}, Items: &spec.SchemaOrArray{Schema: &items},
		}}
	case reflect.Map:
		v := r.schema(t.Elem(), deps)
		return spec.Schema{SchemaProps: spec.SchemaProps{
			Type: []string{"object"}, AdditionalProperties: &spec.SchemaOrBool{Allows: true, Schema: &v},
		}}
	case reflect.Struct:
		s := typed("object", "")
		r.fields(&s, t, deps)
		return s
	}
	// interface{} and anything else: any JSON value.
	s := typed("object", "")
	s.AddExtension("x-kubernetes-preserve-unknown-fields", true)
	return s
}

// hasCustomJSON reports whether t marshals itself (a struct whose fields do
// not describe its JSON form).
func hasCustomJSON(t reflect.Type) bool {
	_, ok := reflect.Zero(t).Interface().(openAPISchemaType)
	return ok
}
