package ui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/change"
	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/internal/explain"
)

// hubKey names what a hub watches.
type hubKey struct {
	res       client.Resource
	namespace string
	selector  string
}

// hubEvent is one change a hub saw, or a note (a relist).
type hubEvent struct {
	seq  uint64 // the hub's count, from 1
	rv   string // the resourceVersion after the event
	sub  int    // how many events before it have the same rv (a relist's, a re-creation)
	typ  string // ADDED, MODIFIED, DELETED, or NOTE
	time time.Time
	obj  *unstructured.Unstructured // nil for a note
	diff *change.Diff               // MODIFIED only
	note string
}

// hub watches one resource (in one namespace, with one label selector)
// for every live stream that shows it: it lists, then watches from the
// list's resourceVersion, resuming after a disconnect and relisting
// after 410 Gone, and keeps the last events in a ring so that a stream
// can resume from the resourceVersion it last sent. Its goroutine
// (run) is owned by the Server; it ends when the hub is idle or the
// Server closes.
type hub struct {
	key    hubKey
	c      *client.Client[*unstructured.Unstructured]
	size   int
	cancel context.CancelFunc
	now    func() time.Time

	// ready is closed once the first list is done (or failed: err).
	ready chan struct{}
	err   error

	mu      sync.Mutex
	startRV string     // the resourceVersion of the first list
	objects int        // how many objects the first list found
	ring    []hubEvent // the last events (between 3/4 of size and size), oldest first
	seq     uint64     // the last event's seq
	wakes   map[chan struct{}]bool
	subs    int
}

// subscribe returns the hub of key, starting it if needed, and counts a
// stream on it; the stream calls release when it ends.
func (s *Server) subscribe(key hubKey) *hub {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.hubs[key]; h != nil {
		h.mu.Lock()
		h.subs++
		h.mu.Unlock()
		return h
	}
	ctx, cancel := context.WithCancel(s.ctx)
	h := &hub{
		key: key, c: client.NewUnstructured(s.cfg.REST, key.res).WithoutManagedFields(),
		size: s.cfg.Ring, cancel: cancel, now: s.cfg.Now,
		ready: make(chan struct{}), wakes: map[chan struct{}]bool{}, subs: 1,
	}
	s.hubs[key] = h
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		h.run(ctx)
	}()
	return h
}

// release ends a stream's use of h; a hub nobody uses for Config.Idle
// stops.
func (s *Server) release(h *hub) {
	h.mu.Lock()
	h.subs--
	idle := h.subs == 0
	h.mu.Unlock()
	if !idle {
		return
	}
	time.AfterFunc(s.cfg.Idle, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.subs == 0 && s.hubs[h.key] == h {
			delete(s.hubs, h.key)
			h.cancel()
		}
	})
}

// add appends events to the ring and wakes the streams.
func (h *hub) add(evs ...hubEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range evs {
		h.seq++
		e.seq = h.seq
		if n := len(h.ring); n > 0 && h.ring[n-1].rv == e.rv {
			e.sub = h.ring[n-1].sub + 1
		}
		if len(h.ring) == h.size {
			// Drop the oldest quarter at once: a copy per quarter of
			// the ring's events, not per event.
			h.ring = append(h.ring[:0], h.ring[max(1, h.size/4):]...)
		}
		h.ring = append(h.ring, e)
	}
	for w := range h.wakes {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// position is where a stream resumes: the seq of the last event it has
// seen, found by its cursor (its resourceVersion, and ".N" for the N-th
// of several events of one resourceVersion; "" for a new stream: from
// now).
// lost is true when rv is not among the events kept (too old, or from an
// earlier run of the hub): the stream then starts from now.
func (h *hub) position(cursor string) (seq uint64, lost bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cursor == "" {
		return h.seq, false
	}
	rv, sub := splitCursor(cursor)
	for i := len(h.ring) - 1; i >= 0; i-- {
		if h.ring[i].rv == rv && h.ring[i].sub == sub {
			return h.ring[i].seq, false
		}
	}
	if rv == h.startRV && (len(h.ring) == 0 || h.ring[0].seq == 1) {
		return 0, false
	}
	return h.seq, true
}

// since returns the events after seq, at most max; gap is true when
// some of them are no longer kept (the stream fell behind the ring).
func (h *hub) since(seq uint64, max int) (evs []hubEvent, gap bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ring) == 0 || seq >= h.seq {
		return nil, false
	}
	first := h.ring[0].seq
	if seq+1 < first {
		gap, seq = true, first-1
	}
	i := int(seq + 1 - first)
	end := min(len(h.ring), i+max)
	return slices.Clone(h.ring[i:end]), gap
}

// cursor is the stream position after e.
func (e *hubEvent) cursor() string {
	if e.sub == 0 {
		return e.rv
	}
	return e.rv + "." + strconv.Itoa(e.sub)
}

// splitCursor reads a cursor: a resourceVersion, then ".N" for the N-th
// event of that resourceVersion.
func splitCursor(c string) (rv string, sub int) {
	if i := strings.LastIndexByte(c, '.'); i >= 0 {
		if n, err := strconv.Atoi(c[i+1:]); err == nil && n > 0 {
			return c[:i], n
		}
	}
	return c, 0
}

// at is the cursor of the newest event a stream at seq has seen.
func (h *hub) at(seq uint64) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ring) == 0 || seq < h.ring[0].seq {
		return h.startRV
	}
	return h.ring[seq-h.ring[0].seq].cursor()
}

