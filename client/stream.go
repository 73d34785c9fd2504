package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	sigsjson "sigs.k8s.io/json"
)

// ListRaw reads the objects matching opts like List, but streams them: fn
// receives each item undecoded, as it is read from the response, and may
// decode it or skip it. Nothing but the current item is held in memory. An
// error from fn stops the list and is returned. The ListMeta is complete
// once ListRaw returns.
func (c *Client[T]) ListRaw(ctx context.Context, namespace string, opts metav1.ListOptions, fn func(Raw[T]) error) (metav1.ListMeta, error) {
	var meta metav1.ListMeta
	p, err := c.path(namespace, "", "")
	if err != nil {
		return meta, fmt.Errorf("list %s: %w", c.res, err)
	}
	opts.Watch = false
	if c.rest.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.rest.timeout)
		defer cancel()
	}
	q := listQuery(opts)
	c.params.add(q, false)
	resp, err := c.rest.do(ctx, request{method: http.MethodGet, path: p, query: q, accept: c.readAccept()})
	if err != nil {
		return meta, err
	}
	defer resp.Body.Close()
	switch ct := resp.Header.Get("Content-Type"); {
	case isCBOR(ct):
		return c.listCBOR(resp.Body, resp.ContentLength, fn)
	case isProtobuf(ct):
		return c.listProtobuf(resp.Body, resp.ContentLength, fn)
	}
	dec := sigsjson.NewDecoderCaseSensitivePreserveInts(resp.Body)
	if err := expectDelim(dec, '{'); err != nil {
		return meta, fmt.Errorf("list %s: %w", c.res, err)
	}
	var raw json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return meta, fmt.Errorf("list %s: %w", c.res, err)
		}
		switch tok {
		case "metadata":
			if err := dec.Decode(&meta); err != nil {
				return meta, fmt.Errorf("list %s: metadata: %w", c.res, err)
			}
		case "items":
			tok, err := dec.Token()
			if err != nil {
				return meta, fmt.Errorf("list %s: %w", c.res, err)
			}
			if tok == nil {
				continue // "items": null
			}
			if tok != json.Delim('[') {
				return meta, fmt.Errorf("list %s: items is not an array", c.res)
			}
			for dec.More() {
				raw = raw[:0]
				if err := dec.Decode(&raw); err != nil {
					return meta, fmt.Errorf("list %s: %w", c.res, err)
				}
				if err := fn(Raw[T]{data: raw, codec: &c.codec}); err != nil {
					return meta, err
				}
			}
			if err := expectDelim(dec, ']'); err != nil {
				return meta, fmt.Errorf("list %s: %w", c.res, err)
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return meta, fmt.Errorf("list %s: %w", c.res, err)
			}
		}
	}
	return meta, nil
}

// listCBOR reads a list answered in CBOR: one data item of size bytes
// (-1: unknown), read whole (CBOR has no streaming decoder here), whose
// items are then passed to fn one by one, undecoded (slices of the body).
func (c *Client[T]) listCBOR(body io.Reader, size int64, fn func(Raw[T]) error) (metav1.ListMeta, error) {
	data, err := readBody(body, size)
	if err != nil {
		return metav1.ListMeta{}, fmt.Errorf("list %s: %w", c.res, err)
	}
	var l cborList
	if err := decodeCBORWith(data, &l, false); err != nil {
		return metav1.ListMeta{}, fmt.Errorf("list %s: decode CBOR: %w", c.res, err)
	}
	for i, raw := range l.Items {
		if isCBORNull(raw) {
			return l.Metadata, fmt.Errorf("list %s: decode CBOR: item %d is null", c.res, i)
		}
		if err := fn(Raw[T]{data: raw, codec: &c.codec, enc: wireCBOR}); err != nil {
			return l.Metadata, err
		}
	}
	return l.Metadata, nil
}

// listProtobuf reads a list answered in protobuf: one envelope of size
// bytes (-1: unknown), read whole, whose items are then passed to fn one
// by one, undecoded (slices of the body).
func (c *Client[T]) listProtobuf(body io.Reader, size int64, fn func(Raw[T]) error) (metav1.ListMeta, error) {
	data, err := readBody(body, size)
	if err != nil {
		return metav1.ListMeta{}, fmt.Errorf("list %s: %w", c.res, err)
	}
	env, err := openEnvelope(data)
	if err != nil {
		return metav1.ListMeta{}, fmt.Errorf("list %s: decode protobuf: %w", c.res, err)
	}
	var fnErr error
	meta, err := protoList(env.raw, func(item []byte) error {
		fnErr = fn(Raw[T]{data: item, codec: &c.codec, enc: wireProtobuf})
		return fnErr
	})
	if err != nil && err == fnErr {
		return meta, err
	}
	if err != nil {
		return meta, fmt.Errorf("list %s: decode protobuf: %w", c.res, err)
	}
	return meta, nil
}

