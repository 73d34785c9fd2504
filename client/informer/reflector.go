package informer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/client"
)

// reflector keeps the event log fed with the server's state: list, then
// watch from the list's resourceVersion, resume from the last
// resourceVersion seen after any disconnect, and relist only when the
// server has forgotten that resourceVersion (410).
//
// A relist never produces no-op updates: each listed object is compared
// with the store (resourceVersion and UID, read before decoding) and only
// changed ones are logged; objects in the store but not in the list are
// logged as deletions with an unknown final state. This is sound because
// the reflector first waits until the processor has applied everything it
// logged, and then only it causes store writes to its namespace. (An
// informer over several namespaces has one reflector for each; a relist
// compares and deletes only the objects of its own namespace.)
type reflector[T client.Object] struct {
	name          string // the informer's
	client        *client.Client[T]
	namespace     string
	labelSelector string
	fieldSelector string
	store         *Store[T] // read only here
	out           *eventLog[T]
	transform     func(T) (T, error)
	pageSize      int64
	minTimeout    time.Duration
	backoff       backoff
	log           *slog.Logger
	metrics       *metrics
	stamps        bool // stamp log entries for the lag metric
	ext           extConfig

	// Owned by run's goroutine.
	streaming bool   // try streaming lists (sendInitialEvents)
	listed    bool   // the store holds a complete list plus every change up to resumeRV
	resumeRV  string // where the next watch starts
	synced    bool   // the synced marker was logged
	progress  bool   // the current attempt read something
	verb      string // of the current request: "list" or "watch"
	lists     int    // lists started
	watches   int    // watches started

	lastErr atomic.Pointer[error]        // the last failure, nil once a request is accepted
	refused atomic.Pointer[RefusedError] // set while the server refuses access
}

// run lists and watches until ctx ends.
func (r *reflector[T]) run(ctx context.Context) {
	for ctx.Err() == nil {
		r.progress = false
		start := time.Now()
		var err error
		switch {
		case !r.ext.resolved:
			if err = r.resolve(ctx); err == nil {
				continue
			}
		case r.listed:
			err = r.watch(ctx, false)
		case r.streaming:
			err = r.watch(ctx, true)
			if unsupported(err) {
				r.log.Info("streaming lists not supported, falling back to paginated lists", "err", err)
				r.streaming = false
				continue
			}
		default:
			if err = r.list(ctx); err == nil {
				err = r.watch(ctx, false)
			}
		}
		if ctx.Err() != nil {
			return
		}
		if r.progress {
			r.backoff.reset()
			r.lastErr.Store(nil)
		}
		switch {
		case errors.Is(err, errBrokenStream):
			r.metrics.deltaFailures.Add(1)
			r.log.Info("delta event does not apply, relisting", "err", err, "resourceVersion", r.resumeRV)
			r.listed = false
			continue
		case errors.Is(err, client.ErrGone):
			// The server compacted past resumeRV: relist (consistently),
			// right away the first time.
			r.log.Debug("resourceVersion expired, relisting", "resourceVersion", r.resumeRV, "err", err)
			if r.out.push(ctx, entry[T]{op: opGone, gone: r.resumeRV}) != nil {
				return
			}
			r.listed = false
			if r.progress {
				continue
			}
		case errors.Is(err, io.EOF) && time.Since(start) > time.Second:
			continue // the server ended the watch at its timeout: renew it
		case err != nil && !errors.Is(err, io.EOF):
			r.metrics.errors.Add(1)
			if ref := r.refusal(err); ref != nil {
				r.refuse(ref)
				break
			}
			r.lastErr.Store(&err)
			r.log.Info("list/watch failed", "err", err, "resourceVersion", r.resumeRV)
		}
		if r.backoff.sleep(ctx) != nil {
			return
		}
	}
}

// unsupported reports whether err is the server rejecting a streaming list.
func unsupported(err error) bool {
	var se *client.StatusError
	if !errors.As(err, &se) {
		return false
	}
	switch se.ErrStatus.Code {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusNotImplemented, http.StatusMethodNotAllowed:
		return true
	}
	return false
}

// received stamps a change read now, if lag is measured.
func (r *reflector[T]) received() stamp {
	if !r.stamps {
		return stamp{}
	}
	return stamp{at: time.Now()}
}

func (r *reflector[T]) setResumeRV(rv string) {
	r.resumeRV = rv
}

// relist is the state of one list (paginated or streaming).
type relist struct {
	// unseen holds the keys the store had at the start, struck out as the
	// list has them: at the end, the ones left are the objects gone. nil
	// when the store was empty at the start: nothing to compare or delete.
	unseen keySet
}

func (r *reflector[T]) startList(ctx context.Context) (*relist, error) {
	if err := r.out.drained(ctx); err != nil {
		return nil, err
	}
	r.metrics.lists.Add(1)
	if r.lists++; r.lists > 1 {
		r.metrics.relists.Add(1)
	}
	rl := &relist{}
	if r.store.Len() > 0 {
		if ks := r.store.keySet(r.namespace); len(ks) > 0 {
			rl.unseen = ks
		}
	}
	return rl, nil
}

