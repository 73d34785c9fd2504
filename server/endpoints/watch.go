package endpoints

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/server/watchstream"
)

// initialEventsEnd annotates the bookmark that ends a watch's initial events
// (sendInitialEvents=true).
const initialEventsEnd = "k8s.io/initial-events-end"

// watchEvent is the wire form of one event. CommitTime is objwatch's
// extension: when the server learned of the change from etcd (see
// objects.Item.Frame); Kubernetes clients ignore it.
type watchEvent struct {
	Type       string     `json:"type"`
	Object     any        `json:"object"`
	CommitTime *time.Time `json:"commitTime,omitempty"`
}

// watch streams changes as newline-delimited watch events. Once the request
// is accepted (200 sent), failures arrive as an ERROR event with a Status.
//
// Every watch runs one loop, serveWatch, fed by the objects.Source the
// object service chose: the resource's watch cache when it can serve the
// request, otherwise an etcd watch.
func (a *API) watch(w http.ResponseWriter, r *http.Request, req *objects.Request) {
	res := req.Resource
	o, err := listOptions(r, "watch")
	if err != nil {
		writeStatusFor(w, r, err)
		return
	}
	neg, err := negotiate(r, res)
	if err == nil && neg.yaml {
		err = notAcceptable(streamsAccepted)
	}
	if err != nil {
		writeStatusFor(w, r, err)
		return
	}
	ext, err := a.extensions(r, "watch")
	if err == nil && ext.shaped() && (neg.as != "" || neg.enc != encJSON) {
		err = errShapedAs()
	}
	if err != nil {
		writeStatusFor(w, r, err)
		return
	}
	wr := watchRequest{output: neg}
	opts := objects.WatchOptions{
		// Only JSON events come encoded (and shared); the others are
		// encoded from each object (see eventEncoder).
		List: o, Decoded: neg.as != "" || neg.enc != encJSON, DropManagedFields: neg.drop && neg.as == "",
		Mask: ext.mask, Project: ext.project, Deltas: ext.deltas,
	}
	opts.Encode, opts.EncodeKey = sharedEncoding(res, neg)
	if o.TimeoutSeconds != nil {
		opts.Timeout = time.Duration(*o.TimeoutSeconds) * time.Second
	}
	if opts.Timeout == 0 {
		min := a.cfg.MinWatchTimeout
		opts.Timeout = min + time.Duration(rand.Int64N(int64(min)))
	}
	if opts.Timeout < 0 {
		// As kube-apiserver: a watch whose time ran out before it began
		// ends at once, with no event.
		w.Header().Set("Content-Type", neg.enc.contentType(true))
		w.WriteHeader(http.StatusOK)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeStatusFor(w, r, apierrors.NewInternalError(errors.New("streaming unsupported")))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), opts.Timeout)
	defer cancel()
	// A stopping server ends its watches (without a goroutine per watch).
	defer context.AfterFunc(a.watches.stopping, cancel)()
	ww := watchstream.NewWriter(w, r, flusher, a.cfg.WatchWriteTimeout, cancel)
	defer ww.Stop()

	a.metrics.watches.WithLabelValues(res.Group, res.Plural).Inc()
	defer a.metrics.watches.WithLabelValues(res.Group, res.Plural).Dec()
	// The watch holds an execution seat while it starts, not while it
	// runs, as in kube-apiserver.
	done, ok := a.execute(w, r)
	if !ok {
		return
	}
	src, err := a.objects.Watch(ctx, req, opts)
	done(0)
	var late *objects.StartError
	switch {
	case errors.As(err, &late):
		// As in Kubernetes, a parsed resourceVersion's failures arrive
		// as an ERROR event.
		w.Header().Set("Content-Type", neg.enc.contentType(true))
		ww.Start()
		sendError(newEventEncoder(ww, res, neg), ww, late.Err)
	case err != nil:
		writeStatusFor(w, r, err)
	case src != nil && neg.as == asPartialList:
		// As in Kubernetes, whose watch cannot make a list of an event:
		// the stream ends without one.
		src.Stop()
		w.Header().Set("Content-Type", neg.enc.contentType(true))
		ww.Start()
	case src != nil:
		w.Header().Set("Content-Type", neg.enc.contentType(true))
		a.watches.serveWatch(ctx, ww, res, &wr, src)
	}
}

// watches runs the loop of every watch (serveWatch) and ends them all
// when the server stops (StopWatches). Safe for concurrent use.
type watches struct {
	metrics *metrics
	pacer   *watchstream.Pacer
	gate    *watchstream.Gate // nil: none
	// stopping is a lifetime watches owns, not a caller's context: it is
	// never handed out, only joined to each watch's own context by
	// context.AfterFunc, which needs no goroutine per watch (a done
	// channel would).
	stopping context.Context
	stop     context.CancelFunc
}