func (h *hub) watchWake(w chan struct{}, on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if on {
		h.wakes[w] = true
	} else {
		delete(h.wakes, w)
	}
}

// run lists, then watches until ctx ends.
func (h *hub) run(ctx context.Context) {
	cache := map[string]*unstructured.Unstructured{}
	items, rv, err := h.list(ctx)
	h.mu.Lock()
	h.err, h.startRV, h.objects = err, rv, len(items)
	h.mu.Unlock()
	close(h.ready)
	if err != nil {
		return
	}
	for _, o := range items {
		cache[explain.KeyOf(o)] = o
	}
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		progress, err := h.watch(ctx, cache, &rv)
		if progress {
			backoff = 250 * time.Millisecond
		}
		if errors.Is(err, client.ErrGone) {
			if err := h.relist(ctx, cache, &rv); err == nil {
				continue
			}
		}
		if errors.Is(err, io.EOF) && progress {
			continue
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func (h *hub) list(ctx context.Context) ([]*unstructured.Unstructured, string, error) {
	return explain.ListAll(ctx, h.c, h.key.namespace, metav1.ListOptions{LabelSelector: h.key.selector})
}

// watch watches from *rv, turning each event into hub events, until the
// watch ends.
func (h *hub) watch(ctx context.Context, cache map[string]*unstructured.Unstructured, rv *string) (progress bool, err error) {
	wt, err := h.c.Watch(ctx, h.key.namespace, metav1.ListOptions{LabelSelector: h.key.selector, ResourceVersion: *rv, AllowWatchBookmarks: true})
	if err != nil {
		return false, err
	}
	defer wt.Stop()
	for {
		ev, err := wt.Next()
		if err != nil {
			return progress, err
		}
		progress = true
		obj := ev.Object
		*rv = obj.GetResourceVersion()
		k := explain.KeyOf(obj)
		switch ev.Type {
		case client.Added, client.Modified:
			old := cache[k]
			cache[k] = obj
			h.add(h.events(old, obj)...)
		case client.Deleted:
			delete(cache, k)
			h.add(hubEvent{rv: *rv, typ: "DELETED", time: h.now(), obj: obj})
		}
	}
}

// events are the hub events of obj replacing old (nil when new): an
// update that changed nothing but noise is none; a new object of the
// same name is a deletion and a creation.
func (h *hub) events(old, obj *unstructured.Unstructured) []hubEvent {
	now, rv := h.now(), obj.GetResourceVersion()
	switch {
	case old == nil:
		return []hubEvent{{rv: rv, typ: "ADDED", time: now, obj: obj}}
	case old.GetUID() != obj.GetUID():
		return []hubEvent{{rv: rv, typ: "DELETED", time: now, obj: old}, {rv: rv, typ: "ADDED", time: now, obj: obj}}
	}
	d := change.Between(old.Object, obj.Object)
	if d.Empty() {
		return nil
	}
	return []hubEvent{{rv: rv, typ: "MODIFIED", time: now, obj: obj, diff: d}}
}

// relist lists again after the server forgot *rv and turns the
// differences with the cache into events, after a note that says so.
func (h *hub) relist(ctx context.Context, cache map[string]*unstructured.Unstructured, rv *string) error {
	expired := *rv
	items, newRV, err := h.list(ctx)
	if err != nil {
		return err
	}
	var evs []hubEvent
	for _, c := range explain.RelistChanges(cache, items) {
		switch c.Type {
		case client.Deleted:
			evs = append(evs, hubEvent{typ: "DELETED", time: h.now(), obj: c.Obj})
		default:
			evs = append(evs, h.events(c.Old, c.Obj)...)
		}
	}
	for i := range evs {
		evs[i].rv = newRV
	}
	note := hubEvent{rv: newRV, typ: "NOTE", time: h.now(),
		note: fmt.Sprintf("%s: resourceVersion %s expired (410 Gone); relisted %d objects, found %d changes", h.key.res.GVR.Resource, expired, len(items), len(evs))}
	h.add(append([]hubEvent{note}, evs...)...)
	*rv = newRV
	return nil
}
