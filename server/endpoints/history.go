package endpoints

import (
	"encoding/json"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/server/history"
	"github.com/objwatch/objwatch/server/objects"
)

// HistorySubresource is the subresource that answers an object's history:
// GET .../NAME/history. It is authorized as a get of the object itself.
const HistorySubresource = "history"

// ObjectHistory is the answer of a history request (kind ObjectHistory,
// apiVersion objwatch.io/v1).
type ObjectHistory struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	// Source is where the history comes from: "history" (the server's
	// history store: every retained change of the name, deletions and
	// earlier objects of the same name included, each with its author) or
	// "etcd" (what etcd still has of the current object; authors only from
	// the server's audit log).
	Source string `json:"source"`
	// Complete: Items start at the object's creation. Otherwise
	// CompactedRevision, when set, is etcd's compaction revision: older
	// states are gone (-1: compacted, revision unknown).
	Complete          bool  `json:"complete"`
	CompactedRevision int64 `json:"compactedRevision,omitempty"`
	// OldestRevision is the history store's oldest retained revision;
	// Gaps the revisions it could not record (etcd compacted them first).
	OldestRevision int64         `json:"oldestRevision,omitempty"`
	Gaps           []history.Gap `json:"gaps,omitempty"`
	Items          []HistoryItem `json:"items"`
}

// HistoryItem is one stored state with its diff from the one before (the
// first item's from nothing when it is the creation, else none) and who
// wrote it, when known. A deletion (Deleted) is the object as it was
// deleted, at the deletion's resourceVersion; InGap: it was deleted at
// some revision within a gap, not at that one.
type HistoryItem struct {
	ResourceVersion string          `json:"resourceVersion"`
	Time            *metav1.Time    `json:"time,omitempty"`
	Deleted         bool            `json:"deleted,omitempty"`
	InGap           bool            `json:"inGap,omitempty"`
	Object          json.RawMessage `json:"object"`
	Patch           json.RawMessage `json:"patch,omitempty"`
	ChangedPaths    json.RawMessage `json:"changedPaths,omitempty"`
	Author          *HistoryAuthor  `json:"author,omitempty"`
}

// HistoryAuthor is who made a change: from the history store (user,
// groups, verb, field manager, server) or the audit log (user,
// impersonated user, verb, audit ID).
type HistoryAuthor struct {
	User             string    `json:"user"`
	Groups           []string  `json:"groups,omitempty"`
	ImpersonatedUser string    `json:"impersonatedUser,omitempty"`
	Verb             string    `json:"verb"`
	FieldManager     string    `json:"fieldManager,omitempty"`
	Server           string    `json:"server,omitempty"`
	AuditID          string    `json:"auditID,omitempty"`
	Time             time.Time `json:"time"`
}

// recordedAuthor is the wire form of an author the history store
// recorded, who wrote at t.
func recordedAuthor(au *history.Author, t time.Time) *HistoryAuthor {
	return &HistoryAuthor{User: au.User, Groups: au.Groups, Verb: au.Verb, FieldManager: au.Manager, Server: au.Server, Time: t}
}

func (a *API) history(w http.ResponseWriter, r *http.Request, req *objects.Request) error {
	get := *req
	get.Verb, get.Subresource = "get", ""
	h, err := a.objects.History(r.Context(), &get)
	if err != nil {
		return err
	}
	authors := map[string]audit.Author{}
	if a.cfg.Audit != nil && h.Changes == nil {
		res := req.Resource
		if authors, err = a.cfg.Audit.Authors(res.Group, res.Plural, req.Namespace, req.Name); err != nil {
			a.cfg.Log.Warn("history: reading the audit log", "err", err)
		}
	}
	out := ObjectHistory{Kind: "ObjectHistory", APIVersion: "objwatch.io/v1", Source: "etcd", Complete: h.Complete,
		CompactedRevision: h.Compacted, Items: make([]HistoryItem, 0, len(h.Revisions))}
	if h.Changes != nil {
		out.Source, out.OldestRevision, out.Gaps = "history", h.Oldest, h.Gaps
	}
	for i, obj := range h.Revisions {
		b, err := json.Marshal(obj.Object)
		if err != nil {
			return err
		}
		it := HistoryItem{ResourceVersion: obj.GetResourceVersion(), Object: b}
		var prev *unstructured.Unstructured
		diff := i > 0 || h.Complete
		if i > 0 {
			prev = h.Revisions[i-1]
		}
		if h.Changes != nil {
			c := h.Changes[i]
			t := metav1.NewTime(c.Time)
			it.Time, it.Deleted, it.InGap = &t, c.Deleted, c.InGap
			if c.Author != nil {
				it.Author = recordedAuthor(c.Author, c.Time)
			}
			switch {
			case c.Deleted:
				diff = false
			case i > 0 && h.Changes[i-1].Deleted:
				prev = nil // a new object of the same name: from nothing
			}
		}
		if diff {
			if patch, paths, err := audit.Diff(prev, obj); err == nil {
				it.Patch, it.ChangedPaths = patch, paths
			}
		}
		if au, ok := authors[it.ResourceVersion]; ok {
			t := metav1.NewTime(au.Time)
			it.Time = &t
			it.Author = &HistoryAuthor{User: au.User, ImpersonatedUser: au.ImpersonatedUser, Verb: au.Verb, AuditID: au.AuditID, Time: au.Time}
		}
		out.Items = append(out.Items, it)
	}
	WriteJSON(w, http.StatusOK, &out)
	return nil
}
