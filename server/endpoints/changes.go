package endpoints

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/audit"
	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// ChangesPath answers what changed in a window of time, across resources,
// from the server's history store:
//
//	GET /apis/objwatch.io/v1/changes?since=TIME[&until=TIME][&namespace=NS]
//	    [&resource=PLURAL[.GROUP]][&labelSelector=SEL][&limit=N]
//
// (or fromResourceVersion / toResourceVersion instead of since / until).
// A since before the retained history starts the window at its oldest
// revision (HistoryStartsLater says so); a fromResourceVersion before it
// is 410.
// Each item is one create, update or deletion, with its author and diff.
// Only resources the user may list (in their namespace) are included. It
// is objwatch's own endpoint, not in discovery.
const ChangesPath = "/apis/objwatch.io/v1/changes"

// maxChanges bounds the items of one answer (limit's default and most).
const maxChanges = 10_000

// ChangeList is the answer (kind ChangeList, apiVersion objwatch.io/v1).
type ChangeList struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	// FromResourceVersion and ToResourceVersion bound the window: the
	// changes after the first, up to the second. When Continue is set the
	// window was cut at the limit: ask again from it.
	FromResourceVersion string `json:"fromResourceVersion"`
	ToResourceVersion   string `json:"toResourceVersion"`
	Continue            string `json:"continue,omitempty"`
	// HistoryStartsLater: since was before the oldest revision the history
	// store retains; the window starts there instead.
	HistoryStartsLater bool         `json:"historyStartsLater,omitempty"`
	Items              []ChangeItem `json:"items"`
}

// ChangeItem is one change of one object.
type ChangeItem struct {
	// Type is ADDED, MODIFIED or DELETED.
	Type            string         `json:"type"`
	Group           string         `json:"group,omitempty"`
	Version         string         `json:"version"`
	Resource        string         `json:"resource"`
	Kind            string         `json:"kind"`
	Namespace       string         `json:"namespace,omitempty"`
	Name            string         `json:"name"`
	ResourceVersion string         `json:"resourceVersion"`
	Time            metav1.Time    `json:"time"`
	Author          *HistoryAuthor `json:"author,omitempty"`
	// InGap: deleted at some revision within a gap of the history.
	InGap        bool            `json:"inGap,omitempty"`
	Patch        json.RawMessage `json:"patch,omitempty"`
	ChangedPaths json.RawMessage `json:"changedPaths,omitempty"`
}

// errEnough stops a walk of the changes at the limit.
var errEnough = errors.New("enough")

// Changes serves ChangesPath, as a read under the same limits as a
// resource's: a read slot, the request timeout and a fair-queuing seat.
func (a *API) Changes(w http.ResponseWriter, r *http.Request) {
	r, release, ok := a.admitted(w, r, "list")
	if !ok {
		return
	}
	defer release()
	done, ok := a.execute(w, r)
	if !ok {
		return
	}
	defer done(0)
	if err := a.changes(w, r); err != nil {
		WriteStatus(w, err)
	}
}

func (a *API) changes(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return apistatus.New(http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "changes: only GET")
	}
	q := r.URL.Query()
	opts := objects.ChangesOptions{Namespace: q.Get("namespace")}
	if u, ok := auth.UserFrom(r.Context()); ok {
		opts.User = &u
	}
	var err error
	startsLater := false
	if opts.From, err = a.changesBound(r, "since", "fromResourceVersion", true); apierrors.IsResourceExpired(err) && q.Get("since") != "" {
		// Before the retained history: from its start.
		opts.From, startsLater, err = a.objects.HistoryOldest(), true, nil
	}
	if err != nil {
		return err
	}
	if opts.To, err = a.changesBound(r, "until", "toResourceVersion", false); err != nil {
		return err
	}
	if opts.To != 0 && opts.To < opts.From {
		return apistatus.BadRequest("changes: the window ends (%d) before it starts (%d)", opts.To, opts.From)
	}
	if s := q.Get("labelSelector"); s != "" {
		if opts.Selector, err = labels.Parse(s); err != nil {
			return apistatus.BadRequest("labelSelector: %v", err)
		}
	}
	if name := q.Get("resource"); name != "" {
		if opts.Resource = a.resourceNamed(name); opts.Resource == nil {
			return apistatus.BadRequest("resource: the server has no resource %q (PLURAL or PLURAL.GROUP)", name)
		}
	}
	limit := maxChanges
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit <= 0 || limit > maxChanges {
			return apistatus.BadRequest("limit: invalid value %q: a number from 1 to %d", s, maxChanges)
		}
	}
	out := ChangeList{Kind: "ChangeList", APIVersion: "objwatch.io/v1", FromResourceVersion: strconv.FormatInt(opts.From, 10), HistoryStartsLater: startsLater, Items: []ChangeItem{}}
	last := int64(0)
	err = a.objects.Changes(r.Context(), opts, func(c objects.ChangeItem) error {
		if len(out.Items) == limit && c.Revision != last {
			out.Continue = strconv.FormatInt(last, 10)
			return errEnough
		}
		last = c.Revision
		it := ChangeItem{Type: strings.ToUpper(c.Type), Group: c.Resource.Group, Version: c.Resource.Version, Resource: c.Resource.Plural, Kind: c.Resource.Kind,
			Namespace: c.Namespace, Name: c.Name, ResourceVersion: strconv.FormatInt(c.Revision, 10), Time: metav1.NewTime(c.Time), InGap: c.InGap}
		if au := c.Author; au != nil {
			it.Author = recordedAuthor(au, c.Time)
		}
		if c.Type != objects.Deleted {
			if patch, paths, err := audit.Diff(c.Old, c.Object); err == nil {
				it.Patch, it.ChangedPaths = patch, paths
			}
		}
		out.Items = append(out.Items, it)
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return err
	}
	out.ToResourceVersion = strconv.FormatInt(max(opts.To, last), 10)
	if opts.To == 0 && out.Continue == "" {
		out.ToResourceVersion = strconv.FormatInt(max(a.objects.HistoryRecorded(), last), 10)
	}
	WriteJSON(w, http.StatusOK, &out)
	return nil
}

// changesBound parses one end of the window: a time (timeParam, RFC 3339)
// or a revision (revParam). The start is required.
func (a *API) changesBound(r *http.Request, timeParam, revParam string, required bool) (int64, error) {
	q := r.URL.Query()
	t, rv := q.Get(timeParam), q.Get(revParam)
	switch {
	case t != "" && rv != "":
		return 0, apistatus.BadRequest("changes: %s and %s may not both be set", timeParam, revParam)
	case rv != "":
		n, err := strconv.ParseInt(rv, 10, 64)
		if err != nil || n < 0 {
			return 0, apistatus.BadRequest("%s: invalid value %q: a resourceVersion", revParam, rv)
		}
		return n, nil
	case t != "":
		at, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return 0, apistatus.BadRequest("%s: invalid value %q: want an RFC 3339 time such as 2026-12-04T09:30:00Z", timeParam, t)
		}
		return a.objects.RevisionAt(r.Context(), nil, at) // the main etcd cluster's
	case required:
		return 0, apistatus.BadRequest("changes: %s (or %s) is required", timeParam, revParam)
	}
	return 0, nil
}

// resourceNamed resolves PLURAL or PLURAL.GROUP to a served resource.
func (a *API) resourceNamed(name string) *registry.Resource {
	plural, group, _ := strings.Cut(name, ".")
	for _, res := range a.cfg.Registry.Resources() {
		if res.Plural == plural && res.Group == group {
			return res
		}
	}
	return nil
}
