package endpoints

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/auth"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
)

// request is the object service's view of a resource request: the
// authenticated user and what the URL names.
func (info requestInfo) request(r *http.Request, res *registry.Resource) *objects.Request {
	req := &objects.Request{
		Verb: info.verb, Resource: res,
		Namespace: info.namespace, Name: info.name, Subresource: info.subresource,
	}
	if u, ok := auth.UserFrom(r.Context()); ok {
		req.User = &u
	}
	return req
}

// respond writes an object as the client asked for it (see negotiate).
func respond(w http.ResponseWriter, r *http.Request, res *registry.Resource, code int, obj *unstructured.Unstructured) error {
	o, err := negotiate(r, res)
	if err != nil {
		return err
	}
	v, err := o.object(res, obj)
	if err != nil {
		return err
	}
	return o.write(w, res, code, v)
}

func (a *API) get(w http.ResponseWriter, r *http.Request, req *objects.Request) error {
	obj, err := a.getObject(r, req)
	if err != nil {
		return err
	}
	return respond(w, r, req.Resource, http.StatusOK, obj)
}

// getObject reads the object a GET names, with the GET's options.
func (a *API) getObject(r *http.Request, req *objects.Request) (*unstructured.Unstructured, error) {
	opts, err := getOptions(r)
	if err != nil {
		return nil, err
	}
	rev, err := a.pastGet(r, req.Resource, opts)
	if err != nil {
		return nil, err
	}
	if rev > 0 {
		return a.objects.GetAt(r.Context(), req, rev)
	}
	return a.objects.Get(r.Context(), req, opts)
}

func (a *API) list(w http.ResponseWriter, r *http.Request, req *objects.Request) error {
	o, err := listOptions(r, req.Verb)
	if err != nil {
		return err
	}
	if err := a.pastList(r, req.Resource, o); err != nil {
		return err
	}
	l, err := a.objects.List(r.Context(), req, o)
	if err != nil {
		return err
	}
	res := req.Resource
	neg, err := negotiate(r, res)
	if err != nil {
		return err
	}
	ext, err := a.extensions(r, "list")
	switch {
	case err != nil:
		return err
	case ext.shaped() && (neg.as != "" || neg.enc != encJSON):
		return errShapedAs()
	case ext.project:
		neg.mask = ext.mask
	}
	if neg.as != "" {
		items, err := l.Objects()
		if err != nil {
			return err
		}
		v, err := neg.list(res, items, l.Meta)
		if err != nil {
			return err
		}
		return neg.write(w, res, http.StatusOK, v)
	}
	if neg.enc != encJSON {
		if done, err := writeCachedList(w, res, l, neg); done {
			return err
		}
		v, err := neg.wireList(res, l)
		if err != nil {
			return err
		}
		return neg.enc.encode(w, http.StatusOK, v)
	}
	if l.Raw != nil {
		return writeRawList(w, res, l, neg)
	}
	out := make([]any, len(l.Items))
	bare := bareItems(res)
	for i, it := range l.Items {
		obj := neg.listItem(it.Object)
		if bare {
			obj = withoutTypeMeta(obj)
		}
		out[i] = obj
	}
	WriteJSON(w, http.StatusOK, map[string]any{
		"kind": res.ListKind, "apiVersion": res.APIVersion(), "metadata": l.Meta, "items": out,
	})
	return nil
}

