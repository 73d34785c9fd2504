package informer

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	sigsjson "sigs.k8s.io/json"

	"github.com/objwatch/objwatch/change/fieldmask"
	"github.com/objwatch/objwatch/client"
)

// Watch extensions (Options.FieldMask, Projection, Deltas; issue 26).
//
// Each reflector learns once, before its first list, which of them the
// server offers (client.REST.WatchExtensions, one GET /version per REST)
// and from then on either asks the server for them or emulates them:
//
//   - mask: on the wire, the server sends a MODIFIED only when a masked
//     value changed. Emulated, every MODIFIED arrives and the processor
//     drops the ones whose masked values equal the cached object's
//     (Mask.Changed), storing nothing: the cache keeps each object as of
//     the last change the mask saw, which is what a masked watch's client
//     holds, so handlers get the same calls (the same old and new objects)
//     either way. Only the informer's resourceVersion moves on.
//   - projection: on the wire, the server trims objects; emulated, the
//     reflector trims them with Mask.Project before Transform. Either way
//     the cache and handlers hold projections.
//   - deltas: only on the wire (emulated, events carry whole objects,
//     which is all deltas save). The reflector applies each patch to the
//     cached copy, copy-on-write. Deltas go on the wire only when the
//     cache holds exactly what the server sent: mask and projection on the
//     wire too (if asked for), and no Transform.
//
// A relist's items pass the same mask check in both modes, so that a
// relist does not notify an update the mask does not see. With the mask on
// the wire such an item is stored anyway (silently): the server's next
// patch for that object starts from the listed state.

// extConfig is what a reflector does about the watch extensions.
type extConfig struct {
	mask       *fieldmask.Mask // Options.FieldMask, nil without
	projection bool            // Options.Projection
	deltas     bool            // Options.Deltas
	disabled   bool            // Options.DisableServerExtensions
	dropMF     bool            // Options.DropManagedFields: patches skip managedFields
	transform  bool            // Options.Transform is set

	// Decided once (resolved) from what the server offers.
	resolved    bool
	wireMask    bool // the server filters MODIFIED events
	emulateProj bool // the reflector projects objects
	wireDeltas  bool // MODIFIED events may carry patches
}

// wanted reports whether any extension was asked for.
func (x *extConfig) wanted() bool { return x.mask != nil || x.deltas }

// errBrokenStream is a delta event the reflector could not apply: the
// stream no longer matches the cache, which only a relist repairs.
var errBrokenStream = errors.New("delta event does not apply to the cache")

// resolve learns what the server offers and sets the client's parameters.
func (r *reflector[T]) resolve(ctx context.Context) error {
	x := &r.ext
	if x.resolved {
		return nil
	}
	var ext client.Extensions
	if x.wanted() && !x.disabled {
		var err error
		if ext, err = r.client.REST().WatchExtensions(ctx); err != nil {
			return err
		}
	}
	var p client.WatchParams
	if x.mask != nil && ext.Has(client.ExtFieldMask) {
		x.wireMask = true
		p.FieldMask = []string{x.mask.String()}
		p.Projection = x.projection && ext.Has(client.ExtProjection)
	}
	x.emulateProj = x.projection && !p.Projection
	p.Deltas = x.deltas && ext.Has(client.ExtWatchDeltas) && !x.transform &&
		(x.mask == nil || x.wireMask) && !x.emulateProj
	x.wireDeltas = p.Deltas
	if p.FieldMask != nil || p.Deltas {
		r.client = r.client.WithWatchParams(p)
	}
	if x.emulateProj {
		// project reads the objects' JSON.
		r.client = r.client.WithCBOR(false).WithProtobuf(false)
	}
	x.resolved = true
	r.log.Debug("watch extensions", "serverMask", x.wireMask, "serverProjection", p.Projection,
		"serverDeltas", x.wireDeltas, "emulatedProjection", x.emulateProj)
	return nil
}

// project trims a raw object to the mask (an emulated projection).
func (r *reflector[T]) project(raw client.Raw[T]) (T, error) {
	var m map[string]any
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw.Bytes(), &m); err != nil {
		var zero T
		return zero, fmt.Errorf("decode: %w", err)
	}
	return fromMap[T](r.client, r.ext.mask.Project(m))
}

