package objects

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/history"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// maxEtcdPage bounds one etcd range read, as Kubernetes does.
const maxEtcdPage = 10000

// selector is a request's label and field selection.
type selector struct {
	labels labels.Selector
	fields fields.Selector
}

// matchAll selects everything.
var matchAll = selector{labels: labels.Everything(), fields: fields.Everything()}

func (s selector) empty() bool { return s.labels.Empty() && s.fields.Empty() }

func (s selector) matches(res *registry.Resource, o *unstructured.Unstructured) bool {
	if !s.labels.Empty() && !s.labels.Matches(labels.Set(o.GetLabels())) {
		return false
	}
	if s.fields.Empty() {
		return true
	}
	return s.fields.Matches(fieldSet(res, o))
}

func fieldSet(res *registry.Resource, o *unstructured.Unstructured) fields.Set {
	set := fields.Set{"metadata.name": o.GetName()}
	if res.Namespaced {
		set["metadata.namespace"] = o.GetNamespace()
	}
	if res.FieldLabels != nil {
		for k, v := range res.FieldLabels(o) {
			set[k] = v
		}
	}
	return set
}

// selectedName returns the name a field selector requires, if any.
func selectedName(o *internalversion.ListOptions) string {
	if o == nil || o.FieldSelector == nil {
		return ""
	}
	name, _ := o.FieldSelector.RequiresExactMatch("metadata.name")
	return name
}

// selectorOf takes a request's label and field selectors from its decoded
// options; a field the resource has no label for is 400, as in Kubernetes.
func selectorOf(o *internalversion.ListOptions, res *registry.Resource) (selector, error) {
	sel := matchAll
	if o.LabelSelector != nil {
		sel.labels = o.LabelSelector
	}
	if o.FieldSelector != nil {
		sel.fields = o.FieldSelector
	}
	known := fieldSet(res, &unstructured.Unstructured{Object: map[string]any{}})
	for _, req := range sel.fields.Requirements() {
		switch {
		case res.ValidFieldLabel != nil:
			if err := res.ValidFieldLabel(req.Field); err != nil {
				return selector{}, apistatus.BadRequest("%v", err)
			}
		case res.FieldLabels == nil:
			// Kubernetes' default field label conversion, of every
			// built-in kind without labels of its own: metadata.name and
			// metadata.namespace, whatever its scope (a cluster-scoped
			// object's namespace is "").
			if req.Field != "metadata.name" && req.Field != "metadata.namespace" {
				return selector{}, apistatus.BadRequest("%q is not a known field selector: only %q, %q", req.Field, "metadata.name", "metadata.namespace")
			}
		default:
			if _, ok := known[req.Field]; !ok {
				return selector{}, apistatus.BadRequest("field label not supported: %s", req.Field)
			}
		}
	}
	return sel, nil
}

// continueToken is the opaque continue parameter: the revision the list is
// read at and the key to resume after, relative to the resource prefix.
type continueToken struct {
	APIVersion string `json:"v"`
	RV         int64  `json:"rv"`
	Start      string `json:"start"`
	// Issued lets the server expire tokens after ContinueTTL.
	Issued int64 `json:"t,omitempty"`
}

func encodeContinue(rv int64, start string, now time.Time) string {
	b, _ := json.Marshal(continueToken{APIVersion: "meta.k8s.io/v1", RV: rv, Start: start, Issued: now.Unix()})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeContinue(s string) (continueToken, error) {
	var t continueToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return t, apistatus.BadRequest("continue key is not valid: %v", err)
	}
	if err := json.Unmarshal(b, &t); err != nil || t.APIVersion != "meta.k8s.io/v1" {
		return t, apistatus.BadRequest("continue key is not valid: %s", "unrecognized encoding")
	}
	if strings.Contains(t.Start, "..") || strings.HasPrefix(t.Start, "/") {
		return t, apistatus.BadRequest("continue key is not valid: %s", "invalid start key")
	}
	return t, nil
}

// listPlan is how a list request will be read.
type listPlan struct {
	rev      int64 // revision to read at; 0 = latest
	minRev   int64 // NotOlderThan: the store must have reached it
	limit    int64
	start    string // key to start at, relative to the prefix
	fromCont bool
	any      bool // resourceVersion "0": any state will do
}