// StopWatches ends every open watch and any started later. Call it when
// the server stops.
func (ws *watches) StopWatches() { ws.stop() }

// watchRequest is how a watch renders its events.
type watchRequest struct {
	output // negotiated from the Accept header
}

// serveWatch sends src's items until the watch ends.
//
// Output is flushed when the watch has no more items waiting: at once when
// the last flush is a window (the flush pacer's) ago, otherwise at the end
// of that window. A watch receiving many events gets them in few writes
// (fewer system calls and TLS records) at a bounded extra latency; a quiet
// watch's event goes out at once.
func (ws *watches) serveWatch(ctx context.Context, ww *watchstream.Writer, res *registry.Resource, wr *watchRequest, src objects.Source) {
	defer src.Stop()
	ww.Start()
	enc := newEventEncoder(ww, res, wr.output)
	counts := eventCounts{m: ws.metrics, res: res}
	defer counts.add()
	var (
		lastFlush time.Time
		dirty     bool
		timer     *time.Timer
	)
	flushEvery := ws.pacer.Batch()
	flush := func() {
		ww.Flush()
		counts.add()
		lastFlush, dirty = time.Now(), false
		flushEvery = ws.pacer.Batch()
	}
	// sleep waits for d or the end of ctx.
	sleep := func(d time.Duration) error {
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// The watch writes inside the delivery gate and leaves it before it
	// waits (see watchstream.Gate).
	pass := watchstream.NewPass(ws.gate)
	defer func() {
		pass.Leave()
		if timer != nil {
			timer.Stop()
		}
	}()
	// finish writes what is waiting of the revision of the last event
	// written (the watch cache queues a revision's events together), so
	// that a watch ending at its timeout does not end inside a revision
	// of several keys: its client resumes from the last resourceVersion
	// it saw and would miss the rest.
	var lastRev int64
	finish := func() {
		objects.RestOfRevision(src, lastRev, func(it objects.Item) bool {
			if writeItem(enc, ww, res, wr, it) != nil {
				return false
			}
			counts.pending[eventIndex(it.Type)]++
			dirty = true
			return true
		})
		if dirty {
			flush()
		}
	}
	for {
		if pass.Enter(ctx) != nil {
			finish()
			return
		}
		it, ok := src.TryNext()
		if !ok {
			since := time.Since(lastFlush)
			if dirty && since >= flushEvery {
				flush()
				continue
			}
			pass.Leave()
			var err error
			if since < flushEvery {
				// Whatever arrives before the window ends waits for its
				// end anyway: sleep through it instead of waking per
				// event, then send all that came in one write.
				err = sleep(flushEvery - since)
			} else {
				err = src.Wait(ctx, ww.Idle())
			}
			switch {
			case err == nil:
				continue
			case ctx.Err() != nil:
				finish()
			case errors.Is(err, objects.ErrWatchEnd):
				flush()
			default:
				sendError(enc, ww, err)
			}
			return
		}
		if err := writeItem(enc, ww, res, wr, it); err != nil {
			return
		}
		if it.Type != objects.Bookmark {
			lastRev = it.Rev
		}
		counts.pending[eventIndex(it.Type)]++
		dirty = true
	}
}

// writeItem writes one item of a watch (unflushed).
func writeItem(enc *eventEncoder, ww *watchstream.Writer, res *registry.Resource, wr *watchRequest, it objects.Item) error {
	switch {
	case it.Type == objects.Bookmark:
		return enc.event(it.Type, bookmarkObject(res, wr.output, it.Rev, it.InitialEnd), nil)
	case it.Frame != nil:
		// The source's shared encoding: a JSON watch's (without
		// managedFields when the watch drops them:
		// objects.WatchOptions.DropManagedFields), or a binary watch's
		// (objects.WatchOptions.Encode, see sharedEncoding).
		_, err := ww.Write(it.Frame)
		return err
	case wr.enc != encJSON && wr.as == "" && !wr.drop && it.JSON != nil && typed(res):
		// Straight from the stored encoding to the Go type.
		obj, err := typedFromJSON(res.GVK(), it.JSON)
		if err != nil {
			return err
		}
		return enc.event(it.Type, obj, nil)
	case wr.as != "" || wr.enc != encJSON:
		obj := it.Object
		if obj == nil {
			var err error
			if obj, err = objects.Decode(it.JSON); err != nil {
				return err
			}
		}
		v, err := wr.object(res, obj)
		if err != nil {
			return err
		}
		return enc.event(it.Type, v, nil)
	default:
		v, _ := wr.object(res, it.Object)
		return enc.event(it.Type, v, it.At)
	}
}

// sharedEncoding is the encoding of a binary watch of plain objects of a
// built-in kind, for the watch cache to make once per event for all such
// watches (objects.WatchOptions.Encode): the event as writeItem would
// write it, decoded from the stored JSON into its Go type. Other watches
// (JSON, Tables, metadata only, managedFields dropped, custom
// resources) get nil and render their own.
func sharedEncoding(res *registry.Resource, o output) (func(typ string, json []byte) ([]byte, error), string) {
	if o.enc == encJSON || o.as != "" || o.drop || !typed(res) {
		return nil, ""
	}
	return func(typ string, b []byte) ([]byte, error) {
		obj, err := typedFromJSON(res.GVK(), b)
		if err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		if err := newEventEncoder(&buf, res, o).event(typ, obj, nil); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}, o.enc.contentType(true)
}

// eventEncoder writes one watch's events in its encoding: JSON lines, or
// the frames of apimachinery's protobuf and CBOR stream serializers (see
// encoding). It belongs to the watch's goroutine.
type eventEncoder struct {
	res    *registry.Resource
	o      output
	json   *json.Encoder
	frames io.Writer // a protobuf watch's length-prefixed frames
	w      io.Writer
	obj    bytes.Buffer // an event's object, encoded
	frame  bytes.Buffer // a protobuf event, encoded
}

func newEventEncoder(w io.Writer, res *registry.Resource, o output) *eventEncoder {
	e := &eventEncoder{res: res, o: o, w: w}
	switch o.enc {
	case encJSON:
		e.json = json.NewEncoder(w)
	case encProtobuf:
		e.frames = protobuf.LengthDelimitedFramer.NewFrameWriter(w)
	}
	return e
}

// event writes one event of type typ with object v (a decoded object, as
// output.object renders it, or a runtime.Object).
func (e *eventEncoder) event(typ string, v any, at *time.Time) error {
	if e.o.enc == encJSON {
		return e.json.Encode(watchEvent{Type: typ, Object: v, CommitTime: at})
	}
	obj, err := e.o.wireObject(e.res, v)
	if err != nil {
		return err
	}
	e.obj.Reset()
	ev := &metav1.WatchEvent{Type: typ}
	if e.o.enc == encProtobuf {
		if err := protobufCodec.Encode(obj, &e.obj); err != nil {
			return err
		}
		ev.Object.Raw = e.obj.Bytes()
		e.frame.Reset()
		if err := protobufRaw.Encode(ev, &e.frame); err != nil {
			return err
		}
		_, err := e.frames.Write(e.frame.Bytes())
		return err
	}
	if err := cborCodec.Encode(obj, &e.obj); err != nil {
		return err
	}
	ev.Object.Raw = e.obj.Bytes()
	return cborEvents.Encode(ev, e.w)
}

// bookmarkObject is a bookmark's object: kind, apiVersion and
// metadata.resourceVersion (and the initial-events-end annotation). A
// PartialObjectMetadata watch's bookmarks are PartialObjectMetadata, as in
// Kubernetes.
func bookmarkObject(res *registry.Resource, o output, rev int64, initialEnd bool) map[string]any {
	md := map[string]any{"resourceVersion": strconv.FormatInt(rev, 10)}
	if initialEnd {
		md["annotations"] = map[string]any{initialEventsEnd: "true"}
	}
	kind, apiVersion := res.Kind, res.APIVersion()
	if o.as == asPartial {
		kind, apiVersion = asPartial, metav1.GroupName+"/"+o.version
	}
	return map[string]any{"kind": kind, "apiVersion": apiVersion, "metadata": md}
}

// eventTypes are the types a watch sends, in eventCounts order.
var eventTypes = [...]string{objects.Added, objects.Modified, objects.Deleted, objects.Bookmark}

func eventIndex(typ string) int {
	for i, t := range eventTypes {
		if t == typ {
			return i
		}
	}
	return 0
}

// eventCounts counts one watch's sent events and adds them to the shared
// counters at each flush: a thousand watches adding one by one to the same
// counter would contend for its cache line.
type eventCounts struct {
	m        *metrics
	res      *registry.Resource
	counters [len(eventTypes)]prometheus.Counter
	pending  [len(eventTypes)]int
}

func (c *eventCounts) add() {
	for i, n := range c.pending {
		if n == 0 {
			continue
		}
		if c.counters[i] == nil {
			c.counters[i] = c.m.events.WithLabelValues(c.res.Group, c.res.Plural, eventTypes[i])
		}
		c.counters[i].Add(float64(n))
		c.pending[i] = 0
	}
}

func sendError(enc *eventEncoder, f http.Flusher, err error) {
	st := apistatus.Of(err)
	st.Kind, st.APIVersion = "Status", "v1"
	enc.event("ERROR", st, nil)
	f.Flush()
}

// StopWatches ends every open watch (the server is stopping).
func (a *API) StopWatches() { a.watches.StopWatches() }
