package objects

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
)

// normalize applies the resource's schema to obj and handles unknown
// fields per fieldValidation (Warn is the default, as in Kubernetes): it
// returns the warnings to send.
func normalize(res *registry.Resource, obj, old *unstructured.Unstructured, opts WriteOptions) ([]string, error) {
	unknown, err := res.Strategy.Normalize(obj.Object, objectOf(old))
	if err != nil {
		return nil, apistatus.BadRequest("%v", err)
	}
	if len(unknown) == 0 {
		return nil, nil
	}
	switch opts.FieldValidation {
	case "Strict":
		return nil, apistatus.Strict(unknown)
	case "Ignore":
		return nil, nil
	}
	warnings := make([]string, len(unknown))
	for i, u := range unknown {
		warnings[i] = fmt.Sprintf("unknown field %q", u)
	}
	return warnings, nil
}

// Create stores obj, a new object of req's resource in obj's namespace
// (which the caller has reconciled with the request's). A name is
// generated from generateName when obj has none. The result's Object is
// what was stored, with its resourceVersion.
func (s *Service) Create(ctx context.Context, req *Request, obj *unstructured.Unstructured, opts WriteOptions) (Result, error) {
	req.DryRun = opts.DryRun
	ctx = s.noted(ctx, req, opts.FieldManager)
	if err := s.hooks.authorize(ctx, req); err != nil {
		return Result{}, err
	}
	if rr := reviewOf(req); rr != nil {
		return s.hooks.review(ctx, req, rr, obj, opts)
	}
	return s.create(ctx, req, obj, opts, true)
}

// create stores a new object once authorized; track records the create in
// its managedFields (an apply's object has them already).
func (s *Service) create(ctx context.Context, req *Request, obj *unstructured.Unstructured, opts WriteOptions, track bool) (Result, error) {
	res := req.Resource
	if fm := s.cfg.FieldManager; fm != nil && track {
		// As kube-apiserver: before admission and the strategy.
		obj = fm.Update(res, "", nil, obj, opts.FieldManager)
	}
	a := &Attempt{Request: req, Operation: OpCreate, Object: obj, Options: opts}
	if err := s.hooks.mutate(ctx, a); err != nil {
		return Result{Warnings: a.warnings}, err
	}
	obj = a.Object
	// As kube-apiserver, whose storage refuses it last, after validation
	// and admission (prepareCreate drops it); a dry run never reaches it.
	rvGiven := obj.GetResourceVersion() != ""
	if obj.GetName() == "" && obj.GetGenerateName() != "" {
		obj.SetName(obj.GetGenerateName() + rand.String(5))
	}
	if obj.GetName() == "" {
		return Result{Warnings: a.warnings}, apistatus.Invalid(res.GVK().GroupKind(), "", field.ErrorList{field.Required(field.NewPath("metadata", "name"), "name or generateName is required")})
	}
	var warnings []string
	var err error
	early := decodesFirst(res)
	if early {
		warnings, err = normalize(res, obj, nil, opts)
	}
	if err == nil {
		prepareCreate(ctx, obj, res)
		if !early {
			warnings, err = normalize(res, obj, nil, opts)
		}
	}
	out := Result{Warnings: append(a.warnings, warnings...)}
	if err != nil {
		return out, err
	}
	errs, warned := validate(ctx, res, "", obj.Object, nil)
	if len(errs) > 0 {
		return out, apistatus.Invalid(res.GVK().GroupKind(), obj.GetName(), errs)
	}
	out.Warnings = append(out.Warnings, warned...)
	n := len(a.warnings)
	undo, err := s.hooks.admit(ctx, a)
	out.Warnings = append(out.Warnings, a.warnings[n:]...)
	if err != nil {
		return out, err
	}
	out.Object = obj
	// A dry run is converted to the storage version too (a conversion
	// webhook is called and may refuse it), as kube-apiserver's dry-run
	// storage encodes the object.
	b, converted, err := storedForm(ctx, res, obj)
	if err != nil {
		undo.run()
		return out, err
	}
	if rvGiven && !opts.DryRun {
		undo.run()
		return Result{Warnings: out.Warnings}, errResourceVersionOnCreate
	}
	if opts.DryRun {
		if converted {
			if out.Object, err = storedBack(ctx, res, b, 0); err != nil {
				undo.run()
				return Result{Warnings: out.Warnings}, err
			}
		}
		return out, nil
	}
	key := res.Key(obj.GetNamespace(), obj.GetName())
	hints := s.caches.hintsFor(res)
	hints.add(res, key, b, obj)
	kv, err := s.store.Create(ctx, key, b)
	if err != nil {
		hints.drop(key, b)
		undo.run()
		return Result{Warnings: out.Warnings}, apistatus.Storage(err, gr(res), obj.GetName())
	}
	obj.SetResourceVersion(strconv.FormatInt(kv.ModRevision, 10))
	if res.StoredAs == nil && !converted {
		// The stored bytes with the resourceVersion are the response.
		out.Raw = withResourceVersion(b, kv.ModRevision)
	}
	if converted {
		if obj, err = storedBack(ctx, res, b, kv.ModRevision); err != nil {
			return Result{Warnings: out.Warnings}, err
		}
		out.Object = obj
	}
	s.hooks.written(ctx, req, nil, obj, kv.ModRevision)
	return out, nil
}

