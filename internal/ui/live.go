package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/internal/explain"
)

// LiveEvent is one message of the live stream (GET /api/live): a change
// (ADDED, MODIFIED with its field-level changes and RFC 6902 patch,
// DELETED), or a NOTE (a relist, a gap), or READY when the stream starts.
type LiveEvent struct {
	Type            string             `json:"type"`
	Resource        string             `json:"resource,omitempty"`
	Namespace       string             `json:"namespace,omitempty"`
	Name            string             `json:"name,omitempty"`
	ResourceVersion string             `json:"resourceVersion,omitempty"`
	Time            time.Time          `json:"time"`
	Changes         []Change           `json:"changes,omitempty"`
	Patch           []change.Operation `json:"patch,omitempty"`
	Note            string             `json:"note,omitempty"`
	// Objects is, on READY, how many objects each resource had when its
	// watch started.
	Objects map[string]int `json:"objects,omitempty"`
}

// Change is one changed field, as objwatch watch -o json prints it.
type Change = explain.JSONChange

// changesOf converts change's changes for JSON.
func changesOf(cs []change.Change) []Change { return explain.JSONChanges(cs) }

// liveStream is one client's stream over one or more hubs.
type liveStream struct {
	names  []string // each hub's resource, as group-qualified plural, "@namespace" when several
	hubs   []*hub
	pos    []uint64
	filter *change.Filter
}

// cursor is the stream's position: each resource's cursor, URL-encoded
// (the SSE id, sent back as Last-Event-ID or ?after=).
func (l *liveStream) cursor() string {
	v := url.Values{}
	for i, h := range l.hubs {
		v.Set(l.names[i], h.at(l.pos[i]))
	}
	return v.Encode()
}

// serveLive streams changes as Server-Sent Events: resource (repeated),
// namespace (comma-separated; empty: all), selector (labels), fields (comma-separated
// patterns: only updates that changed one of them, with only those
// changes), after (a cursor; the Last-Event-ID header takes precedence).
// A stream that resumes gets every change after its cursor exactly once,
// or a NOTE saying which changes it could not get.
func (s *Server) serveLive(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ctx := r.Context()
	resources := q["resource"]
	if len(resources) == 0 || len(resources) > 16 {
		httpError(w, http.StatusBadRequest, "resource: give 1 to 16")
		return
	}
	l := &liveStream{}
	if f := strings.TrimSpace(q.Get("fields")); f != "" {
		filter, err := change.NewFilter(strings.Split(f, ",")...)
		if err != nil {
			httpError(w, http.StatusBadRequest, "fields: "+err.Error())
			return
		}
		l.filter = filter
	}
	cursorText := r.Header.Get("Last-Event-ID")
	if cursorText == "" {
		cursorText = q.Get("after")
	}
	cursor, err := url.ParseQuery(cursorText)
	if err != nil {
		httpError(w, http.StatusBadRequest, "Last-Event-ID: "+err.Error())
		return
	}
	var namespaces []string
	for _, ns := range strings.Split(q.Get("namespace"), ",") {
		if ns = strings.TrimSpace(ns); ns != "" && !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
	}
	if len(namespaces) == 0 {
		namespaces = []string{""} // all
	}
	for _, name := range resources {
		res, err := explain.ResolveResource(ctx, s.cfg.REST, name)
		if err != nil {
			apiError(w, http.StatusBadRequest, err)
			return
		}
		for _, ns := range namespaces {
			key := res.GVR.GroupResource().String()
			if !res.Namespaced {
				if ns != namespaces[0] {
					continue // once for a cluster-scoped resource
				}
				ns = ""
			} else if len(namespaces) > 1 {
				key += "@" + ns
			}
			if len(l.hubs) == 32 {
				httpError(w, http.StatusBadRequest, "at most 32 resources and namespaces in one stream")
				return
			}
			h := s.subscribe(hubKey{res: res, namespace: ns, selector: q.Get("selector")})
			defer s.release(h)
			l.hubs = append(l.hubs, h)
			l.names = append(l.names, key)
		}
	}
	ready := LiveEvent{Type: "READY", Time: s.cfg.Now(), Objects: map[string]int{}}
	var notes []string
	for i, h := range l.hubs {
		select {
		case <-h.ready:
		case <-ctx.Done():
			return
		}
		if h.err != nil {
			apiError(w, http.StatusBadGateway, h.err)
			return
		}
		ready.Objects[l.names[i]] = h.objects
		c := cursor.Get(l.names[i])
		p, lost := h.position(c)
		if lost {
			notes = append(notes, fmt.Sprintf("%s: the changes after resourceVersion %s are no longer held here; relisted, showing changes from now on", l.names[i], c))
		}
		l.pos = append(l.pos, p)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	id := l.cursor()
	if cursorText != "" {
		ready.Note = "resumed"
	}
	writeSSE(w, id, ready)
	for _, n := range notes {
		writeSSE(w, id, LiveEvent{Type: "NOTE", Time: s.cfg.Now(), Note: n})
	}
	if rc.Flush() != nil {
		return
	}
	s.stream(ctx, w, rc, l)
}

// stream writes the hubs' events as they come, a batch per flush, until
// ctx ends or the server closes.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, l *liveStream) {
	wake := make(chan struct{}, 1)
	for _, h := range l.hubs {
		h.watchWake(wake, true)
		defer h.watchWake(wake, false)
	}
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		wrote := false
		for i, h := range l.hubs {
			evs, gap := h.since(l.pos[i], 512)
			if gap {
				writeSSE(w, l.cursor(), LiveEvent{Type: "NOTE", Time: s.cfg.Now(),
					Note: fmt.Sprintf("%s: this page fell behind; some changes were skipped", l.names[i])})
				wrote = true
			}
			for _, e := range evs {
				l.pos[i] = e.seq
				if le, ok := l.event(l.names[i], &e); ok {
					writeSSE(w, l.cursor(), le)
					wrote = true
				}
			}
			if len(evs) > 0 && !wrote {
				fmt.Fprintf(w, "id: %s\n\n", l.cursor()) // filtered out: advance the id only
				wrote = true
			}
		}
		if wrote {
			if rc.Flush() != nil {
				return
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-s.ctx.Done():
			return
		case <-wake:
		case <-keepalive.C:
			fmt.Fprint(w, ": keepalive\n\n")
			if rc.Flush() != nil {
				return
			}
		}
	}
}