// readBody reads a list's body of size bytes (-1: unknown) whole.
func readBody(body io.Reader, size int64) ([]byte, error) {
	var buf bytes.Buffer
	if size > 0 && size <= maxPreallocatedList {
		buf.Grow(int(size) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(body)
	return buf.Bytes(), err
}

// maxPreallocatedList bounds the buffer a binary list's Content-Length
// reserves before its bytes arrive.
const maxPreallocatedList = 256 << 20

func expectDelim(dec sigsjson.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != d {
		return fmt.Errorf("unexpected %v, want %v", tok, d)
	}
	return nil
}

// EventType is the type of a watch event.
type EventType string

// Watch event types. ERROR events are not returned as events: Next returns
// their Status as a *StatusError.
const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
	Bookmark EventType = "BOOKMARK"
	Error    EventType = "ERROR"
)

// Event is one watch event. For Bookmark, Object carries only
// metadata.resourceVersion (and annotations).
type Event[T Object] struct {
	Type   EventType
	Object T
	// CommitTime is when the server learned of the change from its
	// storage, if it said (objwatch's server does, in a "commitTime"
	// field other clients ignore; not for initial events); else zero.
	CommitTime time.Time
	// Patch, on a delta event (a MODIFIED of a watch with
	// WatchParams.Deltas), is the RFC 6902 JSON Patch from the previous
	// state of the object on this stream to the new one; Object then
	// holds only the object's identity (apiVersion, kind, name,
	// namespace, uid, resourceVersion). nil on every other event.
	Patch json.RawMessage
}

// ErrStopped is returned by a Watcher's Next after Stop.
var ErrStopped = errors.New("watch stopped")

// Watcher reads one watch stream. It runs no goroutine: Next reads the
// next event from the connection. Next must not be called concurrently with
// itself; Stop may be called at any time from any goroutine, and the owner
// must call it when done.
type Watcher[T Object] struct {
	resp    *http.Response
	dec     sigsjson.Decoder // nil for CBOR and protobuf
	frames  *frameReader     // a CBOR or protobuf watch's frames, else nil
	enc     wireEncoding     // the events' encoding
	cborEv  metav1.WatchEvent
	pbObj   envelope // the last protobuf event's object
	codec   *codec[T]
	cancel  context.CancelFunc
	stopped atomic.Bool
	once    sync.Once
	env     struct {
		Type       EventType       `json:"type"`
		Object     json.RawMessage `json:"object"`
		CommitTime json.RawMessage `json:"commitTime"` // parsed on demand
		Patch      json.RawMessage `json:"patch"`      // a delta event's (WatchParams.Deltas)
	}
}

// Watch starts a watch of the objects matching opts (opts.Watch is implied).
// The watch lasts until ctx ends, Stop is called, or the server ends it
// (Next returns io.EOF).
func (c *Client[T]) Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (*Watcher[T], error) {
	p, err := c.path(namespace, "", "")
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", c.res, err)
	}
	opts.Watch = true
	ctx, cancel := context.WithCancel(ctx)
	q := listQuery(opts)
	c.params.add(q, true)
	resp, err := c.rest.do(ctx, request{method: http.MethodGet, path: p, query: q, watch: true, accept: c.readAccept()})
	if err != nil {
		cancel()
		return nil, err
	}
	w := &Watcher[T]{resp: resp, codec: &c.codec, cancel: cancel}
	switch ct := resp.Header.Get("Content-Type"); {
	case isCBOR(ct):
		w.enc, w.frames = wireCBOR, newFrameReader(cbor.NewFramer().NewFrameReader(resp.Body))
	case isProtobuf(ct):
		w.enc, w.frames = wireProtobuf, newFrameReader(protobuf.LengthDelimitedFramer.NewFrameReader(resp.Body))
	default:
		w.dec = sigsjson.NewDecoderCaseSensitivePreserveInts(resp.Body)
	}
	return w, nil
}

// nextCBOR reads the next event of a CBOR watch into w.env: its type,
// and its object's CBOR (the event has no commit time nor patch).
func (w *Watcher[T]) nextCBOR() error {
	frame, err := w.frames.next()
	if err != nil {
		return err
	}
	if err := cborEvent(frame, &w.cborEv); err != nil {
		return err
	}
	w.env.Type = EventType(w.cborEv.Type)
	w.env.Object = w.cborEv.Object.Raw
	return nil
}

// nextProtobuf reads the next event of a protobuf watch into w.env: its
// type, and its object's message (w.pbObj its envelope; the event has no
// commit time nor patch).
func (w *Watcher[T]) nextProtobuf() error {
	frame, err := w.frames.next()
	if err != nil {
		return err
	}
	typ, obj, err := protobufEvent(frame)
	if err != nil {
		return err
	}
	w.env.Type, w.env.Object, w.pbObj = typ, obj.raw, obj
	return nil
}