// errResourceVersionOnCreate is kube-apiserver's answer to a create of an
// object with a resourceVersion: a 500 without a reason, its storage's
// words.
var errResourceVersionOnCreate = apistatus.Internal("resourceVersion should not be set on objects to be created")

// reviewOf returns the review resource a create of req asks, or nil.
func reviewOf(req *Request) *registry.Resource {
	if req.Subresource != "" {
		return req.Resource.Reviews[req.Subresource]
	}
	if req.Resource.Review {
		return req.Resource
	}
	return nil
}

// prepareCreate sets what the server owns on a new object.
func prepareCreate(ctx context.Context, obj *unstructured.Unstructured, res *registry.Resource) {
	obj.SetUID(uuid.NewUUID())
	obj.SetCreationTimestamp(metav1.NewTime(time.Now().UTC().Truncate(time.Second)))
	obj.SetResourceVersion("")
	obj.SetDeletionTimestamp(nil)
	obj.SetDeletionGracePeriodSeconds(nil)
	unstructured.RemoveNestedField(obj.Object, "metadata", "selfLink")
	switch p, ok := res.Strategy.(registry.Preparer); {
	case ok:
		if rp, ok := p.(registry.RequestPreparer); ok {
			rp.PrepareForCreateRequest(ctx, obj.Object)
		} else {
			p.PrepareForCreate(obj.Object)
		}
	case res.Generation:
		obj.SetGeneration(1)
	default:
		unstructured.RemoveNestedField(obj.Object, "metadata", "generation")
	}
	if lc := res.Lifecycle; lc != nil && lc.PrepareCreate != nil {
		lc.PrepareCreate(obj)
	}
}

// Mutation computes an update's new object from the current one (a copy,
// which it may change and return); it is called again on every
// optimistic-concurrency retry. A new object with a resourceVersion pins
// the update to it: a conflict is then a 409, not a retry.
type Mutation func(cur *unstructured.Unstructured) (*unstructured.Unstructured, error)

// Update reads the object req names, applies mutate, prepares and
// validates the result and writes it conditionally on the read revision
// (see guaranteedUpdate). An update that removes a deleted object's last
// finalizer completes its deletion.
func (s *Service) Update(ctx context.Context, req *Request, opts WriteOptions, mutate Mutation) (Result, error) {
	req.DryRun = opts.DryRun
	ctx = s.noted(ctx, req, opts.FieldManager)
	if err := s.hooks.authorize(ctx, req); err != nil {
		return Result{}, err
	}
	obj, warnings, err := s.guaranteedUpdate(ctx, req, opts, mutate, tracker(s.cfg.FieldManager, req, opts))
	return Result{Object: obj, Warnings: warnings}, err
}

// tracker returns what records an update's change in managedFields
// through fm, or nil.
func tracker(fm FieldManager, req *Request, opts WriteOptions) func(cur, obj *unstructured.Unstructured) *unstructured.Unstructured {
	if fm == nil {
		return nil
	}
	return func(cur, obj *unstructured.Unstructured) *unstructured.Unstructured {
		return fm.Update(req.Resource, req.Subresource, cur, obj, opts.FieldManager)
	}
}

