package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

func notFoundPath() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeUnexpectedServerResponse, Message: "404 page not found"}}},
	}}
}

// serveResource handles every request on a resource path.
func (s *Server) serveResource(w http.ResponseWriter, r *http.Request, info requestInfo) {
	res, ok := s.registry.Get(info.gvr)
	if !ok {
		writeStatus(w, notFoundPath())
		return
	}
	if info.namespaceSet && !res.Namespaced {
		writeStatus(w, notFoundPath())
		return
	}
	own := res.Lifecycle != nil && res.Lifecycle.UpdateSubresource != "" && info.subresource == res.Lifecycle.UpdateSubresource
	if info.subresource != "" && !(info.subresource == "status" && res.Status) && !(info.subresource == "scale" && res.Scale != nil) && !own {
		writeStatus(w, notFoundPath())
		return
	}
	if info.verb == "watch" && r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeStatus(w, apierrors.NewMethodNotSupported(s.gr(res), strings.ToLower(r.Method)))
		return
	}
	if own && info.verb != "update" {
		writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Group: res.Group, Resource: res.Plural + "/" + info.subresource}, info.verb))
		return
	}
	if info.namespaceSet && info.namespace == "" {
		writeStatus(w, badRequest("namespace must not be empty"))
		return
	}
	if res.DeprecationWarning != "" {
		// Every request to a deprecated version, as kube-apiserver warns.
		addWarnings(w, []string{res.DeprecationWarning})
	}
	s.instrument(w, info, func(w http.ResponseWriter) {
		if info.verb == "watch" && info.subresource != "scale" {
			s.watch(w, r, res, info)
			return
		}
		release, ok := s.limitInFlight(w, info.verb)
		if !ok {
			return
		}
		defer release()
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		r = r.WithContext(ctx)
		var err error
		switch {
		case info.subresource == "scale":
			err = s.serveScale(w, r, res, info)
		case info.verb == "get":
			err = s.get(w, r, res, info)
		case info.verb == "list":
			err = s.list(w, r, res, info)
		case info.verb == "create":
			err = s.create(w, r, res, info)
		case info.verb == "update":
			err = s.update(w, r, res, info)
		case info.verb == "patch":
			err = s.patch(w, r, res, info)
		case info.verb == "delete":
			err = s.delete(w, r, res, info)
		case info.verb == "deletecollection" && res.Lifecycle != nil && res.Lifecycle.NoDeleteCollection:
			err = apierrors.NewMethodNotSupported(s.gr(res), info.verb)
		case info.verb == "deletecollection":
			err = s.deleteCollection(w, r, res, info)
		default:
			err = apierrors.NewMethodNotSupported(res.GVR().GroupResource(), info.verb)
		}
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() != nil {
				err = apierrors.NewTimeoutError("request did not complete within the allowed duration", 1)
			}
			writeStatus(w, err)
		}
	})
}

func (s *Server) gr(res *registry.Resource) schema.GroupResource {
	return schema.GroupResource{Group: res.Group, Resource: res.Plural}
}

// respond writes an object, or a Table of it when the client asked for one.
func (s *Server) respond(w http.ResponseWriter, r *http.Request, res *registry.Resource, code int, obj *unstructured.Unstructured) error {
	if v, ok := wantsTable(r); ok {
		t := table(res, v, []*unstructured.Unstructured{obj}, r.URL.Query().Get("includeObject"))
		t.ResourceVersion = obj.GetResourceVersion()
		writeJSON(w, code, t)
		return nil
	}
	writeJSON(w, code, obj.Object)
	return nil
}