// NextRaw reads the next event without decoding its object. The Raw is
// valid until the next call. It returns io.EOF when the server ended the
// watch, ErrStopped after Stop, and a *StatusError for an ERROR event
// (errors.Is(err, ErrGone) when the watch's resourceVersion is too old).
func (w *Watcher[T]) NextRaw() (EventType, Raw[T], error) {
	w.env.Type = ""
	w.env.Object = w.env.Object[:0]
	w.env.CommitTime = w.env.CommitTime[:0]
	w.env.Patch = w.env.Patch[:0]
	var err error
	switch w.enc {
	case wireCBOR:
		err = w.nextCBOR()
	case wireProtobuf:
		err = w.nextProtobuf()
	default:
		err = w.dec.Decode(&w.env)
	}
	if err != nil {
		if w.stopped.Load() {
			return "", Raw[T]{}, ErrStopped
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return "", Raw[T]{}, fmt.Errorf("watch: %w", err)
		}
		if errors.Is(err, io.EOF) {
			return "", Raw[T]{}, io.EOF
		}
		return "", Raw[T]{}, fmt.Errorf("watch: %w", err)
	}
	switch w.env.Type {
	case Added, Modified, Deleted, Bookmark:
		raw := Raw[T]{data: w.env.Object, codec: w.codec, enc: w.enc}
		if w.enc == wireProtobuf {
			raw.env = &w.pbObj
		}
		return w.env.Type, raw, nil
	case Error:
		var st metav1.Status
		var err error
		switch w.enc {
		case wireCBOR:
			st, err = decodeCBORStatus(w.env.Object)
		case wireProtobuf:
			st, err = protobufStatus(w.pbObj)
		default:
			err = unmarshal(w.env.Object, &st)
		}
		if err != nil || st.Kind != "Status" {
			return "", Raw[T]{}, fmt.Errorf("watch: error event: %s", errorEventText(w.env.Object, w.enc))
		}
		if failover, _ := failoverStatus(int(st.Code)); failover {
			serverFailed(w.resp) // the server cannot serve: the next request goes elsewhere
		}
		return "", Raw[T]{}, &StatusError{ErrStatus: st}
	default:
		return "", Raw[T]{}, fmt.Errorf("watch: unknown event type %q", w.env.Type)
	}
}

// Next reads and decodes the next event; see NextRaw for the errors.
func (w *Watcher[T]) Next() (Event[T], error) {
	typ, raw, err := w.NextRaw()
	if err != nil {
		return Event[T]{}, err
	}
	obj, err := raw.Decode()
	if err != nil {
		return Event[T]{}, fmt.Errorf("watch: %w", err)
	}
	at, _ := w.CommitTime()
	var patch json.RawMessage
	if p := w.Patch(); p != nil {
		patch = append(json.RawMessage(nil), p...)
	}
	return Event[T]{Type: typ, Object: obj, CommitTime: at, Patch: patch}, nil
}

// Patch returns the JSON Patch of the event NextRaw last returned, if it
// is a delta event (see Event.Patch), else nil. It is valid until the next
// call to NextRaw.
func (w *Watcher[T]) Patch() []byte {
	if len(w.env.Patch) == 0 || string(w.env.Patch) == "null" {
		return nil
	}
	return w.env.Patch
}

// CommitTime returns the commit time of the event NextRaw last returned
// (see Event.CommitTime), and false if the server did not give one or
// gave one that does not parse.
func (w *Watcher[T]) CommitTime() (time.Time, bool) {
	b := w.env.CommitTime
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(b[1:len(b)-1]))
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// Events iterates over the events until the watch ends. The last pair has
// a non-nil error unless the server ended the watch or Stop was called.
func (w *Watcher[T]) Events() iter.Seq2[Event[T], error] {
	return func(yield func(Event[T], error) bool) {
		for {
			ev, err := w.Next()
			if errors.Is(err, io.EOF) || errors.Is(err, ErrStopped) {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// Stop ends the watch and releases its connection stream. It may be called
// concurrently with Next, which then returns ErrStopped, and more than once.
func (w *Watcher[T]) Stop() {
	w.once.Do(func() {
		w.stopped.Store(true)
		w.cancel()
		w.resp.Body.Close()
	})
}

// frameReader reads a binary watch's frames one at a time (from
// apimachinery's CBOR or length-delimited protobuf frame reader), each
// into a buffer reused across calls.
type frameReader struct {
	r   io.ReadCloser
	buf []byte
}

func newFrameReader(r io.ReadCloser) *frameReader {
	return &frameReader{r: r, buf: make([]byte, 0, 4<<10)}
}

// next returns the next frame, valid until the next call; io.EOF at the
// end of the stream.
func (f *frameReader) next() ([]byte, error) {
	f.buf = f.buf[:cap(f.buf)]
	n := 0
	for {
		m, err := f.r.Read(f.buf[n:])
		n += m
		if err == nil {
			return f.buf[:n], nil
		}
		if !errors.Is(err, io.ErrShortBuffer) {
			if n > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		f.buf = append(f.buf, make([]byte, max(len(f.buf), 512))...)
		f.buf = f.buf[:cap(f.buf)]
	}
}
