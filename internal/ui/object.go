package ui

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/internal/explain"
)

// ObjectPage is the answer of GET /api/object: what the object page
// shows, computed as `objwatch blame`, `history` and `why` compute it.
type ObjectPage struct {
	Resource  string `json:"resource"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Exists is false when the object is gone (its history may remain).
	Exists bool `json:"exists"`
	// Blame is the object's YAML, a line each, with its annotations.
	Blame []explain.Line `json:"blame,omitempty"`
	// HistoryMissing says why there is no history (another Kubernetes
	// server, or no right to read it); empty when there is one.
	HistoryMissing string `json:"historyMissing,omitempty"`
	// HistoryNotes say where the history comes from and what it lacks.
	HistoryNotes []string   `json:"historyNotes,omitempty"`
	Revisions    []Revision `json:"revisions,omitempty"`
	Owners       []Link     `json:"owners,omitempty"`
	// Deleting is the deletion's start; Why explains what it waits for.
	Deleting *time.Time `json:"deleting,omitempty"`
	Why      string     `json:"why,omitempty"`
}

// Revision is one stored revision with the changes since the one before.
type Revision struct {
	ResourceVersion string          `json:"resourceVersion"`
	Time            *time.Time      `json:"time,omitempty"`
	Header          string          `json:"header"`
	Deleted         bool            `json:"deleted,omitempty"`
	Author          *explain.Author `json:"author,omitempty"`
	Changes         []Change        `json:"changes"`
}

// Link names another object the page can open.
type Link struct {
	Resource  string `json:"resource"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Kind      string `json:"kind,omitempty"`
}

// target is the object a request names: resource, namespace, name.
type target struct {
	res        client.Resource
	resource   string
	ns, name   string
	path       string
	unresolved error
}

func (s *Server) target(r *http.Request) (target, error) {
	q := r.URL.Query()
	t := target{ns: q.Get("namespace"), name: q.Get("name")}
	if q.Get("resource") == "" || t.name == "" {
		return t, errors.New("resource and name are required")
	}
	res, err := explain.ResolveResource(r.Context(), s.cfg.REST, q.Get("resource"))
	if err != nil {
		return t, err
	}
	t.res, t.resource = res, res.GVR.GroupResource().String()
	if !res.Namespaced {
		t.ns = ""
	} else if t.ns == "" {
		t.ns = "default"
	}
	t.path = objectPath(res, t.ns, t.name)
	return t, nil
}

// objectPath is the URL path of an object.
func objectPath(res client.Resource, ns, name string) string {
	p := "/api/" + res.GVR.Version
	if res.GVR.Group != "" {
		p = "/apis/" + res.GVR.Group + "/" + res.GVR.Version
	}
	if res.Namespaced {
		p += "/namespaces/" + url.PathEscape(ns)
	}
	return p + "/" + res.GVR.Resource + "/" + url.PathEscape(name)
}

// serveObject answers the object page's data.
func (s *Server) serveObject(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	t, err := s.target(r)
	if err != nil {
		apiError(w, http.StatusBadRequest, err)
		return
	}
	page, err := s.objectPage(ctx, t)
	if err != nil {
		apiError(w, http.StatusBadGateway, err)
		return
	}
	writeJSON(w, page)
}

