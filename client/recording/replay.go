package recording

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsjson "sigs.k8s.io/json"

	"github.com/objwatch/objwatch/client"
)

// ReplayOptions tune Replay.
type ReplayOptions struct {
	// Speed scales the recorded spacing: 1 keeps it, 2 halves it, 0 (the
	// default) does not wait at all.
	Speed float64
	// Before, if set, is called before each write with the item that
	// causes it; an error stops the replay (objwatch replay --step waits
	// for Enter there).
	Before func(ctx context.Context, it Item) error
	// After, if set, is told about each write done ("create", "update" or
	// "delete", and the object's namespace/name).
	After func(it Item, action, key string)
}

// ReplayStats counts what Replay wrote.
type ReplayStats struct {
	Creates, Updates, Deletes int
}

// Replay plays rec into the server rc reaches, in order: an object listed
// or added is created (or, when it already exists, updated), a change
// updates it by name, a deletion deletes it; a recorded relist writes what
// it changed, as an informer would see it. Objects are written without
// their server-assigned fields (uid, resourceVersion, creationTimestamp,
// generation, managedFields) and without ownerReferences and finalizers,
// which name UIDs and controllers of the recorded cluster (an update keeps
// those the object has on the replay server); a status is
// written through the status subresource when the resource has one.
// Namespaces that objects need are created. Spacing follows Speed.
func Replay(ctx context.Context, rc *client.REST, rec *Recording, opts ReplayOptions) (ReplayStats, error) {
	rp := &replayer{rc: rc, opts: opts, clients: map[string]*client.Client[*unstructured.Unstructured]{},
		applied: map[string]map[key]string{}, listing: map[string][]*unstructured.Unstructured{}, namespaces: map[string]bool{}}
	for _, r := range rec.Header.Resources {
		gvr, err := ParseResource(r)
		if err != nil {
			return rp.stats, err
		}
		res, err := rc.Resource(ctx, gvr)
		if err != nil {
			return rp.stats, fmt.Errorf("recording: replay: resource %s: %w", r, err)
		}
		rp.clients[r] = client.NewUnstructured(rc, res)
		rp.applied[r] = map[key]string{}
	}
	start := time.Now()
	for _, it := range rec.Items {
		if opts.Speed > 0 {
			if err := sleepUntil(ctx, start.Add(time.Duration(float64(it.At)/opts.Speed))); err != nil {
				return rp.stats, err
			}
		}
		if err := rp.item(ctx, it); err != nil {
			return rp.stats, fmt.Errorf("recording: replay: line %d (%s): %w", it.Line, it.Kind, err)
		}
	}
	return rp.stats, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

type replayer struct {
	rc         *client.REST
	opts       ReplayOptions
	clients    map[string]*client.Client[*unstructured.Unstructured]
	applied    map[string]map[key]string // per resource: the recorded resourceVersion written
	listing    map[string][]*unstructured.Unstructured
	namespaces map[string]bool // known to exist
	stats      ReplayStats
}

func (rp *replayer) item(ctx context.Context, it Item) error {
	switch it.Kind {
	case Bookmark, Gone:
		return nil
	case Relist:
		rp.listing[it.Resource] = []*unstructured.Unstructured{}
		return nil
	case Synced:
		listed, ok := rp.listing[it.Resource]
		if !ok {
			return nil // the end of the initial list
		}
		delete(rp.listing, it.Resource)
		return rp.sync(ctx, it, listed)
	}
	obj, err := decodeUnstructured(it)
	if err != nil {
		return err
	}
	switch it.Kind {
	case Listed:
		rp.listing[it.Resource] = append(rp.listing[it.Resource], obj)
		return nil
	case Deleted:
		return rp.delete(ctx, it, key{obj.GetNamespace(), obj.GetName()})
	}
	return rp.upsert(ctx, it, obj)
}

// sync writes what a relist changed.
func (rp *replayer) sync(ctx context.Context, it Item, listed []*unstructured.Unstructured) error {
	seen := map[key]bool{}
	for _, o := range listed {
		k := key{o.GetNamespace(), o.GetName()}
		seen[k] = true
		if rp.applied[it.Resource][k] == o.GetResourceVersion() {
			continue
		}
		if err := rp.upsert(ctx, it, o); err != nil {
			return err
		}
	}
	for _, k := range sortedKeys(rp.applied[it.Resource]) {
		if !seen[k] {
			if err := rp.delete(ctx, it, k); err != nil {
				return err
			}
		}
	}
	return nil
}

func decodeUnstructured(it Item) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(it.Object, &obj.Object); err != nil {
		return nil, fmt.Errorf("decoding the object: %w", err)
	}
	if obj.GetName() == "" {
		return nil, errors.New("the object has no name")
	}
	return obj, nil
}