// guaranteedUpdate reads the current object (first from the watch cache,
// see updatecache.go), applies mutate, prepares and validates the result
// and writes it conditionally on the read revision.
// A conflict is retried when the new object does not pin a
// resourceVersion; otherwise it is a 409.
//
// Updates of one object through this service take turns (see keyLocks),
// so that they do not conflict with each other.
//
// The warnings are those of the attempt that answered: an abandoned
// attempt's are dropped with it.
//
// track, if not nil, records the change in the new object's managedFields.
func (s *Service) guaranteedUpdate(ctx context.Context, req *Request, opts WriteOptions, mutate Mutation, track func(cur, obj *unstructured.Unstructured) *unstructured.Unstructured) (_ *unstructured.Unstructured, warnings []string, _ error) {
	res := req.Resource
	turn, err := s.keyLocks.lock(ctx, res.Key(req.Namespace, req.Name))
	if err != nil {
		return nil, nil, apierrors.NewTimeoutError("the update did not get its turn before the request ended", 0)
	}
	defer turn.unlock()
	last, _ := turn.takeLast()
	// g is set while an attempt starts from the watch cache's copy instead
	// of etcd's: whatever such an attempt would answer without a successful
	// write, it redoes from etcd instead (g.retry, see updatecache.go).
	var g *updateGuess
	var retry conflictRetry
	for {
		cur, kv, err := s.updateState(ctx, req, opts, &retry, last, &g)
		if err != nil {
			return nil, nil, err
		}
		a := &Attempt{Request: req, Operation: OpUpdate, Old: cur, Options: opts}
		obj, pinned, warnings, err := s.updated(ctx, a, mutate, track)
		if err == nil {
			// Nothing admitted for an update is undone yet: no hook
			// takes anything for one.
			a.Object = obj
			n := len(a.warnings)
			_, err = s.hooks.admit(ctx, a)
			warnings = append(warnings, a.warnings[n:]...)
		}
		if err != nil {
			if g.retry() {
				continue
			}
			return nil, warnings, err
		}
		if obj.GetDeletionTimestamp() != nil && !held(res, obj) {
			// The last finalizer is gone: the deletion completes.
			if opts.DryRun {
				return obj, warnings, nil
			}
			deleted, err := s.store.Delete(ctx, kv.Key, kv.ModRevision)
			if retry.conflict(err) && (g.conflicted() || !pinned && retry.more()) {
				continue
			}
			if err != nil {
				return nil, nil, apistatus.Storage(err, gr(res), req.Name)
			}
			s.guesses.wrote(kv.Key, deleted.ModRevision)
			s.hooks.written(ctx, req, cur, nil, deleted.ModRevision)
			obj.SetResourceVersion(strconv.FormatInt(deleted.ModRevision, 10))
			return obj, warnings, nil
		}
		b, converted, err := storedForm(ctx, res, obj)
		if err != nil {
			return nil, warnings, err
		}
		// A guess has no stored bytes (kv.Value): whether anything changed
		// is decided on etcd's.
		if g.unchanged(b) && g.retry() {
			continue
		}
		if (string(b) == string(kv.Value) && !kv.Stale) || opts.DryRun {
			// Nothing changed: like Kubernetes, skip the write; the
			// resourceVersion stays and no watch event is produced. A
			// stale value (encrypted with an older key) is written again.
			obj.SetResourceVersion(cur.GetResourceVersion())
			if converted {
				rv, _ := ParseRV(cur.GetResourceVersion())
				if obj, err = storedBack(ctx, res, b, rv); err != nil {
					return nil, warnings, err
				}
			}
			return obj, warnings, nil
		}
		hints := s.caches.hintsFor(res)
		hints.add(res, kv.Key, b, obj)
		nkv, err := s.store.Update(ctx, kv.Key, b, kv.ModRevision)
		if err != nil {
			hints.drop(kv.Key, b)
		}
		if retry.conflict(err) && (g.conflicted() || !pinned && retry.more()) {
			continue
		}
		if err != nil {
			return nil, nil, apistatus.Storage(err, gr(res), req.Name)
		}
		s.guesses.wrote(kv.Key, nkv.ModRevision)
		turn.wrote(storage.KeyValue{Key: kv.Key, Value: b, ModRevision: nkv.ModRevision})
		obj.SetResourceVersion(strconv.FormatInt(nkv.ModRevision, 10))
		if converted {
			if obj, err = storedBack(ctx, res, b, nkv.ModRevision); err != nil {
				return nil, warnings, err
			}
		}
		s.hooks.written(ctx, req, cur, obj, nkv.ModRevision)
		return obj, warnings, nil
	}
}

