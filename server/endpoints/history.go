package endpoints

import (
	"encoding/json"
	"net/http"

	"github.com/objwatch/objwatch/server/audit"
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
	// Complete: Items start at the object's creation. Otherwise
	// CompactedRevision, when set, is etcd's compaction revision: older
	// states are gone (-1: compacted, revision unknown).
	Complete          bool          `json:"complete"`
	CompactedRevision int64         `json:"compactedRevision,omitempty"`
	Items             []HistoryItem `json:"items"`
}

// HistoryItem is one stored state with its diff from the one before (the
// first item's from nothing when it is the creation, else none) and, when
// the server's audit log records it, who wrote it.
type HistoryItem struct {
	ResourceVersion string          `json:"resourceVersion"`
	Object          json.RawMessage `json:"object"`
	Patch           json.RawMessage `json:"patch,omitempty"`
	ChangedPaths    json.RawMessage `json:"changedPaths,omitempty"`
	Author          *audit.Author   `json:"author,omitempty"`
}

func (a *API) history(w http.ResponseWriter, r *http.Request, req *objects.Request) error {
	get := *req
	get.Verb, get.Subresource = "get", ""
	h, err := a.objects.History(r.Context(), &get)
	if err != nil {
		return err
	}
	var authors map[string]audit.Author
	if a.cfg.Audit != nil {
		res := req.Resource
		if authors, err = a.cfg.Audit.Authors(res.Group, res.Plural, req.Namespace, req.Name); err != nil {
			a.cfg.Log.Warn("history: reading the audit log", "err", err)
		}
	}
	out := ObjectHistory{Kind: "ObjectHistory", APIVersion: "objwatch.io/v1", Complete: h.Complete,
		CompactedRevision: h.Compacted, Items: make([]HistoryItem, 0, len(h.Revisions))}
	for i, obj := range h.Revisions {
		b, err := json.Marshal(obj.Object)
		if err != nil {
			return err
		}
		it := HistoryItem{ResourceVersion: obj.GetResourceVersion(), Object: b}
		if i > 0 || h.Complete {
			var prev = h.Revisions[max(i-1, 0)]
			if i == 0 {
				prev = nil
			}
			if patch, paths, err := audit.Diff(prev, obj); err == nil {
				it.Patch, it.ChangedPaths = patch, paths
			}
		}
		if au, ok := authors[it.ResourceVersion]; ok {
			it.Author = &au
		}
		out.Items = append(out.Items, it)
	}
	WriteJSON(w, http.StatusOK, &out)
	return nil
}