// clean drops what the recorded server assigned or what names its state.
func clean(o *unstructured.Unstructured) *unstructured.Unstructured {
	o = o.DeepCopy()
	for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
		"selfLink", "deletionTimestamp", "deletionGracePeriodSeconds", "ownerReferences", "finalizers"} {
		unstructured.RemoveNestedField(o.Object, "metadata", f)
	}
	return o
}

func (rp *replayer) before(ctx context.Context, it Item) error {
	if rp.opts.Before != nil {
		return rp.opts.Before(ctx, it)
	}
	return nil
}

func (rp *replayer) after(it Item, action string, k key) {
	if rp.opts.After != nil {
		rp.opts.After(it, action, k.String())
	}
}

func (k key) String() string {
	if k.namespace == "" {
		return k.name
	}
	return k.namespace + "/" + k.name
}

// upsert creates obj, or updates it by name if it exists.
func (rp *replayer) upsert(ctx context.Context, it Item, recorded *unstructured.Unstructured) error {
	c := rp.clients[it.Resource]
	k := key{recorded.GetNamespace(), recorded.GetName()}
	if err := rp.before(ctx, it); err != nil {
		return err
	}
	if err := rp.namespace(ctx, c, k.namespace); err != nil {
		return err
	}
	obj := clean(recorded)
	action := "create"
	written, err := c.Create(ctx, obj, metav1.CreateOptions{})
	if errors.Is(err, client.ErrAlreadyExists) {
		action = "update"
		written, err = rp.update(ctx, c, obj)
	}
	if err != nil {
		return fmt.Errorf("%s %s %s: %w", action, c.Resource(), k, err)
	}
	if err := rp.status(ctx, c, obj, written); err != nil {
		return err
	}
	if action == "create" {
		rp.stats.Creates++
	} else {
		rp.stats.Updates++
	}
	rp.applied[it.Resource][k] = recorded.GetResourceVersion()
	rp.after(it, action, k)
	return nil
}

// update writes obj over the current state, by name (last writer wins).
func (rp *replayer) update(ctx context.Context, c *client.Client[*unstructured.Unstructured], obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	for range 5 {
		cur, err := c.Get(ctx, obj.GetNamespace(), obj.GetName(), metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		obj.SetResourceVersion(cur.GetResourceVersion())
		// Finalizers and owners are the replay server's own state.
		obj.SetFinalizers(cur.GetFinalizers())
		obj.SetOwnerReferences(cur.GetOwnerReferences())
		out, err := c.Update(ctx, obj, metav1.UpdateOptions{})
		if !errors.Is(err, client.ErrConflict) {
			return out, err
		}
	}
	return nil, fmt.Errorf("update %s: conflicts kept coming", obj.GetName())
}

// status writes obj's status if the server did not take it with the
// object (a resource with a status subresource).
func (rp *replayer) status(ctx context.Context, c *client.Client[*unstructured.Unstructured], obj, written *unstructured.Unstructured) error {
	want, ok, _ := unstructured.NestedFieldNoCopy(obj.Object, "status")
	if !ok {
		return nil
	}
	if got, _, _ := unstructured.NestedFieldNoCopy(written.Object, "status"); equalJSON(got, want) {
		return nil
	}
	st := written.DeepCopy()
	st.Object["status"] = want
	_, err := c.UpdateStatus(ctx, st, metav1.UpdateOptions{})
	if errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrMethodNotAllowed) {
		return nil // no status subresource
	}
	if err != nil {
		return fmt.Errorf("status of %s %s: %w", c.Resource(), obj.GetName(), err)
	}
	return nil
}

func equalJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

func (rp *replayer) delete(ctx context.Context, it Item, k key) error {
	c := rp.clients[it.Resource]
	if err := rp.before(ctx, it); err != nil {
		return err
	}
	err := c.Delete(ctx, k.namespace, k.name, metav1.DeleteOptions{})
	if err != nil && !errors.Is(err, client.ErrNotFound) {
		return fmt.Errorf("delete %s %s: %w", c.Resource(), k, err)
	}
	delete(rp.applied[it.Resource], k)
	rp.stats.Deletes++
	rp.after(it, "delete", k)
	return nil
}

var namespaces = client.Resource{GVR: corev1.SchemeGroupVersion.WithResource("namespaces"), Kind: "Namespace"}

// namespace creates ns if it does not exist yet.
func (rp *replayer) namespace(ctx context.Context, c *client.Client[*unstructured.Unstructured], ns string) error {
	if ns == "" || rp.namespaces[ns] || !c.Resource().Namespaced {
		return nil
	}
	nc := client.NewClient[*corev1.Namespace](rp.rc, namespaces)
	_, err := nc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !errors.Is(err, client.ErrAlreadyExists) {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	rp.namespaces[ns] = true
	return nil
}
