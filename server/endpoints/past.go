package endpoints

import (
	"net/http"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/registry"
)

// AsOfParam reads the past: GET and LIST ?asOf=TIME (RFC 3339) answer the
// state at that moment, from etcd while it still has it, else from the
// server's history store. A GET also takes
// resourceVersion=N&resourceVersionMatch=Exact: the object as it was at
// revision N (kube-apiserver ignores resourceVersionMatch on a GET and
// answers a state no older than N). Both are authorized as a read now.
const AsOfParam = "asOf"

// asOf parses the request's asOf; ok is false without one.
func asOf(r *http.Request) (t time.Time, ok bool, err error) {
	q := r.URL.Query()
	if !q.Has(AsOfParam) {
		return time.Time{}, false, nil
	}
	v := q.Get(AsOfParam)
	if t, err = time.Parse(time.RFC3339Nano, v); err != nil {
		return time.Time{}, false, apistatus.BadRequest("asOf: invalid value %q: want an RFC 3339 time such as 2026-12-04T09:30:00Z", v)
	}
	if q.Get("resourceVersion") != "" || q.Get("resourceVersionMatch") != "" {
		return time.Time{}, false, apistatus.BadRequest("asOf: may not be set with resourceVersion or resourceVersionMatch")
	}
	return t, true, nil
}

// pastGet is the revision a GET asks for with asOf or an exact
// resourceVersion (0: neither).
func (a *API) pastGet(r *http.Request, res *registry.Resource, opts *metav1.GetOptions) (int64, error) {
	t, ok, err := asOf(r)
	if err != nil || ok {
		if err != nil {
			return 0, err
		}
		return a.objects.RevisionAt(r.Context(), res, t)
	}
	if r.URL.Query().Get("resourceVersionMatch") != string(metav1.ResourceVersionMatchExact) {
		return 0, nil
	}
	rev, err := strconv.ParseInt(opts.ResourceVersion, 10, 64)
	if err != nil || rev <= 0 {
		return 0, apistatus.BadRequest("resourceVersionMatch=Exact: resourceVersion must be a revision, got %q", opts.ResourceVersion)
	}
	return rev, nil
}

// pastList makes a LIST with asOf an exact list at the revision of that
// moment.
func (a *API) pastList(r *http.Request, res *registry.Resource, o *internalversion.ListOptions) error {
	t, ok, err := asOf(r)
	if err != nil || !ok {
		return err
	}
	if o.Continue != "" {
		return apistatus.BadRequest("asOf: may not be set with continue (the continue token holds the revision)")
	}
	rev, err := a.objects.RevisionAt(r.Context(), res, t)
	if err != nil {
		return err
	}
	o.ResourceVersion, o.ResourceVersionMatch = strconv.FormatInt(rev, 10), metav1.ResourceVersionMatchExact
	return nil
}