// updated applies mutate to a copy of cur and returns the object an update
// would write (its resourceVersion cur's), whether the request pinned a
// resourceVersion, or why the update fails: a mutation, precondition, name,
// defaulting or validation error.
//
// Mutating admission (Hooks.Mutate) runs on a, whose Old is cur, between
// the managedFields record and the preparation, as in kube-apiserver.
func (s *Service) updated(ctx context.Context, a *Attempt, mutate Mutation, track func(cur, obj *unstructured.Unstructured) *unstructured.Unstructured) (obj *unstructured.Unstructured, pinned bool, warnings []string, err error) {
	req, opts, cur := a.Request, a.Options, a.Old
	res := req.Resource
	if obj, err = mutate(cur.DeepCopy()); err != nil {
		return nil, false, nil, err
	}
	pinned = obj.GetResourceVersion() != ""
	if pinned && obj.GetResourceVersion() != cur.GetResourceVersion() {
		return nil, true, nil, apierrors.NewConflict(gr(res), req.Name, errors.New(apistatus.ConflictMessage))
	}
	if obj.GetName() != req.Name {
		return nil, pinned, nil, apistatus.BadRequest("the name of the object (%s) does not match the name on the URL (%s)", obj.GetName(), req.Name)
	}
	// The write is conditional on the revision read.
	obj.SetResourceVersion(cur.GetResourceVersion())
	if track != nil {
		// As kube-apiserver: before admission and the strategy, and what
		// it records survives a status update's reset to cur.
		obj = track(cur, obj)
	}
	a.Object = obj
	if err = s.hooks.mutate(ctx, a); err != nil {
		return nil, pinned, a.warnings, err
	}
	obj = a.Object
	if err := immutableMetadata(res, obj, cur); err != nil {
		return nil, pinned, a.warnings, err
	}
	early := decodesFirst(res)
	if early {
		if warnings, err = normalize(res, obj, cur, opts); err != nil {
			return nil, pinned, append(a.warnings, warnings...), err
		}
	}
	if track != nil {
		mf, found, _ := unstructured.NestedFieldNoCopy(obj.Object, "metadata", "managedFields")
		prepareUpdate(obj, cur, res, req.Subresource)
		if found {
			// The record itself, not a copy: nothing else holds it.
			setManagedFields(obj, mf)
		} else {
			unstructured.RemoveNestedField(obj.Object, "metadata", "managedFields")
		}
	} else {
		prepareUpdate(obj, cur, res, req.Subresource)
	}
	if !early {
		warnings, err = normalize(res, obj, cur, opts)
	}
	warnings = append(a.warnings, warnings...)
	if err != nil {
		return nil, pinned, warnings, err
	}
	errs, warned := validate(ctx, res, req.Subresource, obj.Object, cur.Object)
	if len(errs) > 0 {
		return nil, pinned, warnings, apistatus.Invalid(res.GVK().GroupKind(), req.Name, errs)
	}
	return obj, pinned, append(warnings, warned...), nil
}

// immutableMetadata refuses (422) what kube-apiserver's update validation
// refuses of every update's object, whatever the verb or subresource:
// another uid (a PUT's is a 409 before, kube-apiserver's storage
// precondition), and a deletionTimestamp or deletionGracePeriodSeconds on
// an object not being deleted. Of one being deleted, prepareUpdate keeps
// the server's whatever the object says. (Marking an object deleted does
// not go through updated.)
func immutableMetadata(res *registry.Resource, obj, cur *unstructured.Unstructured) error {
	md := field.NewPath("metadata")
	var errs field.ErrorList
	if uid := obj.GetUID(); uid != "" && uid != cur.GetUID() {
		errs = append(errs, field.Invalid(md.Child("uid"), string(uid), "field is immutable"))
	}
	if ts, ok, _ := unstructured.NestedString(obj.Object, "metadata", "deletionTimestamp"); ok && cur.GetDeletionTimestamp() == nil {
		errs = append(errs, field.Invalid(md.Child("deletionTimestamp"), ts, "field is immutable"))
	}
	if g := obj.GetDeletionGracePeriodSeconds(); g != nil && cur.GetDeletionGracePeriodSeconds() == nil {
		errs = append(errs, field.Invalid(md.Child("deletionGracePeriodSeconds"), *g, "field is immutable"))
	}
	if len(errs) > 0 {
		return apistatus.Invalid(res.GVK().GroupKind(), cur.GetName(), errs)
	}
	return nil
}