// writeRawList writes a list whose objects are already encoded (the watch
// cache's): the list is their concatenation (without their managedFields
// when o drops them, and without apiVersion and kind for a built-in kind,
// see bareItems).
func writeRawList(w http.ResponseWriter, res *registry.Resource, l *objects.List, o output) error {
	raw := l.Raw
	if o.drop || o.mask != nil {
		raw = make([][]byte, len(l.Raw))
		for i, b := range l.Raw {
			var err error
			if raw[i], err = o.rawJSON(b); err != nil {
				return apierrors.NewInternalError(err)
			}
		}
	}
	var parts []itemParts
	if bareItems(res) {
		parts = make([]itemParts, len(raw))
		for i, b := range raw {
			var err error
			if parts[i], err = bareItem(b); err != nil {
				return apierrors.NewInternalError(err)
			}
		}
	}
	meta, err := json.Marshal(l.Meta) // a page's continue and remainingItemCount too
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	head := make([]byte, 0, 96+len(meta))
	head = append(head, `{"kind":"`...)
	head = append(head, res.ListKind...)
	head = append(head, `","apiVersion":"`...)
	head = append(head, res.APIVersion()...)
	head = append(head, `","metadata":`...)
	head = append(head, meta...)
	head = append(head, `,"items":[`...)
	n := len(head) + len(listTail) + max(len(raw)-1, 0)
	for i, o := range raw {
		if parts != nil {
			n += parts[i].len()
		} else {
			n += len(o)
		}
	}
	streamList(w, "application/json", n, func(bw *bufio.Writer) {
		bw.Write(head)
		for i, o := range raw {
			if i > 0 {
				bw.WriteByte(',')
			}
			if parts != nil {
				parts[i].writeTo(bw)
			} else {
				bw.Write(o)
			}
		}
		bw.WriteString(listTail)
	})
	return nil
}

// streamList writes a list response of n bytes, the body written by
// write. Streamed through a small buffer with its length known up front,
// not gathered into one buffer of the whole list: a list of 10,000
// objects is 12 MB, and allocating and filling that took most of a cached
// list's CPU.
func streamList(w http.ResponseWriter, contentType string, n int, write func(*bufio.Writer)) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(n))
	w.WriteHeader(http.StatusOK)
	bw := listWriters.Get().(*bufio.Writer)
	bw.Reset(w)
	defer func() {
		bw.Reset(nil)
		listWriters.Put(bw)
	}()
	write(bw)
	bw.Flush()
}

const listTail = "]}"

// listWriters are the buffers lists are streamed through.
var listWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

func (a *API) create(w http.ResponseWriter, r *http.Request, req *objects.Request, info requestInfo) error {
	res, typeOf := req.Resource, req.Resource
	subReview := info.subresource != ""
	if subReview {
		typeOf = res.Reviews[info.subresource] // a TokenRequest for a service account's token
		if typeOf.Action != nil {
			return a.act(w, r, req, typeOf)
		}
	}
	opts, obj, err := a.bodies.readWrite(r, typeOf)
	if err != nil {
		return err
	}
	if info.name != "" && !subReview {
		return apierrors.NewMethodNotSupported(gr(res), "create on a named resource")
	}
	if !subReview {
		if err := checkNamespace(obj, res, info); err != nil {
			return err
		}
	}
	out, err := a.objects.Create(r.Context(), req, obj, opts)
	addWarnings(w, out.Warnings)
	if err != nil {
		return err
	}
	if o, err := negotiate(r, typeOf); err == nil && o.enc == encJSON && o.as == "" && !o.drop && out.Raw != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(out.Raw)
		return nil
	}
	return respond(w, r, typeOf, http.StatusCreated, out.Object)
}

// readWrite reads a write request's options and its object, whose
// apiVersion and kind must be those of typeOf.
func (bs *bodies) readWrite(r *http.Request, typeOf *registry.Resource) (objects.WriteOptions, *unstructured.Unstructured, error) {
	opts, err := parseWriteOptions(r)
	if err != nil {
		return opts, nil, err
	}
	body, err := bs.readBody(r)
	if err != nil {
		return opts, nil, err
	}
	obj, err := decodeBody(r, body)
	if err != nil {
		return opts, nil, err
	}
	if err := checkBodyTypeMeta(obj, typeOf); err != nil {
		return opts, nil, err
	}
	return opts, obj, checkManagedFields(obj, typeOf)
}

// checkManagedFields refuses a built-in object whose managedFields are not
// a list of entries, as kube-apiserver refuses to decode it. (Entries that
// decode but do not make sense are the field manager's to ignore, as
// kube-apiserver ignores them.)
func checkManagedFields(obj *unstructured.Unstructured, typeOf *registry.Resource) error {
	md, _ := obj.Object["metadata"].(map[string]any)
	mf, ok := md["managedFields"]
	if !ok || typeOf.Custom {
		return nil
	}
	if _, list := mf.([]any); list {
		return nil
	}
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"managedFields": mf}})
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	var v struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return apistatus.BadRequest("%s in version %q cannot be handled as a %s: %v", typeOf.Kind, typeOf.Version, typeOf.Kind, err)
	}
	return nil
}