// waitForRevision waits until the store has reached rev, up to
// FutureRVWait; then it is a 504 "Too large resource version".
func (s *Server) waitForRevision(ctx context.Context, rev int64) error {
	deadline := time.Now().Add(s.cfg.FutureRVWait)
	for {
		cur, err := s.store.Revision(ctx)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		if cur >= rev {
			return nil
		}
		if time.Now().After(deadline) {
			return tooLarge()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// getCurrent reads an object with a quorum read.
func (s *Server) getCurrent(ctx context.Context, res *registry.Resource, ns, name string) (*unstructured.Unstructured, storage.KeyValue, error) {
	kv, err := s.store.Get(ctx, res.Key(ns, name))
	if err != nil {
		return nil, kv, storageError(err, s.gr(res), name)
	}
	return decodeCurrent(res, kv)
}

// decodeCurrent decodes a stored value read from etcd for an update.
func decodeCurrent(res *registry.Resource, kv storage.KeyValue) (*unstructured.Unstructured, storage.KeyValue, error) {
	obj, err := fromStorage(res, kv)
	if err != nil {
		return nil, kv, apierrors.NewInternalError(err)
	}
	return obj, kv, nil
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, res *registry.Resource, info requestInfo) error {
	obj, err := s.getObject(r, res, info)
	if err != nil {
		return err
	}
	return s.respond(w, r, res, http.StatusOK, obj)
}

// getObject reads the object a GET names, no older than the request's
// resourceVersion parameter.
func (s *Server) getObject(r *http.Request, res *registry.Resource, info requestInfo) (*unstructured.Unstructured, error) {
	rv, err := parseRV(r.URL.Query().Get("resourceVersion"))
	if err != nil {
		return nil, err
	}
	if r.URL.Query().Has("resourceVersion") {
		// "0" (any) or "not older than": the watch cache may answer.
		if obj, err := s.getFromCache(r.Context(), res, info, rv); !errors.Is(err, errNoCache) {
			return obj, err
		}
	}
	if rv > 0 {
		if err := s.waitForRevision(r.Context(), rv); err != nil {
			return nil, err
		}
	}
	obj, _, err := s.getCurrent(r.Context(), res, info.namespace, info.name)
	return obj, err
}

// normalize applies the resource's schema to obj and handles unknown
// fields per fieldValidation (Warn is the default, as in Kubernetes): it
// returns the warnings to send.
func (s *Server) normalize(res *registry.Resource, obj, old *unstructured.Unstructured, opts writeOptions) ([]string, error) {
	unknown, err := res.Strategy.Normalize(obj.Object, objectOf(old))
	if err != nil {
		return nil, badRequest("%v", err)
	}
	if len(unknown) == 0 {
		return nil, nil
	}
	switch opts.fieldValidation {
	case "Strict":
		return nil, strictErr(unknown)
	case "Ignore":
		return nil, nil
	}
	warnings := make([]string, len(unknown))
	for i, u := range unknown {
		warnings[i] = fmt.Sprintf("unknown field %q", u)
	}
	return warnings, nil
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, res *registry.Resource, info requestInfo) error {
	opts, obj, err := s.readWrite(r, res)
	if err != nil {
		return err
	}
	if info.name != "" {
		return apierrors.NewMethodNotSupported(s.gr(res), "create on a named resource")
	}
	if err := checkNamespace(obj, res, info); err != nil {
		return err
	}
	if obj.GetName() == "" && obj.GetGenerateName() != "" {
		obj.SetName(obj.GetGenerateName() + rand.String(5))
	}
	if obj.GetName() == "" {
		return invalid(res.GVK().GroupKind(), "", field.ErrorList{field.Required(field.NewPath("metadata", "name"), "name or generateName is required")})
	}
	prepareCreate(obj, res)
	warnings, err := s.normalize(res, obj, nil, opts)
	if err != nil {
		return err
	}
	addWarnings(w, warnings)
	if errs := res.Strategy.Validate(obj.Object, nil); len(errs) > 0 {
		return invalid(res.GVK().GroupKind(), obj.GetName(), errs)
	}
	if res.Namespaced {
		if err := s.checkNamespaceActive(r.Context(), obj.GetNamespace(), res); err != nil {
			return err
		}
	}
	if res.Custom {
		if err := s.checkCRDActive(res); err != nil {
			return err
		}
	}
	if opts.dryRun {
		return s.respond(w, r, res, http.StatusCreated, obj)
	}
	undo, err := s.allocate(r.Context(), res, obj)
	if err != nil {
		return err
	}
	b, err := toStorage(obj)
	if err != nil {
		undo()
		return apierrors.NewInternalError(err)
	}
	key := res.Key(obj.GetNamespace(), obj.GetName())
	hints := s.hintsFor(res)
	hints.add(res, key, b, obj)
	kv, err := s.store.Create(r.Context(), key, b)
	if err != nil {
		hints.drop(key, b)
		undo()
		return storageError(err, s.gr(res), obj.GetName())
	}
	obj.SetResourceVersion(strconv.FormatInt(kv.ModRevision, 10))
	if _, table := wantsTable(r); !table && res.StoredAs == nil {
		// The stored bytes with the resourceVersion are the response.
		if out := withResourceVersion(b, kv.ModRevision); out != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			w.Write(out)
			return nil
		}
	}
	return s.respond(w, r, res, http.StatusCreated, obj)
}

// readWrite reads a write request's options and its object, whose
// apiVersion and kind must be those of typeOf.
func (s *Server) readWrite(r *http.Request, typeOf *registry.Resource) (writeOptions, *unstructured.Unstructured, error) {
	opts, err := parseWriteOptions(r)
	if err != nil {
		return opts, nil, err
	}
	body, err := s.readBody(r)
	if err != nil {
		return opts, nil, err
	}
	obj, err := decodeBody(r, body)
	if err != nil {
		return opts, nil, err
	}
	return opts, obj, checkTypeMeta(obj, typeOf)
}

// checkNamed checks that an update's object has the URL's name, and
// reconciles its namespace with the URL's.
func checkNamed(obj *unstructured.Unstructured, res *registry.Resource, info requestInfo) error {
	if obj.GetName() != info.name {
		return badRequest("the name of the object (%s) does not match the name on the URL (%s)", obj.GetName(), info.name)
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
		return badRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	if obj.GetNamespace() == "" {
		return badRequest("the namespace of the provided object is empty")
	}
	return nil
}

// prepareCreate sets what the server owns on a new object.
func prepareCreate(obj *unstructured.Unstructured, res *registry.Resource) {
	obj.SetUID(uuid.NewUUID())
	obj.SetCreationTimestamp(metav1.NewTime(time.Now().UTC().Truncate(time.Second)))
	obj.SetResourceVersion("")
	obj.SetDeletionTimestamp(nil)
	obj.SetDeletionGracePeriodSeconds(nil)
	unstructured.RemoveNestedField(obj.Object, "metadata", "selfLink")
	switch p, ok := res.Strategy.(registry.Preparer); {
	case ok:
		p.PrepareForCreate(obj.Object)
	case res.Generation:
		obj.SetGeneration(1)
	default:
		unstructured.RemoveNestedField(obj.Object, "metadata", "generation")
	}
	if lc := res.Lifecycle; lc != nil && lc.PrepareCreate != nil {
		lc.PrepareCreate(obj)
	}
}

// checkNamespaceActive makes sure a namespaced object's namespace exists
// and is not being deleted. Like Kubernetes' NamespaceLifecycle admission it
// trusts the namespaces' watch cache, and asks etcd only when the cache does
// not (yet) have the namespace.
func (s *Server) checkNamespaceActive(ctx context.Context, ns string, res *registry.Resource) error {
	nsRes := s.namespaceResource()
	var terminating bool
	if c := s.cacheFor(nsRes); c != nil {
		if o, _, ok := c.Get(nsRes.Key("", ns)); ok {
			terminating = o.Fields["status.phase"] == "Terminating"
			return s.namespaceState(res, ns, terminating)
		}
	}
	obj, _, err := s.getCurrent(ctx, nsRes, "", ns)
	if err != nil {
		return err
	}
	phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
	return s.namespaceState(res, ns, phase == "Terminating" || obj.GetDeletionTimestamp() != nil)
}

func (s *Server) namespaceState(res *registry.Resource, ns string, terminating bool) error {
	if terminating {
		return apierrors.NewForbidden(s.gr(res), "", fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
	}
	return nil
}

// mutation computes an update's new object from the current one; it is
// called again on every optimistic-concurrency retry.
type mutation func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error)

// update implements PUT on an object or its status.
func (s *Server) update(w http.ResponseWriter, r *http.Request, res *registry.Resource, info requestInfo) error {
	opts, obj, err := s.readWrite(r, res)
	if err != nil {
		return err
	}
	if err := checkNamed(obj, res, info); err != nil {
		return err
	}
	if obj.GetResourceVersion() == "" && res.Custom {
		return invalid(res.GVK().GroupKind(), info.name, field.ErrorList{field.Invalid(field.NewPath("metadata", "resourceVersion"), "0x0", "must be specified for an update")})
	}
	if _, err := parseRV(obj.GetResourceVersion()); err != nil {
		return invalid(res.GVK().GroupKind(), info.name, field.ErrorList{field.Invalid(field.NewPath("metadata", "resourceVersion"), obj.GetResourceVersion(), "must be a number")})
	}
	out, code, warnings, err := s.guaranteedUpdate(r.Context(), res, info, opts, func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		return obj.DeepCopy(), nil
	})
	addWarnings(w, warnings)
	if err != nil {
		return err
	}
	return s.respond(w, r, res, code, out)
}

// guaranteedUpdate reads the current object (first from the watch cache,
// see updatecache.go), applies mutate, prepares and validates the result
// and writes it conditionally on the read revision.
// A conflict is retried when the new object does not pin a
// resourceVersion; otherwise it is a 409.
//
// Updates of one object through this server take turns (see keyLocks), so
// that they do not conflict with each other.
//
// The warnings are those of the attempt that answered: an abandoned
// attempt's are dropped with it.
func (s *Server) guaranteedUpdate(ctx context.Context, res *registry.Resource, info requestInfo, opts writeOptions, mutate mutation) (_ *unstructured.Unstructured, code int, warnings []string, _ error) {
	gr := s.gr(res)
	turn, err := s.keyLocks.lock(ctx, res.Key(info.namespace, info.name))
	if err != nil {
		return nil, 0, nil, apierrors.NewTimeoutError("the update did not get its turn before the request ended", 0)
	}
	defer turn.unlock()
	last, _ := turn.takeLast()
	// g is set while an attempt starts from the watch cache's copy instead
	// of etcd's: whatever such an attempt would answer without a successful
	// write, it redoes from etcd instead (g.retry, see updatecache.go).
	var g *updateGuess
	var retry conflictRetry
	for {
		cur, kv, err := s.updateState(ctx, res, info, opts, &retry, last, &g)
		if err != nil {
			return nil, 0, nil, err
		}
		obj, pinned, warnings, err := s.updated(res, info, opts, mutate, cur)
		if err != nil {
			if g.retry() {
				continue
			}
			return nil, 0, warnings, err
		}
		if obj.GetDeletionTimestamp() != nil && !held(res, obj) {
			// The last finalizer is gone: the deletion completes.
			if opts.dryRun {
				return obj, http.StatusOK, warnings, nil
			}
			deleted, err := s.store.Delete(ctx, kv.Key, kv.ModRevision)
			if retry.conflict(err) && (g.conflicted() || !pinned && retry.more()) {
				continue
			}
			if err != nil {
				return nil, 0, nil, storageError(err, gr, info.name)
			}
			s.released(ctx, res, obj)
			s.updateWritten(kv.Key, deleted.ModRevision)
			obj.SetResourceVersion(strconv.FormatInt(deleted.ModRevision, 10))
			return obj, http.StatusOK, warnings, nil
		}
		b, err := toStorage(obj)
		if err != nil {
			return nil, 0, nil, apierrors.NewInternalError(err)
		}
		// A guess has no stored bytes (kv.Value): whether anything changed
		// is decided on etcd's.
		if g.unchanged(b) && g.retry() {
			continue
		}
		if string(b) == string(kv.Value) || opts.dryRun {
			// Nothing changed: like Kubernetes, skip the write; the
			// resourceVersion stays and no watch event is produced.
			obj.SetResourceVersion(cur.GetResourceVersion())
			return obj, http.StatusOK, warnings, nil
		}
		hints := s.hintsFor(res)
		hints.add(res, kv.Key, b, obj)
		nkv, err := s.store.Update(ctx, kv.Key, b, kv.ModRevision)
		if err != nil {
			hints.drop(kv.Key, b)
		}
		if retry.conflict(err) && (g.conflicted() || !pinned && retry.more()) {
			continue
		}
		if err != nil {
			return nil, 0, nil, storageError(err, gr, info.name)
		}
		s.updateWritten(kv.Key, nkv.ModRevision)
		turn.wrote(storage.KeyValue{Key: kv.Key, Value: b, ModRevision: nkv.ModRevision})
		obj.SetResourceVersion(strconv.FormatInt(nkv.ModRevision, 10))
		return obj, http.StatusOK, warnings, nil
	}
}

// updated applies mutate to a copy of cur and returns the object an update
// would write (its resourceVersion cur's), whether the request pinned a
// resourceVersion, or why the update fails: a mutation, precondition, name,
// defaulting or validation error.
func (s *Server) updated(res *registry.Resource, info requestInfo, opts writeOptions, mutate mutation, cur *unstructured.Unstructured) (obj *unstructured.Unstructured, pinned bool, warnings []string, err error) {
	if obj, err = mutate(cur.DeepCopy()); err != nil {
		return nil, false, nil, err
	}
	pinned = obj.GetResourceVersion() != ""
	if pinned && obj.GetResourceVersion() != cur.GetResourceVersion() {
		return nil, true, nil, apierrors.NewConflict(s.gr(res), info.name, errors.New(conflictMessage))
	}
	if obj.GetName() != info.name {
		return nil, pinned, nil, badRequest("the name of the object (%s) does not match the name on the URL (%s)", obj.GetName(), info.name)
	}
	// The write is conditional on the revision read.
	obj.SetResourceVersion(cur.GetResourceVersion())
	prepareUpdate(obj, cur, res, info.subresource)
	if warnings, err = s.normalize(res, obj, cur, opts); err != nil {
		return nil, pinned, nil, err
	}
	validate := res.Strategy.Validate
	if p, ok := res.Strategy.(registry.Preparer); ok && info.subresource == "status" {
		validate = p.ValidateStatus
	}
	if errs := validate(obj.Object, cur.Object); len(errs) > 0 {
		return nil, pinned, warnings, invalid(res.GVK().GroupKind(), info.name, errs)
	}
	return obj, pinned, warnings, nil
}

// prepareUpdate keeps what clients cannot change and applies the
// subresource rules: the main endpoint cannot change status (when the
// resource has a status subresource) and /status changes nothing else.
func prepareUpdate(obj, cur *unstructured.Unstructured, res *registry.Resource, subresource string) {
	if lc := res.Lifecycle; lc != nil && lc.PrepareUpdate != nil && lc.PrepareUpdate(obj, cur, subresource) {
		return
	}
	p, prepares := res.Strategy.(registry.Preparer)
	if subresource == "status" && prepares {
		p.PrepareForUpdate(obj.Object, cur.Object, subresource)
		return
	}
	if subresource == "status" {
		status, ok := obj.Object["status"]
		fresh := cur.DeepCopy()
		if ok {
			fresh.Object["status"] = status
		} else {
			delete(fresh.Object, "status")
		}
		*obj = *fresh
		return
	}
	obj.SetUID(cur.GetUID())
	obj.SetCreationTimestamp(cur.GetCreationTimestamp())
	obj.SetDeletionTimestamp(cur.GetDeletionTimestamp())
	obj.SetDeletionGracePeriodSeconds(cur.GetDeletionGracePeriodSeconds())
	obj.SetNamespace(cur.GetNamespace())
	unstructured.RemoveNestedField(obj.Object, "metadata", "selfLink")
	if prepares {
		p.PrepareForUpdate(obj.Object, cur.Object, "")
		return
	}
	if res.Status {
		if st, ok := cur.Object["status"]; ok {
			obj.Object["status"] = st
		} else {
			delete(obj.Object, "status")
		}
	}
	if res.Generation {
		gen := cur.GetGeneration()
		if specChanged(obj, cur, res.Status) {
			gen++
		}
		obj.SetGeneration(gen)
	} else {
		unstructured.RemoveNestedField(obj.Object, "metadata", "generation")
	}
}

// specChanged reports a change outside metadata (and status, if it is a
// subresource).
func specChanged(a, b *unstructured.Unstructured, statusSub bool) bool {
	strip := func(u *unstructured.Unstructured) map[string]any {
		m := make(map[string]any, len(u.Object))
		for k, v := range u.Object {
			if k == "metadata" || (statusSub && k == "status") {
				continue
			}
			m[k] = v
		}
		return m
	}
	return !equality.Semantic.DeepEqual(strip(a), strip(b))
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, res *registry.Resource, info requestInfo) error {
	opts, err := s.deleteOptions(r)
	if err != nil {
		return err
	}
	if res.Lifecycle != nil && slices.Contains(res.Lifecycle.Undeletable, info.name) {
		return apierrors.NewForbidden(s.gr(res), info.name, fmt.Errorf("this %s may not be deleted", strings.ToLower(res.Kind)))
	}
	obj, deleted, err := s.deleteObject(r.Context(), res, info.namespace, info.name, opts)
	if err != nil {
		return err
	}
	if !deleted {
		// Kept while finalizers run: the object, and 202 when the client
		// asked for its dependents to be deleted (orphanDependents=false),
		// as Kubernetes answers.
		code := http.StatusOK
		//lint:ignore SA1019 a server honours the deprecated field, as Kubernetes does
		if o := opts.OrphanDependents; o != nil && !*o {
			code = http.StatusAccepted
		}
		return s.respond(w, r, res, code, obj)
	}
	writeJSON(w, http.StatusOK, &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusSuccess,
		Details:  &metav1.StatusDetails{Name: info.name, Group: res.Group, Kind: res.Plural, UID: obj.GetUID()},
	})
	return nil
}

// deleteObject deletes one object, or marks it for deletion while it has
// finalizers (deleted is false then, and obj is the marked object).
func (s *Server) deleteObject(ctx context.Context, res *registry.Resource, ns, name string, opts *metav1.DeleteOptions) (obj *unstructured.Unstructured, deleted bool, err error) {
	gr := s.gr(res)
	dryRun := len(opts.DryRun) > 0
	var retry conflictRetry
	for {
		cur, kv, err := s.current(ctx, res, ns, name, retry.next())
		if err != nil {
			return nil, false, err
		}
		if p := opts.Preconditions; p != nil {
			if p.UID != nil && *p.UID != cur.GetUID() {
				return nil, false, &preconditionFailed{uid: true, StatusError: apierrors.NewConflict(gr, name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, cur.GetUID()))}
			}
			if p.ResourceVersion != nil && *p.ResourceVersion != cur.GetResourceVersion() {
				return nil, false, &preconditionFailed{StatusError: apierrors.NewConflict(gr, name, fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, cur.GetResourceVersion()))}
			}
		}
		finalizers := deletionFinalizers(cur.GetFinalizers(), opts)
		deleting := cur.GetDeletionTimestamp() != nil
		if deleting && slices.Equal(finalizers, cur.GetFinalizers()) {
			return cur, false, nil // under way, and this DELETE changes nothing
		}
		cur.SetFinalizers(finalizers)
		if !deleting && res.Lifecycle != nil && res.Lifecycle.DeletionStarts != nil {
			res.Lifecycle.DeletionStarts(cur)
		}
		if held(res, cur) {
			if !deleting {
				now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
				cur.SetDeletionTimestamp(&now)
				var zero int64
				cur.SetDeletionGracePeriodSeconds(&zero)
				if g := cur.GetGeneration(); g > 0 {
					cur.SetGeneration(g + 1) // as Kubernetes' BeforeDelete does
				}
			}
			if dryRun {
				return cur, false, nil
			}
			b, err := toStorage(cur)
			if err != nil {
				return nil, false, apierrors.NewInternalError(err)
			}
			nkv, err := s.store.Update(ctx, kv.Key, b, kv.ModRevision)
			if retry.conflict(err) && retry.more() {
				continue
			}
			if err != nil {
				return nil, false, storageError(err, gr, name)
			}
			cur.SetResourceVersion(strconv.FormatInt(nkv.ModRevision, 10))
			if !deleting {
				s.deletionStarted(ctx, res, cur, nkv.ModRevision)
			}
			return cur, false, nil
		}
		if dryRun {
			return cur, true, nil
		}
		gone, err := s.store.Delete(ctx, kv.Key, kv.ModRevision)
		if retry.conflict(err) && retry.more() {
			continue
		}
		if err != nil {
			return nil, false, storageError(err, gr, name)
		}
		s.released(ctx, res, cur)
		cur.SetResourceVersion(strconv.FormatInt(gone.ModRevision, 10))
		return cur, true, nil
	}
}

