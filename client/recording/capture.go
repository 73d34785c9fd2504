package recording

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/client"
)

// CaptureOptions select what Capture records.
type CaptureOptions struct {
	Namespace     string // "" for all namespaces (or a cluster-scoped resource)
	LabelSelector string
	// Retry is the pause before resuming a failed watch (default 500 ms).
	Retry time.Duration
	// Synced, if set, is called after each complete list is written
	// (the initial one, then each relist).
	Synced func()
	// Failed, if set, is told about each failed list or watch before it
	// is retried (a 410 is not a failure: it is recorded).
	Failed func(err error)
}

// Capture records the objects c reads into w until ctx ends, then returns
// nil (or the first error writing w): the initial list ("initial" items,
// then "synced"), every watch event with its arrival time, bookmarks
// included; after a disconnect it resumes the watch from the last
// resourceVersion seen, and when the server has forgotten it (410 Gone) it
// writes "gone", relists ("relist", "listed" items, "synced") and watches
// on. w's header must name c's resource (ResourceName). Any number of
// Captures may share a Writer; Capture runs on the caller's goroutine.
func Capture(ctx context.Context, c *client.Client[*unstructured.Unstructured], w *Writer, opts CaptureOptions) error {
	cp := &capture{c: c, w: w, opts: opts, resource: ResourceName(c.Resource().GVR)}
	if cp.opts.Retry <= 0 {
		cp.opts.Retry = 500 * time.Millisecond
	}
	err := cp.run(ctx)
	if ctx.Err() != nil && !errors.Is(err, errWrite) {
		return nil
	}
	return err
}

var errWrite = errors.New("writing the recording")

type capture struct {
	c        *client.Client[*unstructured.Unstructured]
	w        *Writer
	opts     CaptureOptions
	resource string
	rv       string // where the next watch starts; "" to list
	lists    int
}

func (cp *capture) run(ctx context.Context) error {
	for ctx.Err() == nil {
		var err error
		if cp.rv == "" {
			err = cp.list(ctx)
		} else {
			err = cp.watch(ctx)
		}
		switch {
		case errors.Is(err, errWrite):
			return err
		case errors.Is(err, client.ErrGone):
			if werr := cp.w.Marker(Gone, cp.resource, cp.rv); werr != nil {
				return fmt.Errorf("%w: %w", errWrite, werr)
			}
			cp.rv = ""
			continue
		case errors.Is(err, io.EOF):
			continue // the server ended the watch: resume
		case err != nil && ctx.Err() == nil && cp.opts.Failed != nil:
			cp.opts.Failed(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(cp.opts.Retry):
		}
	}
	return ctx.Err()
}

func (cp *capture) write(err error) error {
	if err != nil {
		return fmt.Errorf("%w: %w", errWrite, err)
	}
	return nil
}

// list lists into initial items, or a relist after the first.
func (cp *capture) list(ctx context.Context) error {
	kind := Initial
	if cp.lists > 0 {
		kind = Listed
	}
	opts := metav1.ListOptions{LabelSelector: cp.opts.LabelSelector, Limit: 500}
	var items []*unstructured.Unstructured
	for {
		meta, err := cp.c.ListRaw(ctx, cp.opts.Namespace, opts, func(raw client.Raw[*unstructured.Unstructured]) error {
			obj, err := raw.Decode()
			items = append(items, obj)
			return err
		})
		if err != nil {
			return fmt.Errorf("list %s: %w", cp.c.Resource(), err)
		}
		if meta.Continue != "" {
			opts.Continue = meta.Continue
			continue
		}
		// Written once complete, so that a list that failed half-way
		// leaves nothing behind.
		cp.lists++
		if kind == Listed {
			if err := cp.write(cp.w.Marker(Relist, cp.resource, "")); err != nil {
				return err
			}
		}
		for _, o := range items {
			if err := cp.write(cp.w.Object(kind, cp.resource, o)); err != nil {
				return err
			}
		}
		cp.rv = meta.ResourceVersion
		if err := cp.write(cp.w.Marker(Synced, cp.resource, meta.ResourceVersion)); err != nil {
			return err
		}
		if cp.opts.Synced != nil {
			cp.opts.Synced()
		}
		return nil
	}
}

// watch watches from cp.rv until the watch ends.
func (cp *capture) watch(ctx context.Context) error {
	wt, err := cp.c.Watch(ctx, cp.opts.Namespace, metav1.ListOptions{
		LabelSelector: cp.opts.LabelSelector, ResourceVersion: cp.rv, AllowWatchBookmarks: true,
	})
	if err != nil {
		return fmt.Errorf("watch %s: %w", cp.c.Resource(), err)
	}
	defer wt.Stop()
	for {
		ev, err := wt.Next()
		if err != nil {
			return err
		}
		if err := cp.write(cp.w.Object(Kind(ev.Type), cp.resource, ev.Object)); err != nil {
			return err
		}
		cp.rv = ev.Object.GetResourceVersion()
	}
}
