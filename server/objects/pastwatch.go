package objects

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/objwatch/objwatch/server/history"
	"github.com/objwatch/objwatch/storage"
)

// watchFrom is the store's watch of prefix from revision from, which with
// a history store may start before etcd's compaction (see pastWatcher).
func (r *storeReader) watchFrom(ctx context.Context, prefix string, from int64) (storage.Watcher, error) {
	past := r.pastOf(prefix)
	if past == nil {
		return r.store.Watch(ctx, prefix, from)
	}
	w, err := r.store.Watch(ctx, prefix, from)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	pw := &pastWatcher{past: past, store: r.store, prefix: prefix, out: make(chan storage.Event), cancel: cancel, stopped: make(chan struct{}), done: make(chan struct{}), cur: w, wait: r.futureRVWait}
	go pw.run(ctx, from)
	return pw, nil
}

// pastWatcher is an etcd watch that may start before etcd's compaction:
// when etcd answers that it compacted the first revision asked for, the
// history store's changes from there up to the compaction revision are
// sent first (as etcd's watch would have sent them: values transformed
// back, each put with the key's previous value, each deletion with the
// value it deleted), then etcd's from it on. Revisions the history store
// does not have (too old, in a gap) end the watch as the compaction did
// (410). Its goroutine is owned by Stop.
//
// As the store's watches, it ends between revisions: once it has sent an
// event marked More, the rest of that revision follows even when the
// watch's context ends meanwhile (only Stop interrupts it), and its
// replayed events are marked More as etcd's are. A watch ending at its
// timeout then does not end inside a revision of several keys, whose
// client, resuming after the last resourceVersion it saw, would miss the
// rest.
type pastWatcher struct {
	past   *pastReader
	store  storage.Interface
	prefix string
	wait   time.Duration // for the history store to record what etcd compacted
	out    chan storage.Event
	cancel context.CancelFunc
	// stopped is closed by Stop: the only end of a revision begun (the
	// watch's context, its timeout, does not cut one).
	stopped chan struct{}
	done    chan struct{}
	once    sync.Once
	// inRevision: the last event sent was marked More (run's goroutine).
	inRevision bool

	mu  sync.Mutex
	cur storage.Watcher // etcd's watch now; nil while the past is sent
}

func (w *pastWatcher) Events() <-chan storage.Event { return w.out }

func (w *pastWatcher) RequestProgress(ctx context.Context) error {
	w.mu.Lock()
	cur := w.cur
	w.mu.Unlock()
	if cur == nil {
		return nil // the past is being sent: no progress to report
	}
	return cur.RequestProgress(ctx)
}

func (w *pastWatcher) Stop() {
	w.once.Do(func() {
		w.cancel()
		close(w.stopped)
		<-w.done
	})
}

// ending is the channel that ends a send or a receive now: ctx's between
// revisions (ctx ends with the watch's and with Stop), only Stop's inside
// one.
func (w *pastWatcher) ending(ctx context.Context) <-chan struct{} {
	if w.inRevision {
		return w.stopped
	}
	return ctx.Done()
}

// valueContext is the context to transform a value in: inside a
// revision, one the watch's end does not cancel.
func (w *pastWatcher) valueContext(ctx context.Context) context.Context {
	if w.inRevision {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

func (w *pastWatcher) send(ctx context.Context, ev storage.Event) bool {
	select {
	case w.out <- ev:
		w.inRevision = ev.More
		return true
	case <-w.ending(ctx):
		return false
	}
}

func (w *pastWatcher) swap(next storage.Watcher) {
	w.mu.Lock()
	prev := w.cur
	w.cur = next
	w.mu.Unlock()
	if prev != nil {
		prev.Stop()
	}
}

func (w *pastWatcher) run(ctx context.Context, from int64) {
	defer close(w.done)
	defer close(w.out)
	defer w.swap(nil)
	w.mu.Lock()
	first := w.cur
	w.mu.Unlock()
	var ev storage.Event
	select {
	case <-ctx.Done():
		return
	case e, ok := <-first.Events():
		if !ok {
			return
		}
		ev = e
	}
	var ce *storage.CompactedError
	if ev.Type == storage.Error && errors.As(ev.Err, &ce) && ce.Compacted > from {
		w.swap(nil)
		if err := w.replay(ctx, from, ce.Compacted-1); err != nil {
			if ctx.Err() == nil {
				w.send(ctx, storage.Event{Type: storage.Error, Err: pastError(err)})
			}
			return
		}
		next, err := w.store.Watch(ctx, w.prefix, ce.Compacted)
		if err != nil {
			w.send(ctx, storage.Event{Type: storage.Error, Err: err})
			return
		}
		w.swap(next)
		w.forward(ctx, next)
		return
	}
	if w.send(ctx, ev) && ev.Type != storage.Error {
		w.forward(ctx, first)
	}
}

// forward sends src's events until it ends.
func (w *pastWatcher) forward(ctx context.Context, src storage.Watcher) {
	for {
		select {
		case <-w.ending(ctx):
			return
		case ev, ok := <-src.Events():
			if !ok || !w.send(ctx, ev) {
				return
			}
		}
	}
}

// replay sends the history store's changes of the revisions from..to.
func (w *pastWatcher) replay(ctx context.Context, from, to int64) error {
	hs := w.past.hs
	// First until the store has come that far: a store that was down
	// records what etcd compacted meanwhile as a gap only then.
	wctx, cancel := context.WithTimeout(ctx, w.wait)
	err := hs.WaitRecorded(wctx, to)
	cancel()
	if err != nil {
		return err
	}
	if from-1 < hs.Oldest() {
		return fmt.Errorf("%w: %d (oldest %d)", history.ErrNotRetained, from-1, hs.Oldest())
	}
	for _, g := range hs.Gaps() {
		if g.From <= to && g.To >= from-1 {
			return &history.GapError{Gap: g}
		}
	}
	// The value of each key before its first change in the window.
	prev := map[string]*storage.KeyValue{}
	before := func(ctx context.Context, key string) (*storage.KeyValue, error) {
		if kv, seen := prev[key]; seen {
			return kv, nil
		}
		e, err := hs.Get(key, from-1)
		if errors.Is(err, storage.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		kv, err := w.past.kv(ctx, e)
		if err != nil {
			return nil, err
		}
		return &kv, nil
	}
	// Each change is held until the next is read, which says whether the
	// held one's revision goes on (More).
	var held *storage.Event
	sendHeld := func(next int64) error {
		if held == nil {
			return nil
		}
		ev := *held
		held = nil
		ev.More = ev.Revision == next
		if !w.send(ctx, ev) {
			return context.Canceled
		}
		return nil
	}
	err = hs.Changes(w.prefix, from-1, to, func(e history.Entry) error {
		if err := sendHeld(e.Revision); err != nil {
			return err
		}
		vctx := w.valueContext(ctx)
		p, err := before(vctx, e.Key)
		if err != nil {
			return err
		}
		ev := storage.Event{Revision: e.Revision}
		if e.Deleted {
			ev.Type = storage.Delete
			if p != nil {
				ev.KV = *p
			}
			ev.KV.Key, ev.KV.ModRevision = e.Key, e.Revision
			prev[e.Key] = nil
		} else {
			kv, err := w.past.kv(vctx, e)
			if err != nil {
				return err
			}
			ev.Type, ev.KV, ev.PrevKV = storage.Put, kv, p
			prev[e.Key] = &kv
		}
		held = &ev
		return nil
	})
	if err != nil {
		return err
	}
	return sendHeld(0)
}
