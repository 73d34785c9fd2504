package ui

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/objwatch/objwatch/internal/explain"
)

var errAuditUnavailable = errors.New("no audit log to search: the API server does not serve its audit log; start objwatch ui with --audit-log PATH (the file of objwatch serve --audit-log-path) on the server's host")

// AuditQuery is what the page's audit search asks for; empty fields
// match everything.
type AuditQuery struct {
	User, Verb, Resource, Namespace, Name string
	Since                                 time.Time
	// Limit is how many records to return at most (the newest).
	Limit int
}

// AuditRecord is one audit record as the page shows it.
type AuditRecord struct {
	Time      time.Time `json:"time"`
	User      string    `json:"user"`
	Verb      string    `json:"verb"`
	Resource  string    `json:"resource,omitempty"`
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name,omitempty"`
	URI       string    `json:"uri"`
	Code      int32     `json:"code,omitempty"`
	RV        string    `json:"resourceVersion,omitempty"`
	Lines     []string  `json:"lines,omitempty"`
}

// AuditSearch searches an audit log: the command line gives one that
// reads the files of `objwatch serve --audit-log-path`, as `objwatch
// audit query` does.
type AuditSearch func(ctx context.Context, q AuditQuery) ([]AuditRecord, error)

// serveAudit answers an audit search: user, verb, resource, namespace,
// name, since (an RFC 3339 time or a duration ago), limit.
func (s *Server) serveAudit(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Audit == nil {
		apiError(w, http.StatusNotImplemented, errAuditUnavailable)
		return
	}
	q := r.URL.Query()
	aq := AuditQuery{User: q.Get("user"), Verb: q.Get("verb"), Resource: q.Get("resource"), Namespace: q.Get("namespace"), Name: q.Get("name"), Limit: 500}
	if v := q.Get("since"); v != "" {
		t, err := explain.ParseMoment(v, s.cfg.Now())
		if err != nil {
			apiError(w, http.StatusBadRequest, err)
			return
		}
		aq.Since = t
	}
	recs, err := s.cfg.Audit(r.Context(), aq)
	if err != nil {
		apiError(w, http.StatusInternalServerError, err)
		return
	}
	if recs == nil {
		recs = []AuditRecord{}
	}
	writeJSON(w, recs)
}
