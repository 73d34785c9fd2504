// Package openapi serves the server's OpenAPI documents, v3 per group
// version (openapi.go) and v2 (openapi_v2.go): built-in resources with
// the definitions openapi-gen generates for kube-apiserver
// (k8s.io/kubernetes/pkg/generated/openapi: descriptions, required
// fields, enums, defaults and the list-type, list-map-keys and map-type
// markers), less the fields of disabled feature gates, as kube-apiserver
// filters them (openapi_builtin.go); custom resources from their
// definitions' schemas. Documents are rebuilt when the served resources
// change. BuiltinModels gives the built-in kinds' models to server-side
// apply (package fieldmanager) and admission policies.
//
// # Concurrency
//
// Docs is safe for concurrent use; documents are built by the request
// that first needs them, never at start-up.
package openapi

import (
	"log/slog"

	"github.com/objwatch/objwatch/server/registry"
)

// Docs serves the documents of a registry's resources.
type Docs struct {
	registry *registry.Registry
	log      *slog.Logger
	version  string // the server's version, in each document's info
	v3       openAPIDocs
	v2       openAPIV2Doc
}

// New returns the documents of r's resources.
func New(r *registry.Registry, log *slog.Logger, version string) *Docs {
	return &Docs{registry: r, log: log, version: version}
}
