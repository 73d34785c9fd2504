package ui

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/objwatch/objwatch/internal/explain"
)

// Timeline is the answer of GET /api/timeline: what was created,
// changed and deleted in a namespace in a window, as `objwatch changes`
// reads it, with the counts per minute the chart draws.
type Timeline struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// HistoryStartsLater: the server's history starts after Since.
	HistoryStartsLater bool `json:"historyStartsLater,omitempty"`
	// Truncated: more changes than MaxTimeline; the newest are left out.
	Truncated bool           `json:"truncated,omitempty"`
	Items     []TimelineItem `json:"items"`
	// Minutes are the starts of the chart's minutes; ByResource and
	// ByUser count the changes of each minute.
	Minutes    []time.Time      `json:"minutes"`
	ByResource map[string][]int `json:"byResource"`
	ByUser     map[string][]int `json:"byUser"`
	// Totals counts the items by type (ADDED, MODIFIED, DELETED).
	Totals map[string]int `json:"totals"`
}

// TimelineItem is one change.
type TimelineItem struct {
	Type            string    `json:"type"`
	Resource        string    `json:"resource"`
	Namespace       string    `json:"namespace,omitempty"`
	Name            string    `json:"name"`
	ResourceVersion string    `json:"resourceVersion"`
	Time            time.Time `json:"time"`
	User            string    `json:"user"`
	Who             string    `json:"who"`
	Lines           []string  `json:"lines,omitempty"`
}

// MaxTimeline bounds the changes a timeline holds.
const MaxTimeline = 5000

// maxMinutes bounds the chart's width.
const maxMinutes = 24 * 60

// serveTimeline answers a namespace's changes: namespace (empty: all),
// since (an RFC 3339 time or a duration ago; default 1h), until,
// resource.
func (s *Server) serveTimeline(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	now := s.cfg.Now()
	sinceText := q.Get("since")
	if sinceText == "" {
		sinceText = "1h"
	}
	since, err := explain.ParseMoment(sinceText, now)
	if err != nil {
		apiError(w, http.StatusBadRequest, errors.New("since "+err.Error()))
		return
	}
	until := now
	if u := q.Get("until"); u != "" {
		if until, err = explain.ParseMoment(u, now); err != nil {
			apiError(w, http.StatusBadRequest, errors.New("until "+err.Error()))
			return
		}
	}
	if !until.After(since) {
		apiError(w, http.StatusBadRequest, errors.New("until must be after since"))
		return
	}
	if err := explain.RequireHistory(ctx, s.cfg.REST, "timeline"); err != nil {
		apiError(w, http.StatusNotImplemented, err)
		return
	}
	sq := url.Values{"since": {since.UTC().Format(time.RFC3339Nano)}, "until": {until.UTC().Format(time.RFC3339Nano)}}
	if ns := q.Get("namespace"); ns != "" {
		sq.Set("namespace", ns)
	}
	if res := q.Get("resource"); res != "" {
		rr, err := explain.ResolveResource(ctx, s.cfg.REST, res)
		if err != nil {
			apiError(w, http.StatusBadRequest, err)
			return
		}
		sq.Set("resource", rr.GVR.GroupResource().String())
	}
	tl := &Timeline{Since: since, Until: until, Items: []TimelineItem{}, Totals: map[string]int{}}
	for {
		b, err := s.cfg.REST.RawQuery(ctx, "/apis/objwatch.io/v1/changes", sq)
		if err != nil {
			apiError(w, http.StatusBadGateway, err)
			return
		}
		var l explain.ChangeList
		if err := json.Unmarshal(b, &l); err != nil {
			apiError(w, http.StatusBadGateway, err)
			return
		}
		tl.HistoryStartsLater = tl.HistoryStartsLater || l.HistoryStartsLater
		for _, it := range l.Items {
			if len(tl.Items) == MaxTimeline {
				tl.Truncated = true
				break
			}
			ti := TimelineItem{Type: it.Type, Resource: it.Resource, Namespace: it.Namespace, Name: it.Name,
				ResourceVersion: it.ResourceVersion, Time: it.Time, User: "(unknown)", Who: "unknown author"}
			if it.Group != "" {
				ti.Resource += "." + it.Group
			}
			if it.Author != nil {
				ti.User, ti.Who = it.Author.Name(), it.Author.Who()
			}
			if it.Type == "MODIFIED" {
				ti.Lines = explain.PatchLines(it.Patch)
			}
			tl.Items = append(tl.Items, ti)
		}
		if l.Continue == "" || tl.Truncated {
			break
		}
		sq.Del("since")
		sq.Set("fromResourceVersion", l.Continue)
	}
	tl.chart()
	writeJSON(w, tl)
}

// chart counts the items per minute, by resource and by user.
func (tl *Timeline) chart() {
	start := tl.Since.Truncate(time.Minute)
	n := min(int(tl.Until.Sub(start)/time.Minute)+1, maxMinutes)
	step := time.Minute
	if m := int(tl.Until.Sub(start)/time.Minute) + 1; m > maxMinutes {
		step = time.Duration((m+maxMinutes-1)/maxMinutes) * time.Minute
		n = int(tl.Until.Sub(start)/step) + 1
	}
	tl.Minutes = make([]time.Time, n)
	for i := range tl.Minutes {
		tl.Minutes[i] = start.Add(time.Duration(i) * step)
	}
	tl.ByResource, tl.ByUser = map[string][]int{}, map[string][]int{}
	for _, it := range tl.Items {
		tl.Totals[it.Type]++
		i := int(it.Time.Sub(start) / step)
		i = max(0, min(i, n-1))
		for _, m := range []struct {
			counts map[string][]int
			key    string
		}{{tl.ByResource, it.Resource}, {tl.ByUser, it.User}} {
			if m.counts[m.key] == nil {
				m.counts[m.key] = make([]int, n)
			}
			m.counts[m.key][i]++
		}
	}
}