func (s *Server) objectPage(ctx context.Context, t target) (*ObjectPage, error) {
	page := &ObjectPage{Resource: t.resource, Kind: t.res.Kind, Namespace: t.ns, Name: t.name}
	obj, err := client.NewUnstructured(s.cfg.REST, t.res).Get(ctx, t.ns, t.name, metav1.GetOptions{})
	switch {
	case err == nil:
		page.Exists = true
	case errors.Is(err, client.ErrNotFound):
	default:
		return nil, err
	}
	hist, err := explain.FetchHistory(ctx, s.cfg.REST, t.path)
	switch {
	case err == nil:
		page.HistoryNotes = hist.Notes()
		for _, rv := range hist.Revisions() {
			page.Revisions = append(page.Revisions, Revision{
				ResourceVersion: rv.ResourceVersion, Time: rv.Time, Header: rv.Header,
				Deleted: rv.Deleted, Author: rv.Author, Changes: changesOf(rv.Changes),
			})
		}
	case explain.NoHistory(err):
		page.HistoryMissing = "this server has no history of objects, or you may not read it (" + err.Error() + "): objwatch keeps every revision with its author; other Kubernetes servers do not. Blame shows field managers only."
	default:
		return nil, err
	}
	if obj == nil {
		if len(page.Revisions) == 0 {
			return nil, &client.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
				Message: t.resource + " " + t.name + " not found"}}
		}
		return page, nil
	}
	if page.Blame, err = explain.Blame(obj.Object, explain.HistoryAuthors(hist), s.cfg.Now()); err != nil {
		return nil, err
	}
	for _, o := range obj.GetOwnerReferences() {
		gv, _ := schema.ParseGroupVersion(o.APIVersion)
		res := strings.ToLower(o.Kind)
		if gv.Group != "" {
			res += "." + gv.Group
		}
		page.Owners = append(page.Owners, Link{Resource: res, Namespace: obj.GetNamespace(), Name: o.Name, Kind: o.Kind})
	}
	if ts := obj.GetDeletionTimestamp(); ts != nil {
		d := ts.Time
		page.Deleting = &d
		var b bytes.Buffer
		if err := explain.Why(ctx, s.cfg.REST, t.res, obj, s.cfg.Now(), &b); err != nil {
			b.WriteString("\n(could not explain further: " + err.Error() + ")")
		}
		page.Why = b.String()
	}
	return page, nil
}

// serveDiff answers the changes between two revisions of an object's
// history (from and to: resourceVersions).
func (s *Server) serveDiff(w http.ResponseWriter, r *http.Request) {
	t, err := s.target(r)
	if err != nil {
		apiError(w, http.StatusBadRequest, err)
		return
	}
	hist, err := explain.FetchHistory(r.Context(), s.cfg.REST, t.path)
	if err != nil {
		apiError(w, http.StatusBadGateway, err)
		return
	}
	q := r.URL.Query()
	from, to := revision(hist, q.Get("from")), revision(hist, q.Get("to"))
	if from == nil || to == nil {
		apiError(w, http.StatusNotFound, errors.New("from and to must be resourceVersions of the object's history"))
		return
	}
	d := change.Between(change.WithoutNoise(orEmpty(from)), change.WithoutNoise(orEmpty(to)))
	writeJSON(w, map[string]any{"changes": changesOf(d.Changes())})
}

func revision(h *explain.ObjectHistory, rv string) *explain.Item {
	for i := range h.Items {
		if h.Items[i].ResourceVersion == rv {
			return &h.Items[i]
		}
	}
	return nil
}

// orEmpty is a revision's object, or nothing for a deletion.
func orEmpty(it *explain.Item) map[string]any {
	if it.Deleted || it.Object == nil {
		return map[string]any{}
	}
	return it.Object
}

// serveDependents lists the objects whose ownerReferences name the
// object (reading every resource of its namespace: asked for apart).
func (s *Server) serveDependents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	t, err := s.target(r)
	if err != nil {
		apiError(w, http.StatusBadRequest, err)
		return
	}
	obj, err := client.NewUnstructured(s.cfg.REST, t.res).Get(ctx, t.ns, t.name, metav1.GetOptions{})
	if err != nil {
		apiError(w, http.StatusBadGateway, err)
		return
	}
	out := []Link{}
	err = explain.EachObject(ctx, s.cfg.REST, obj.GetNamespace(), func(res client.Resource, o *unstructured.Unstructured) {
		for _, ref := range o.GetOwnerReferences() {
			if ref.UID == obj.GetUID() {
				out = append(out, Link{Resource: res.GVR.GroupResource().String(), Namespace: o.GetNamespace(), Name: o.GetName(), Kind: res.Kind})
				return
			}
		}
	})
	if err != nil {
		apiError(w, http.StatusBadGateway, err)
		return
	}
	writeJSON(w, out)
}
