package informer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/objwatch/objwatch/client"
)

// op is what a log entry asks the processor to do.
type op uint8

const (
	opUpsert op = iota // store obj (an add or an update, decided against the store)
	opDelete           // remove key; obj is the final state unless unknown
	opSynced           // the initial list is complete
	opMark             // nothing to store: only mark, which the store now reflects
	opGone             // the server forgot gone, the watch's resume point (410 Gone): a relist follows
)

// entry is one record of the event log.
type entry[T client.Object] struct {
	op      op
	obj     T
	key     Key
	unknown bool
	stamp   stamp
	from    *eventLog[T] // the log it was pushed to
	// maskCheck: an update of a cached object is stored and notified
	// only if it changes a masked value (see watchext.go).
	maskCheck bool
	// keep: a masked-out update is still stored (the server's mask is on
	// the wire: its next patch starts from this state).
	keep bool
	// mark, if set, is the resourceVersion the store reflects once this
	// entry is applied: a watch event's, a bookmark's, a finished list's;
	// never a list item's (a list's items come in no order of revision).
	mark string
	// gone is opGone's resourceVersion.
	gone string
}

// stamp is when a change happened, for the event lag metric: its commit
// time if the server stamped the event, else when the reflector read it.
// It is zero when lag is not measured (no metrics, resyncs, replays).
type stamp struct {
	at     time.Time
	commit bool
}

// logSize is how many entries the reflector may run ahead of the processor.
// The processor never blocks on anything but the store's lock, so this only
// smooths bursts; a full log makes the reflector wait (backpressure on the
// connection), it never drops entries. Entries hold decoded objects, so a
// compact cache, whose objects are about half the size, uses a shorter log
// to keep a relist's peak close to the cache's own size.
const (
	logSize        = 1024
	compactLogSize = 128
)

// eventLog is the ordered queue between a reflector and the processor: a
// plain FIFO of what the reflector read, in the order it read it. It never
// looks at the store, merges, or reorders entries; the processor applies
// each entry to the store in order. One goroutine pushes, one pops.
//
// An informer over several namespaces has a reflector, and a log, per
// namespace; their logs share one channel, which the processor reads, but
// each counts its own pending entries, so that a reflector about to relist
// waits only for its own entries, not for the other namespaces' churn.
type eventLog[T client.Object] struct {
	ch chan entry[T] // shared by the logs of one informer

	mu      sync.Mutex
	pending int // pushed and not yet done
	waiters []chan struct{}

	// synced: the processor applied this log's opSynced. Only the
	// processor uses it, with the informer's mu held.
	synced bool

	// applied is the last mark applied, for any goroutine.
	applied atomic.Pointer[string]
}

// appliedRV returns the resourceVersion the store reflects for this log:
// every change the reflector read up to it has been applied ("" before
// its first list completed).
func (l *eventLog[T]) appliedRV() string {
	if p := l.applied.Load(); p != nil {
		return *p
	}
	return ""
}

func newEventLog[T client.Object](ch chan entry[T]) *eventLog[T] {
	return &eventLog[T]{ch: ch}
}

// push appends e, waiting while the log is full.
func (l *eventLog[T]) push(ctx context.Context, e entry[T]) error {
	l.mu.Lock()
	l.pending++
	l.mu.Unlock()
	e.from = l
	select {
	case l.ch <- e:
		return nil
	case <-ctx.Done():
		l.done()
		return ctx.Err()
	}
}

// done records that the processor has applied one popped entry.
func (l *eventLog[T]) done() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending--
	if l.pending == 0 {
		for _, w := range l.waiters {
			close(w)
		}
		l.waiters = nil
	}
}

// drained waits until every entry pushed to l has been applied, so the
// store reflects everything l's reflector has read.
func (l *eventLog[T]) drained(ctx context.Context) error {
	l.mu.Lock()
	if l.pending == 0 {
		l.mu.Unlock()
		return nil
	}
	w := make(chan struct{})
	l.waiters = append(l.waiters, w)
	l.mu.Unlock()
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