// planList plans a list from its validated options (see listOptions);
// a continue token older than ttl has expired.
func planList(o *internalversion.ListOptions, ttl time.Duration) (listPlan, error) {
	rvStr, match, cont := o.ResourceVersion, o.ResourceVersionMatch, o.Continue
	p := listPlan{limit: o.Limit}
	rv, err := ParseRV(rvStr)
	if err != nil {
		return p, err
	}
	if cont != "" {
		if rvStr != "" && rvStr != "0" {
			return p, apistatus.BadRequest("specifying resource version is not allowed when using continue")
		}
		t, err := decodeContinue(cont)
		if err != nil {
			return p, err
		}
		if t.Issued > 0 && time.Since(time.Unix(t.Issued, 0)) > ttl && t.RV > 0 {
			return p, expiredContinue(t)
		}
		p.start, p.fromCont = t.Start, true
		if t.RV > 0 {
			p.rev = t.RV
		}
		return p, nil
	}
	switch {
	case rvStr == "":
		// Most recent: a consistent read.
	case rv == 0:
		p.any = true
	case match == metav1.ResourceVersionMatchExact || (match == "" && p.limit > 0):
		p.rev = rv
	default:
		p.minRev = rv
	}
	return p, nil
}

// expiredContinue is the 410 for a continue token whose revision is gone; it
// carries a token that continues from the same key at the latest revision.
func expiredContinue(t continueToken) error {
	st := apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
	st.ErrStatus.ListMeta.Continue = encodeContinue(-1, t.Start, time.Now())
	return st
}

// List is one page of a list, or all of it.
type List struct {
	Meta metav1.ListMeta
	// Items are the listed objects, decoded; nil when the list was served
	// from the watch cache, whose objects are already encoded: Raw holds
	// them then, each a JSON object with its resourceVersion.
	Items []*unstructured.Unstructured
	Raw   [][]byte
	// Cached are the watch cache's objects whose JSON Raw holds, in the
	// same order, when the list was served from the cache: they keep the
	// list's other encodings of them (Encoded). Shared: read only.
	Cached []*watchcache.Object
	made   *atomic.Int64 // counts the items Encoded encodes (Counts), if set
}

// Encoded returns the list's items in the encoding named key (see
// watchcache.Object.Encoded: each made by encode from the item's JSON
// once per object revision, and kept with the cached object for every
// later list). ok is false, and nothing is encoded, when the list was not
// served from the watch cache. Safe for concurrent use.
func (l *List) Encoded(key string, encode func(json []byte) ([]byte, error)) (items [][]byte, ok bool, err error) {
	if l.Cached == nil || len(l.Cached) != len(l.Raw) {
		return nil, false, nil
	}
	if l.made != nil {
		enc := encode
		encode = func(b []byte) ([]byte, error) {
			l.made.Add(1)
			return enc(b)
		}
	}
	items = make([][]byte, len(l.Cached))
	for i, o := range l.Cached {
		if items[i], err = o.Encoded(key, encode); err != nil {
			return nil, true, err
		}
	}
	return items, true, nil
}

// Objects returns the items decoded.
func (l *List) Objects() ([]*unstructured.Unstructured, error) {
	if l.Raw == nil {
		return l.Items, nil
	}
	out := make([]*unstructured.Unstructured, len(l.Raw))
	for i, b := range l.Raw {
		u, err := Decode(b)
		if err != nil {
			return nil, err
		}
		out[i] = u
	}
	return out, nil
}

// List reads the objects of req's resource (in req.Namespace, if set)
// that o selects, following Kubernetes' resourceVersion,
// resourceVersionMatch, limit and continue rules; o is decoded and
// validated. The watch cache answers where those rules allow (see
// Caches.list: all but a revision it has no snapshot of); etcd answers
// the rest, page by page with the same continue tokens.
func (s *Service) List(ctx context.Context, req *Request, o *internalversion.ListOptions) (*List, error) {
	req.SelectedName = selectedName(o)
	if err := s.hooks.authorize(ctx, req); err != nil {
		return nil, err
	}
	res := req.Resource
	sel, err := selectorOf(o, res)
	if err != nil {
		return nil, err
	}
	plan, err := planList(o, s.cfg.ContinueTTL)
	if err != nil {
		return nil, err
	}
	if l, err := s.caches.list(ctx, res, req.Namespace, sel, plan, req.User != nil); !errors.Is(err, errNoCache) {
		return l, err
	}
	if plan.minRev > 0 {
		if err := s.etcd.waitFor(ctx, res.StoragePrefix, plan.minRev); err != nil {
			return nil, err
		}
	}
	items, meta, err := s.etcd.list(ctx, res, req.Namespace, sel, plan)
	if err != nil {
		return nil, err
	}
	return &List{Meta: meta, Items: items}, nil
}

