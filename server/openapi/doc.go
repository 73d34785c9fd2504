// Package openapi serves the server's OpenAPI documents, v3 per group
// version (openapi.go) and v2 (openapi_v2.go): built-in resources from
// their Go types, custom resources from their definitions' schemas,
// rebuilt when the served resources change.
//
// # Concurrency
//
// Docs is safe for concurrent use; documents are built by the request
// that first needs them.
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