// event is e as the stream sends it, unless the stream's field filter
// leaves it out.
func (l *liveStream) event(resource string, e *hubEvent) (LiveEvent, bool) {
	resource, _, _ = strings.Cut(resource, "@") // the namespace is the event's own
	le := LiveEvent{Type: e.typ, Resource: resource, ResourceVersion: e.rv, Time: e.time, Note: e.note}
	if e.obj != nil {
		le.Namespace, le.Name = e.obj.GetNamespace(), e.obj.GetName()
		if e.typ == "DELETED" {
			le.ResourceVersion = e.obj.GetResourceVersion()
		}
	}
	if e.diff != nil {
		cs := e.diff.Changes()
		if l.filter != nil {
			if !l.filter.Match(e.diff) {
				return le, false
			}
			cs = l.filter.Changes(e.diff)
		}
		le.Changes = changesOf(cs)
		le.Patch = e.diff.Patch()
	}
	return le, true
}

// writeSSE writes one event.
func writeSSE(w http.ResponseWriter, id string, e LiveEvent) {
	b, err := json.Marshal(e)
	if err != nil {
		b, _ = json.Marshal(LiveEvent{Type: "NOTE", Time: e.Time, Note: "an event could not be encoded: " + err.Error()})
	}
	fmt.Fprintf(w, "id: %s\nevent: change\ndata: %s\n\n", id, b)
}

// serveResources lists the resources that can be watched, for the
// page's pickers.
func (s *Server) serveResources(w http.ResponseWriter, r *http.Request) {
	type resource struct {
		Name       string `json:"name"`
		Kind       string `json:"kind"`
		Namespaced bool   `json:"namespaced"`
	}
	var out []resource
	err := explain.EachResource(r.Context(), s.cfg.REST, func(res client.Resource, verbs []string) {
		if hasVerb(verbs, "watch") && hasVerb(verbs, "list") {
			out = append(out, resource{Name: res.GVR.GroupResource().String(), Kind: res.Kind, Namespaced: res.Namespaced})
		}
	})
	if err != nil {
		apiError(w, http.StatusBadGateway, err)
		return
	}
	writeJSON(w, out)
}

func hasVerb(verbs []string, v string) bool {
	for _, x := range verbs {
		if x == v {
			return true
		}
	}
	return false
}