// ListAll reads, with a quorum read, every object of req's resource (in
// req.Namespace, if set) that o selects (nil: all), and the revision read
// at.
func (s *Service) ListAll(ctx context.Context, req *Request, o *internalversion.ListOptions) ([]*unstructured.Unstructured, int64, error) {
	if err := s.hooks.authorize(ctx, req); err != nil {
		return nil, 0, err
	}
	sel := matchAll
	if o != nil {
		var err error
		if sel, err = selectorOf(o, req.Resource); err != nil {
			return nil, 0, err
		}
	}
	return s.etcd.listAll(ctx, req.Resource, req.Namespace, sel)
}

// list reads one page (or everything, without a limit) of the
// resource's objects matching sel.
func (r *storeReader) list(ctx context.Context, res *registry.Resource, ns string, sel selector, plan listPlan) ([]*unstructured.Unstructured, metav1.ListMeta, error) {
	prefix := res.Prefix(ns)
	var meta metav1.ListMeta
	items := []*unstructured.Unstructured{}
	start := ""
	if plan.start != "" {
		start = prefix + plan.start
	}
	rev := plan.rev
	for {
		page := int64(maxEtcdPage)
		if plan.limit > 0 && plan.limit < page {
			page = plan.limit
		}
		lopts := storage.ListOptions{Revision: rev, Limit: page, StartKey: start}
		lr, err := r.store.List(ctx, prefix, lopts)
		var ce *storage.CompactedError
		if past := r.pastOf(prefix); errors.As(err, &ce) && past != nil && rev > 0 {
			// etcd compacted it: the history store answers.
			if lr, err = past.list(ctx, prefix, lopts); err != nil {
				if errors.Is(err, history.ErrNotRetained) && plan.fromCont {
					return nil, meta, expiredContinue(continueToken{Start: plan.start})
				}
				return nil, meta, pastError(err)
			}
		}
		if err != nil {
			if errors.As(err, &ce) && plan.fromCont {
				return nil, meta, expiredContinue(continueToken{Start: plan.start})
			}
			return nil, meta, apistatus.Storage(err, gr(res), "")
		}
		rev = lr.Revision
		// One conversion for the page: the selectors match the objects
		// in the version read.
		objs, err := decodeStored(ctx, res, lr.KVs)
		if conv := (*ConversionError)(nil); errors.As(err, &conv) {
			return nil, meta, conv.listError(gr(res))
		}
		if err != nil {
			return nil, meta, apierrors.NewInternalError(err)
		}
		for i, kv := range lr.KVs {
			obj := objs[i]
			if !sel.matches(res, obj) {
				continue
			}
			items = append(items, obj)
			if plan.limit > 0 && int64(len(items)) == plan.limit {
				if i < len(lr.KVs)-1 || lr.More {
					meta.Continue = encodeContinue(rev, strings.TrimPrefix(kv.Key, prefix)+"\x00", time.Now())
					if sel.empty() {
						n := lr.Remaining + int64(len(lr.KVs)-1-i)
						meta.RemainingItemCount = &n
					}
				}
				meta.ResourceVersion = strconv.FormatInt(rev, 10)
				return items, meta, nil
			}
		}
		if !lr.More {
			break
		}
		start = lr.KVs[len(lr.KVs)-1].Key + "\x00"
	}
	meta.ResourceVersion = strconv.FormatInt(rev, 10)
	return items, meta, nil
}

// listAll reads every matching object at the latest revision.
func (r *storeReader) listAll(ctx context.Context, res *registry.Resource, ns string, sel selector) ([]*unstructured.Unstructured, int64, error) {
	items, meta, err := r.list(ctx, res, ns, sel, listPlan{})
	if err != nil {
		return nil, 0, err
	}
	rev, _ := strconv.ParseInt(meta.ResourceVersion, 10, 64)
	return items, rev, nil
}