// deletionStarted makes this server refuse new content of a namespace or
// custom resource definition whose deletion it just started, before the
// DELETE is answered: creates check the namespaces' watch cache, so it
// waits (up to a second) for the cache to see the mark, and it marks the
// definition terminating at once. Other servers learn of it from their
// watches, moments later, as in Kubernetes.
func (s *Server) deletionStarted(ctx context.Context, res *registry.Resource, obj *unstructured.Unstructured, rev int64) {
	switch {
	case isNamespaceResource(res):
		if c := s.cacheFor(res); c != nil {
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_ = c.WaitFor(wctx, rev) // at worst a create slips in, and is drained
		}
	case isCRDResource(res):
		s.crdTerminating.Store(obj.GetName(), true)
	}
}

// preconditionFailed is the 409 of a delete whose uid (uid) or
// resourceVersion precondition does not hold, for callers in the server
// that act on which one failed.
type preconditionFailed struct {
	uid bool
	*apierrors.StatusError
}

func (e *preconditionFailed) Unwrap() error { return e.StatusError }

// uidChanged reports whether err is a delete's failed uid precondition:
// the object of that name is another one.
func uidChanged(err error) bool {
	var pf *preconditionFailed
	return errors.As(err, &pf) && pf.uid
}

// held reports whether a finalizer keeps obj: one of its metadata, or
// one its resource keeps elsewhere (a namespace's spec.finalizers).
func held(res *registry.Resource, obj *unstructured.Unstructured) bool {
	if len(obj.GetFinalizers()) > 0 {
		return true
	}
	return res.Lifecycle != nil && res.Lifecycle.Finalizers != nil && len(res.Lifecycle.Finalizers(obj)) > 0
}