// validate validates a create of obj (cur nil) or an update of cur to obj
// through subresource with res's strategy, and returns the warnings of a
// RequestPreparer's kind.
func validate(ctx context.Context, res *registry.Resource, subresource string, obj, cur map[string]any) (field.ErrorList, []string) {
	switch p := res.Strategy.(type) {
	case registry.RequestPreparer:
		return p.ValidateRequest(ctx, obj, cur, subresource)
	case registry.Preparer:
		if cur != nil && subresource == "status" {
			return p.ValidateStatus(obj, cur), nil
		}
	}
	return res.Strategy.Validate(obj, cur), nil
}

// decodesFirst reports whether res's objects are decoded (normalize)
// before they are prepared, as kube-apiserver decodes a body before its
// strategy's PrepareForCreate and PrepareForUpdate: a Preparer's round trip
// through its kind's type would otherwise drop unknown fields before
// normalize could report them (fieldValidation Strict and Warn). Custom
// resources' preparation keeps unknown fields, so their order does not
// matter and stays the one their fast paths were measured with.
func decodesFirst(res *registry.Resource) bool {
	_, ok := res.Strategy.(registry.Preparer)
	return ok && !res.Custom
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
	if _, ok := p.(registry.RequestPreparer); ok {
		p.PrepareForUpdate(obj.Object, cur.Object, subresource)
		return
	}
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

// Delete deletes the object req names, or marks it for deletion while it
// has finalizers (Result.Deleted is false then, and Result.Object is the
// marked object). The resource's undeletable objects get 403.
func (s *Service) Delete(ctx context.Context, req *Request, opts *metav1.DeleteOptions) (Result, error) {
	req.DryRun = len(opts.DryRun) > 0
	ctx = s.noted(ctx, req, "")
	if err := s.hooks.authorize(ctx, req); err != nil {
		return Result{}, err
	}
	res := req.Resource
	if res.Lifecycle != nil && slices.Contains(res.Lifecycle.Undeletable, req.Name) {
		return Result{}, apierrors.NewForbidden(gr(res), req.Name, fmt.Errorf("this %s may not be deleted", strings.ToLower(res.Kind)))
	}
	return s.deleteObject(ctx, req, opts)
}

// deleteObject deletes one object, or marks it for deletion while it has
// finalizers.
//
// The warnings of validating admission (the last attempt's) are in the
// result, whether or not the delete succeeded.
func (s *Service) deleteObject(ctx context.Context, req *Request, opts *metav1.DeleteOptions) (out Result, _ error) {
	var warnings []string
	defer func() { out.Warnings = append(out.Warnings, warnings...) }()
	res, ns, name := req.Resource, req.Namespace, req.Name
	dryRun := len(opts.DryRun) > 0
	var retry conflictRetry
	for {
		cur, kv, err := s.current(ctx, res, ns, name, retry.next())
		if err != nil {
			return Result{}, err
		}
		if p := opts.Preconditions; p != nil {
			// kube-apiserver's words (rest.BeforeDelete), which name the
			// kind, not the resource.
			kind := schema.GroupResource{Group: res.Group, Resource: res.Kind}
			if p.UID != nil && *p.UID != cur.GetUID() {
				return Result{}, &PreconditionError{UID: true, StatusError: apierrors.NewConflict(kind, name, fmt.Errorf("the UID in the precondition (%s) does not match the UID in record (%s). The object might have been deleted and then recreated", *p.UID, cur.GetUID()))}
			}
			if p.ResourceVersion != nil && *p.ResourceVersion != cur.GetResourceVersion() {
				return Result{}, &PreconditionError{StatusError: apierrors.NewConflict(kind, name, fmt.Errorf("the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%s). The object might have been modified", *p.ResourceVersion, cur.GetResourceVersion()))}
			}
		}
		// Validating admission sees every attempt, as in kube-apiserver,
		// even one that then changes nothing.
		a := &Attempt{Request: req, Operation: OpDelete, Old: cur, Delete: opts}
		err = s.hooks.validate(ctx, a)
		warnings = a.warnings
		if err != nil {
			return Result{}, err
		}
		finalizers := deletionFinalizers(cur.GetFinalizers(), opts)
		deleting := cur.GetDeletionTimestamp() != nil
		if deleting && slices.Equal(finalizers, cur.GetFinalizers()) {
			return Result{Object: cur}, nil // under way, and this DELETE changes nothing
		}
		old := cur.DeepCopy()
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
				return Result{Object: cur}, nil
			}
			b, _, err := storedForm(ctx, res, cur)
			if err != nil {
				return Result{}, err
			}
			nkv, err := s.store.Update(ctx, kv.Key, b, kv.ModRevision)
			if retry.conflict(err) && retry.more() {
				continue
			}
			if err != nil {
				return Result{}, apistatus.Storage(err, gr(res), name)
			}
			cur.SetResourceVersion(strconv.FormatInt(nkv.ModRevision, 10))
			s.hooks.written(ctx, req, old, cur, nkv.ModRevision)
			return Result{Object: cur}, nil
		}
		if dryRun {
			return Result{Object: cur, Deleted: true}, nil
		}
		gone, err := s.store.Delete(ctx, kv.Key, kv.ModRevision)
		if retry.conflict(err) && retry.more() {
			continue
		}
		if err != nil {
			return Result{}, apistatus.Storage(err, gr(res), name)
		}
		cur.SetResourceVersion(strconv.FormatInt(gone.ModRevision, 10))
		s.hooks.written(ctx, req, old, nil, gone.ModRevision)
		return Result{Object: cur, Deleted: true}, nil
	}
}