// listed handles one object of a list: skip it if the store has this very
// state, else decode and log it.
func (r *reflector[T]) listItem(ctx context.Context, rl *relist, raw client.Raw[T], st stamp) error {
	if rl.unseen != nil {
		// Compare before decoding, allocating nothing for unchanged objects.
		m, err := raw.PeekMeta()
		if err != nil {
			return err
		}
		rl.unseen.strike(m.Namespace, m.Name)
		if cur, ok := r.store.identityBytes(m.Namespace, m.Name); ok &&
			cur.rv == string(m.ResourceVersion) && string(cur.uid) == string(m.UID) {
			return nil
		}
	}
	obj, err := r.decode(raw)
	if err != nil {
		return err
	}
	return r.out.push(ctx, entry[T]{op: opUpsert, obj: obj, stamp: st, maskCheck: r.ext.mask != nil, keep: r.ext.wireMask})
}

func (r *reflector[T]) decode(raw client.Raw[T]) (T, error) {
	var obj T
	var err error
	if r.ext.emulateProj {
		obj, err = r.project(raw)
	} else {
		obj, err = raw.Decode()
	}
	if err != nil || r.transform == nil {
		return obj, err
	}
	obj, err = r.transform(obj)
	if err != nil {
		return obj, fmt.Errorf("transform: %w", err)
	}
	return obj, nil
}

// finishList logs the deletion of every stored object the list did not
// have, and makes rv the resume point.
func (r *reflector[T]) finishList(ctx context.Context, rl *relist, rv string) error {
	if rl.unseen != nil {
		st := r.received()
		var err error
		rl.unseen.unstruck(func(k Key) bool {
			err = r.out.push(ctx, entry[T]{op: opDelete, key: k, unknown: true, stamp: st})
			return err == nil
		})
		if err != nil {
			return err
		}
	}
	r.setResumeRV(rv)
	if err := r.out.push(ctx, entry[T]{op: opMark, mark: rv}); err != nil {
		return err
	}
	r.listed = true
	if !r.synced {
		r.synced = true
		return r.out.push(ctx, entry[T]{op: opSynced})
	}
	return nil
}

// list does a paginated list.
func (r *reflector[T]) list(ctx context.Context) error {
	rl, err := r.startList(ctx)
	if err != nil {
		return err
	}
	opts := metav1.ListOptions{LabelSelector: r.labelSelector, FieldSelector: r.fieldSelector, Limit: r.pageSize}
	r.verb = "list"
	for {
		meta, err := r.client.ListRaw(ctx, r.namespace, opts, func(raw client.Raw[T]) error {
			r.progress = true
			return r.listItem(ctx, rl, raw, r.received())
		})
		if err != nil {
			return fmt.Errorf("list: %w", err)
		}
		r.accepted()
		if meta.Continue == "" {
			return r.finishList(ctx, rl, meta.ResourceVersion)
		}
		opts.Continue = meta.Continue
	}
}

// watch watches from resumeRV, or, with initial, does a streaming list (a
// watch that first sends the current state) and carries on watching.
func (r *reflector[T]) watch(ctx context.Context, initial bool) error {
	timeout := int64((r.minTimeout + rand.N(r.minTimeout)) / time.Second)
	opts := metav1.ListOptions{
		LabelSelector: r.labelSelector, FieldSelector: r.fieldSelector,
		AllowWatchBookmarks: true, TimeoutSeconds: &timeout,
	}
	var rl *relist
	if initial {
		var err error
		if rl, err = r.startList(ctx); err != nil {
			return err
		}
		send := true
		opts.SendInitialEvents = &send
		opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	} else {
		opts.ResourceVersion = r.resumeRV
	}
	r.metrics.watches.Add(1)
	if r.watches++; r.watches > 1 {
		r.metrics.restarts.Add(1)
	}
	r.verb = "watch"
	w, err := r.client.Watch(ctx, r.namespace, opts)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer w.Stop()
	r.accepted()
	for {
		typ, raw, err := w.NextRaw()
		if err != nil {
			return err
		}
		r.progress = true
		r.metrics.event(typ)
		st := r.received()
		if r.stamps {
			if at, ok := w.CommitTime(); ok {
				st = stamp{at: at, commit: true}
			}
		}
		switch typ {
		case client.Bookmark:
			obj, err := raw.Decode()
			if err != nil {
				return err
			}
			switch {
			case rl == nil:
				r.setResumeRV(obj.GetResourceVersion())
				if err := r.out.push(ctx, entry[T]{op: opMark, mark: obj.GetResourceVersion()}); err != nil {
					return err
				}
			case obj.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true":
				if err := r.finishList(ctx, rl, obj.GetResourceVersion()); err != nil {
					return err
				}
				rl = nil
			}
		case client.Added, client.Modified:
			if rl != nil {
				if err := r.listItem(ctx, rl, raw, st); err != nil {
					return err
				}
				continue
			}
			var obj T
			var err error
			if patch := w.Patch(); patch != nil && typ == client.Modified {
				obj, err = r.applyDelta(ctx, raw, patch)
			} else {
				obj, err = r.decode(raw)
			}
			if err != nil {
				return err
			}
			e := entry[T]{op: opUpsert, obj: obj, stamp: st, mark: obj.GetResourceVersion(),
				maskCheck: r.ext.mask != nil && !r.ext.wireMask}
			if err := r.out.push(ctx, e); err != nil {
				return err
			}
			r.setResumeRV(obj.GetResourceVersion())
		case client.Deleted:
			obj, err := r.decode(raw)
			if err != nil {
				return err
			}
			var mark string
			if rl == nil {
				mark = obj.GetResourceVersion()
			}
			if err := r.out.push(ctx, entry[T]{op: opDelete, obj: obj, key: KeyOf(obj), stamp: st, mark: mark}); err != nil {
				return err
			}
			if rl == nil {
				r.setResumeRV(obj.GetResourceVersion())
			}
		}
	}
}
