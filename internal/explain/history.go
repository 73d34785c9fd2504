package explain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
)

// ObjectHistory is an objwatch server's answer to GET .../NAME/history
// (server/endpoints.ObjectHistory).
type ObjectHistory struct {
	Source            string `json:"source"`
	Complete          bool   `json:"complete"`
	CompactedRevision int64  `json:"compactedRevision"`
	OldestRevision    int64  `json:"oldestRevision"`
	Gaps              []Gap  `json:"gaps"`
	Items             []Item `json:"items"`
}

// Gap is a range of revisions the history could not record.
type Gap struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// Item is one stored revision of the object.
type Item struct {
	ResourceVersion string         `json:"resourceVersion"`
	Time            *time.Time     `json:"time"`
	Deleted         bool           `json:"deleted"`
	InGap           bool           `json:"inGap"`
	Object          map[string]any `json:"object"`
	Author          *Author        `json:"author"`
}

// Author is who made a change (server/endpoints.HistoryAuthor).
type Author struct {
	User             string    `json:"user"`
	Groups           []string  `json:"groups"`
	ImpersonatedUser string    `json:"impersonatedUser"`
	Verb             string    `json:"verb"`
	FieldManager     string    `json:"fieldManager"`
	Server           string    `json:"server"`
	Time             time.Time `json:"time"`
}

// Who is the author as one phrase: "alice update (kubectl, on server-1)".
func (a *Author) Who() string {
	s := a.Name()
	s += " " + a.Verb
	var via []string
	if a.FieldManager != "" {
		via = append(via, a.FieldManager)
	}
	if a.Server != "" {
		via = append(via, "on "+a.Server)
	}
	if len(via) > 0 {
		s += " (" + strings.Join(via, ", ") + ")"
	}
	return s
}

// Name is the author's user, "alice" or "alice as bob" when impersonating.
func (a *Author) Name() string {
	if a.ImpersonatedUser != "" {
		return a.User + " as " + a.ImpersonatedUser
	}
	return a.User
}

// FetchHistory reads the history subresource of the object at path (the
// object's URL path).
func FetchHistory(ctx context.Context, rc *client.REST, path string) (*ObjectHistory, error) {
	b, err := rc.Raw(ctx, path+"/history")
	if err != nil {
		return nil, err
	}
	var h ObjectHistory
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("decoding the history: %w", err)
	}
	return &h, nil
}

// NoHistory reports whether err, from FetchHistory, means the server has
// no history subresource (it is not objwatch) or the user may not read
// it: blame then has managedFields only.
func NoHistory(err error) bool {
	return errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrForbidden) || errors.Is(err, client.ErrMethodNotAllowed)
}

// Notes says where a history comes from and what it lacks, one sentence
// each (the command line prints them after "# ").
func (h *ObjectHistory) Notes() []string {
	var out []string
	authors := false
	for _, it := range h.Items {
		authors = authors || it.Author != nil
	}
	if h.Source != "history" {
		out = append(out, "from etcd's own history (this server keeps no history store: objwatch serve --history); compaction removes it")
		if !authors {
			out = append(out, "authors unknown: without a history store they come only from the server's audit log (objwatch serve --audit-log-path)")
		}
	}
	for _, g := range h.Gaps {
		out = append(out, fmt.Sprintf("revisions %d-%d could not be recorded (etcd compacted them while the history store was not reading)", g.From, g.To))
	}
	if !h.Complete {
		switch {
		case h.CompactedRevision > 0:
			out = append(out, fmt.Sprintf("revisions before %d were compacted; the oldest one kept is shown whole", h.CompactedRevision))
		case h.CompactedRevision < 0:
			out = append(out, "older revisions were compacted; the oldest one kept is shown whole")
		case h.Source == "history":
			out = append(out, fmt.Sprintf("the history store retains revisions from %d on; the oldest one shown is whole", h.OldestRevision))
		default:
			out = append(out, "older revisions are not shown; the oldest one shown is whole")
		}
	}
	return out
}

// Revision is one item of a history with its one-line header and the
// fields it changed since the item before (noise left out).
type Revision struct {
	Item
	Header  string
	Changes []change.Change
}

// Revisions lists h's items oldest first, each with its header ("rv=1250
// 2026-01-02T15:09:12Z bob update (kubectl-edit, on server-2)") and
// changes: none for a deletion or the creation after one; everything for
// the first item of an incomplete history (shown whole).
func (h *ObjectHistory) Revisions() []Revision {
	out := make([]Revision, 0, len(h.Items))
	var prev map[string]any
	for i, it := range h.Items {
		header := "rv=" + it.ResourceVersion
		if it.Time != nil {
			header += " " + it.Time.UTC().Format(time.RFC3339)
		}
		switch {
		case it.Author != nil:
			header += " " + it.Author.Who()
		case i == 0 && h.Complete:
			header += " created"
		}
		if it.Deleted {
			header += " deleted"
			if it.InGap {
				header += " (at some revision within the gap)"
			}
		}
		r := Revision{Item: it, Header: header}
		switch {
		case it.Deleted, i > 0 && h.Items[i-1].Deleted:
			// A deletion, or a new object of the same name: the header
			// says it all, as for the first creation.
		case i == 0 && !h.Complete:
			r.Changes = change.Between(map[string]any{}, change.WithoutNoise(it.Object)).Changes()
		case i > 0:
			r.Changes = change.Between(change.WithoutNoise(prev), change.WithoutNoise(it.Object)).Changes()
		}
		out = append(out, r)
		prev = it.Object
	}
	return out
}