// DeleteCollection deletes every object of req's resource (in
// req.Namespace, if set) that listOpts selects, each as Delete would; an
// object gone meanwhile is no error.
func (s *Service) DeleteCollection(ctx context.Context, req *Request, listOpts *internalversion.ListOptions, opts *metav1.DeleteOptions) error {
	req.SelectedName = selectedName(listOpts)
	ctx = s.noted(ctx, req, "")
	if err := s.hooks.authorize(ctx, req); err != nil {
		return err
	}
	res := req.Resource
	if res.Lifecycle != nil && res.Lifecycle.NoDeleteCollection {
		return apierrors.NewMethodNotSupported(gr(res), req.Verb)
	}
	sel, err := selectorOf(listOpts, res)
	if err != nil {
		return err
	}
	items, _, err := s.etcd.listAll(ctx, res, req.Namespace, sel)
	if err != nil {
		return err
	}
	for _, it := range items {
		one := &Request{User: req.User, Verb: "delete", Resource: res, Namespace: it.GetNamespace(), Name: it.GetName()}
		if _, err := s.deleteObject(ctx, one, opts); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// PreconditionError is the 409 of a delete whose uid (UID) or
// resourceVersion precondition does not hold, for callers in the server
// that act on which one failed.
type PreconditionError struct {
	UID bool
	*apierrors.StatusError
}

func (e *PreconditionError) Unwrap() error { return e.StatusError }

// UIDChanged reports whether err is a delete's failed uid precondition:
// the object of that name is another one.
func UIDChanged(err error) bool {
	var pf *PreconditionError
	return errors.As(err, &pf) && pf.UID
}

// held reports whether a finalizer keeps obj: one of its metadata, or
// one its resource keeps elsewhere (a namespace's spec.finalizers).
func held(res *registry.Resource, obj *unstructured.Unstructured) bool {
	if len(obj.GetFinalizers()) > 0 {
		return true
	}
	return res.Lifecycle != nil && res.Lifecycle.Finalizers != nil && len(res.Lifecycle.Finalizers(obj)) > 0
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

func objectOf(u *unstructured.Unstructured) map[string]any {
	if u == nil {
		return nil
	}
	return u.Object
}
