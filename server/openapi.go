package server

import (
	"net/http"
)

// openAPI serves /openapi/v2 and /openapi/v3.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	writeStatus(w, notFoundPath())
}