func isNamespaceResource(res *registry.Resource) bool {
	return res.Plural == "namespaces" && res.Group == ""
}

// deletionFinalizers returns the finalizers an object has once its
// deletion with opts starts: propagationPolicy (or the deprecated
// orphanDependents) Orphan adds the orphan finalizer, Foreground the
// foregroundDeletion one, each removing the other, and Background removes
// both, as in Kubernetes; the garbage collector (package gc) carries them
// out. Without a policy the finalizers stay as they are.
func deletionFinalizers(fs []string, opts *metav1.DeleteOptions) []string {
	var policy metav1.DeletionPropagation
	orphan := opts.OrphanDependents //lint:ignore SA1019 a server honours the deprecated field, as Kubernetes does
	switch {
	case opts.PropagationPolicy != nil:
		policy = *opts.PropagationPolicy
	case orphan != nil && *orphan:
		policy = metav1.DeletePropagationOrphan
	case orphan != nil:
		policy = metav1.DeletePropagationBackground
	default:
		return fs
	}
	out := slices.DeleteFunc(slices.Clone(fs), func(f string) bool {
		return f == metav1.FinalizerOrphanDependents || f == metav1.FinalizerDeleteDependents
	})
	switch policy {
	case metav1.DeletePropagationOrphan:
		out = append(out, metav1.FinalizerOrphanDependents)
	case metav1.DeletePropagationForeground:
		out = append(out, metav1.FinalizerDeleteDependents)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (s *Server) deleteCollection(w http.ResponseWriter, r *http.Request, res *registry.Resource, info requestInfo) error {
	opts, err := s.deleteOptions(r)
	if err != nil {
		return err
	}
	lo, err := listOptions(r, info.verb)
	if err != nil {
		return err
	}
	sel, err := selectorOf(lo, res)
	if err != nil {
		return err
	}
	items, _, err := s.listAll(r.Context(), res, info.namespace, sel)
	if err != nil {
		return err
	}
	for _, it := range items {
		_, _, err := s.deleteObject(r.Context(), res, it.GetNamespace(), it.GetName(), opts)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	writeJSON(w, http.StatusOK, &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusSuccess,
		Details:  &metav1.StatusDetails{Group: res.Group, Kind: res.Plural},
	})
	return nil
}

func objectOf(u *unstructured.Unstructured) map[string]any {
	if u == nil {
		return nil
	}
	return u.Object
}