// applyDelta applies a delta event's patch to the cached copy of its
// object and returns the new object, or an error wrapping
// errBrokenStream. The cached object is not modified.
func (r *reflector[T]) applyDelta(ctx context.Context, raw client.Raw[T], patch []byte) (T, error) {
	var zero T
	id, err := raw.Meta()
	if err != nil {
		return zero, err
	}
	// The store must hold every change read before this one.
	if err := r.out.drained(ctx); err != nil {
		return zero, err
	}
	cur, ok := r.store.Get(id.Namespace, id.Name)
	if !ok {
		return zero, fmt.Errorf("%w: %s/%s is not cached", errBrokenStream, id.Namespace, id.Name)
	}
	return r.patched(cur, id, patch)
}

// patched returns cur with a delta event's patch applied; id is the
// event's object. cur is not modified.
func (r *reflector[T]) patched(cur T, id client.Meta, patch []byte) (T, error) {
	var zero T
	if string(cur.GetUID()) != id.UID {
		return zero, fmt.Errorf("%w: %s/%s: cached uid %s, event's %s", errBrokenStream, id.Namespace, id.Name, cur.GetUID(), id.UID)
	}
	p, err := fieldmask.ParsePatch(patch)
	if err != nil {
		return zero, fmt.Errorf("%w: %w", errBrokenStream, err)
	}
	if r.ext.dropMF {
		p = p.Without("metadata", "managedFields")
	}
	base, err := toMap(cur)
	if err != nil {
		return zero, err
	}
	out, err := p.Apply(base)
	if err != nil {
		return zero, fmt.Errorf("%w: %s/%s: %w", errBrokenStream, id.Namespace, id.Name, err)
	}
	m, ok := out.(map[string]any)
	if !ok {
		return zero, fmt.Errorf("%w: %s/%s: the patch made a %T", errBrokenStream, id.Namespace, id.Name, out)
	}
	obj, err := fromMap[T](r.client, m)
	if err != nil {
		return zero, fmt.Errorf("%w: %w", errBrokenStream, err)
	}
	if obj.GetResourceVersion() != id.ResourceVersion {
		return zero, fmt.Errorf("%w: %s/%s: patched to resourceVersion %q, the event is %q",
			errBrokenStream, id.Namespace, id.Name, obj.GetResourceVersion(), id.ResourceVersion)
	}
	r.metrics.deltas.Add(1)
	if r.transform != nil {
		return r.transform(obj)
	}
	return obj, nil
}

// toMap returns obj as decoded JSON: an unstructured object's own map
// (shared: the caller must not modify it), else a new one.
func toMap[T client.Object](obj T) (map[string]any, error) {
	if u, ok := any(obj).(*unstructured.Unstructured); ok {
		return u.Object, nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("to unstructured: %w", err)
	}
	return m, nil
}

// fromMap returns m as a T: for unstructured objects, m itself.
func fromMap[T client.Object](c *client.Client[T], m map[string]any) (T, error) {
	obj := c.New()
	if u, ok := any(obj).(*unstructured.Unstructured); ok {
		u.Object = m
		return obj, nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, obj); err != nil {
		var zero T
		return zero, fmt.Errorf("from unstructured: %w", err)
	}
	if k := obj.GetObjectKind(); k.GroupVersionKind().Kind == "" {
		k.SetGroupVersionKind(c.Resource().GVK())
	}
	return obj, nil
}

// maskUnchanged reports whether e, an update of the cached object k,
// changes nothing the mask sees, so that handlers are not told. It is
// asked only for the entries the reflector flagged (e.maskCheck).
func (i *SharedInformer[T]) maskUnchanged(k Key, obj T) bool {
	old, ok := i.store.Get(k.Namespace, k.Name)
	if !ok {
		return false
	}
	a, err := toMap(old)
	if err != nil {
		return false
	}
	b, err := toMap(obj)
	if err != nil {
		return false
	}
	return !i.mask.Changed(a, b)
}