// checkNamed checks that an update's object has the URL's name, and
// reconciles its namespace with the URL's.
func checkNamed(obj *unstructured.Unstructured, res *registry.Resource, info requestInfo) error {
	if obj.GetName() != info.name {
		return apistatus.BadRequest("the name of the object (%s) does not match the name on the URL (%s)", obj.GetName(), info.name)
	}
	return checkNamespace(obj, res, info)
}

// checkNamespace reconciles the object's namespace with the URL's.
func checkNamespace(obj *unstructured.Unstructured, res *registry.Resource, info requestInfo) error {
	if !res.Namespaced {
		obj.SetNamespace("")
		return nil
	}
	switch ns := obj.GetNamespace(); {
	case ns == "":
		obj.SetNamespace(info.namespace)
	case ns != info.namespace:
		return apistatus.BadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	if obj.GetNamespace() == "" {
		return apistatus.BadRequest("the namespace of the provided object is empty")
	}
	return nil
}

// update implements PUT on an object or its status.
func (a *API) update(w http.ResponseWriter, r *http.Request, req *objects.Request, info requestInfo) error {
	res := req.Resource
	opts, obj, err := a.bodies.readWrite(r, res)
	if err != nil {
		return err
	}
	if err := checkNamed(obj, res, info); err != nil {
		return err
	}
	if obj.GetResourceVersion() == "" && res.Custom {
		return apistatus.Invalid(res.GVK().GroupKind(), info.name, field.ErrorList{field.Invalid(field.NewPath("metadata", "resourceVersion"), "0x0", "must be specified for an update")})
	}
	if _, err := objects.ParseRV(obj.GetResourceVersion()); err != nil {
		return apistatus.Invalid(res.GVK().GroupKind(), info.name, field.ErrorList{field.Invalid(field.NewPath("metadata", "resourceVersion"), obj.GetResourceVersion(), "must be a number")})
	}
	out, err := a.objects.Update(r.Context(), req, opts, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		if uid := obj.GetUID(); uid != "" && cur != nil && uid != cur.GetUID() {
			// As kube-apiserver, whose storage takes an object's uid as a
			// precondition of its update.
			return nil, apierrors.NewConflict(gr(res), info.name, fmt.Errorf(
				"StorageError: invalid object, Code: 4, Key: %s, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: %v, UID in object meta: %v",
				res.Key(cur.GetNamespace(), cur.GetName()), uid, cur.GetUID()))
		}
		return obj.DeepCopy(), nil
	})
	addWarnings(w, out.Warnings)
	if err != nil {
		return err
	}
	return respond(w, r, res, http.StatusOK, out.Object)
}

func (a *API) delete(w http.ResponseWriter, r *http.Request, req *objects.Request) error {
	opts, err := a.bodies.deleteOptions(r)
	if err != nil {
		return err
	}
	out, err := a.objects.Delete(r.Context(), req, opts)
	addWarnings(w, out.Warnings)
	if err != nil {
		return err
	}
	res := req.Resource
	if !out.Deleted {
		// Kept while finalizers run: the object, and 202 when the client
		// asked for its dependents to be deleted (orphanDependents=false),
		// as Kubernetes answers.
		code := http.StatusOK
		//lint:ignore SA1019 a server honours the deprecated field, as Kubernetes does
		if o := opts.OrphanDependents; o != nil && !*o {
			code = http.StatusAccepted
		}
		return respond(w, r, res, code, out.Object)
	}
	return writeStatusObject(w, r, &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusSuccess,
		Details:  &metav1.StatusDetails{Name: req.Name, Group: res.Group, Kind: res.Plural, UID: out.Object.GetUID()},
	})
}

func (a *API) deleteCollection(w http.ResponseWriter, r *http.Request, req *objects.Request) error {
	res := req.Resource
	opts, err := a.bodies.deleteOptions(r)
	if err != nil {
		return err
	}
	lo, err := listOptions(r, req.Verb)
	if err != nil {
		return err
	}
	if err := a.objects.DeleteCollection(r.Context(), req, lo, opts); err != nil {
		return err
	}
	return writeStatusObject(w, r, &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusSuccess,
		Details:  &metav1.StatusDetails{Group: res.Group, Kind: res.Plural},
	})
}
