package recording

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// Options tune a Writer.
type Options struct {
	// IncludeSecrets records Secrets; by default they are left out.
	IncludeSecrets bool
	// Redact lists field paths whose values are replaced by "REDACTED":
	// JSON Pointers ("/data/password") or dotted ("data.password"); "*"
	// matches any key or index.
	Redact []string
	// Now is the clock that stamps items (default time.Now).
	Now func() time.Time
	// Written, if set, is called with each item once it is written (in
	// order, one call at a time); it must not call the Writer.
	Written func(Item)
}

// Writer writes a recording. Items are stamped with their arrival time
// (the clock at the call, since Header.Start). Close writes the end line:
// a recording that was not closed is truncated and no Reader accepts it.
// Safe for concurrent use.
type Writer struct {
	mu      sync.Mutex
	zw      *gzip.Writer
	enc     *json.Encoder
	start   time.Time
	now     func() time.Time
	secrets bool
	redact  []path
	written func(Item)
	last    time.Duration
	items   int
	skipped int
	closed  bool
}

// NewWriter writes h (Format, Version, Secrets and Redacted filled in; Start
// too when zero) to w, compressed, and returns the Writer of the items.
func NewWriter(w io.Writer, h Header, opts Options) (*Writer, error) {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	if len(h.Resources) == 0 {
		return nil, errors.New("recording: a header names at least one resource")
	}
	for _, r := range h.Resources {
		if _, _, err := SplitResource(r); err != nil {
			return nil, fmt.Errorf("recording: %w", err)
		}
	}
	paths, err := parsePaths(opts.Redact)
	if err != nil {
		return nil, fmt.Errorf("recording: %w", err)
	}
	h.Format, h.Version, h.Secrets = Format, Version, opts.IncludeSecrets
	h.Redacted = slices.Clone(opts.Redact)
	if h.Start.IsZero() {
		h.Start = now()
	}
	zw := gzip.NewWriter(w)
	wr := &Writer{zw: zw, enc: json.NewEncoder(zw), start: h.Start, now: now, secrets: opts.IncludeSecrets, redact: paths, written: opts.Written}
	wr.enc.SetEscapeHTML(false)
	if err := wr.enc.Encode(h); err != nil {
		return nil, fmt.Errorf("recording: header: %w", err)
	}
	return wr, nil
}

// Object records an item of a kind that carries an object (Initial,
// Listed, Added, Modified, Deleted, Bookmark). obj is anything that
// encodes to a JSON object. A Secret is skipped, unless the Writer
// includes Secrets.
func (w *Writer) Object(kind Kind, resource string, obj any) error {
	return w.object(Item{Kind: kind, Resource: resource}, obj)
}

// DeletedUnknown records a deletion the client missed; obj is the last
// state it saw.
func (w *Writer) DeletedUnknown(resource string, obj any) error {
	return w.object(Item{Kind: Deleted, Resource: resource, Unknown: true}, obj)
}

func (w *Writer) object(it Item, obj any) error {
	if !it.Kind.hasObject() {
		return fmt.Errorf("recording: %s carries no object", it.Kind)
	}
	data, ok, err := w.prepare(it.Resource, obj)
	if err != nil || !ok {
		return err
	}
	it.Object = data
	return w.write(it, true)
}

// Marker records an item without an object (Synced, Gone, Relist) with
// the resourceVersion it names, if any.
func (w *Writer) Marker(kind Kind, resource, resourceVersion string) error {
	if kind.hasObject() || kind == End {
		return fmt.Errorf("recording: %s is not a marker", kind)
	}
	return w.write(Item{Kind: kind, Resource: resource, ResourceVersion: resourceVersion}, true)
}

// Write writes it as is, at it.At, e.g. to copy or edit a recording:
// it.Object is written unchanged (not redacted or filtered, as Object
// does). A time before the previous item's is an error.
func (w *Writer) Write(it Item) error { return w.write(it, false) }

// write writes it, stamped with the clock if stamp.
func (w *Writer) write(it Item, stamp bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.New("recording: write after Close")
	}
	if stamp {
		it.At = max(w.now().Sub(w.start), w.last) // a clock step back is not disorder
	}
	if it.At < w.last {
		return fmt.Errorf("recording: %s at %v is before the previous item's %v", it.Kind, it.At, w.last)
	}
	if it.Kind == End {
		return errors.New("recording: the end line is written by Close")
	}
	it.Items = 0
	if err := w.enc.Encode(it); err != nil {
		return fmt.Errorf("recording: %s: %w", it.Kind, err)
	}
	w.last = it.At
	w.items++
	if w.written != nil {
		w.written(it)
	}
	return nil
}

// prepare encodes obj, leaves Secrets out (by resource, or by kind for
// objects that say theirs) and redacts.
func (w *Writer) prepare(resource string, obj any) (json.RawMessage, bool, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, false, fmt.Errorf("recording: encoding the object: %w", err)
	}
	if len(data) == 0 || data[0] != '{' {
		return nil, false, errors.New("recording: the object does not encode to a JSON object")
	}
	if !w.secrets {
		var tm struct{ APIVersion, Kind string }
		if err := json.Unmarshal(data, &tm); resource == "v1/secrets" || err == nil && tm.APIVersion == "v1" && tm.Kind == "Secret" {
			w.mu.Lock()
			w.skipped++
			w.mu.Unlock()
			return nil, false, nil
		}
	}
	if len(w.redact) == 0 {
		return data, true, nil
	}
	out, err := redact(data, w.redact)
	return out, err == nil, err
}

// Items returns how many items were written.
func (w *Writer) Items() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.items
}

// Skipped returns how many Secrets were left out.
func (w *Writer) Skipped() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.skipped
}

// Flush writes what is buffered to the underlying writer.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.zw.Flush()
}

// Close writes the end line and the gzip footer; it does not close the
// underlying writer. Later writes fail.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	at := max(w.now().Sub(w.start), w.last)
	if err := w.enc.Encode(Item{Kind: End, At: at, Items: w.items}); err != nil {
		return fmt.Errorf("recording: end line: %w", err)
	}
	if err := w.zw.Close(); err != nil {
		return fmt.Errorf("recording: %w", err)
	}
	return nil
}
