package etcd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/objwatch/objwatch/storage"
)

// The bounds of a Feed's ring: it drops its oldest revisions once their
// keys and values take more than feedRingBytes, or once they are older
// than feedRingAge (checked as revisions arrive).
const (
	feedRingBytes = 8 << 20
	feedRingAge   = 30 * time.Second
	// feedEventOverhead is counted per event on top of its key and value.
	feedEventOverhead = 64
	// feedProbe is how often a watch catching up on its own etcd watch
	// asks etcd for progress, so that it can switch to the feed even when
	// nothing under its prefix changes.
	feedProbe = time.Second
	// feedProgressWait is how long a progress request on the shared
	// watch holds back others without an answer.
	feedProgressWait = time.Second
)

// Feed is one etcd watch over a whole prefix (the keyspace, "/") shared
// by the store's watches that do not want previous values: etcd encodes
// and sends each event once, and the server decodes it once, however many
// such watches follow it. ShareWatches makes one; Run runs it.
//
// A watch it serves (see Store.Watch) behaves as a dedicated etcd watch
// without previous values: the events under its prefix from its revision
// on, in revision order, every event of a revision delivered together,
// none lost or repeated; values transformed back by the watching store's
// transformers; RequestProgress answered by a Progress event at a
// revision through which everything was delivered (the progress
// notifications of the shared watch, which every watch the feed serves
// may also receive unasked; the requests of all its watches are
// coalesced, one in flight at a time); the same Error events.
//
// The feed keeps a ring of the recent revisions it received (all keys,
// at most about 8 MiB of keys and values and 30 s, dropped whole, oldest
// first). A watch from a revision the ring holds, or a later one, is
// served from the ring then live. A watch from an older revision starts
// on a dedicated etcd watch and moves to the feed once it has caught up
// with the ring, at a response boundary (Stats counts the moves); the
// ring also serves revisions etcd has compacted meanwhile, except below
// a compaction this store made or saw, which take the dedicated watch
// and get etcd's CompactedError.
//
// When the shared watch fails (etcd closes it, the member loses its
// leader: storage.ErrUnavailable), every watch it serves ends with an
// Error event (never a CompactedError: its owner resumes from its last
// revision plus one), and the feed restarts its watch from the last
// revision it received plus one, with a backoff from 100 ms doubling to
// 5 s. Should that revision be compacted, the feed starts over at the
// current revision with an empty ring. While the shared watch is down,
// new watches take a dedicated etcd watch and move to the feed once it is
// back and they have caught up.
//
// A slow watch never holds up the shared watch or another watch: each has
// an unbounded queue drained by its own goroutine (as the etcd client
// buffers each watch).
//
// All methods are safe for concurrent use.
type Feed struct {
	store  *Store
	prefix string
	log    *slog.Logger

	ringBytes int
	ringAge   time.Duration
	probe     time.Duration
	retry     time.Duration // the first backoff after a failure
	// breakc fails the current shared watch with the error sent (tests).
	breakc chan error

	switches atomic.Int64

	mu sync.Mutex
	// running: Run is running. live: its shared watch is open and
	// continues the ring (every event after start is in the ring or
	// will be received).
	running, live bool
	shared        clientv3.Watcher // the live shared watch's, for RequestProgress
	// Every event with a revision > start is in the ring; every event up
	// to pos has been received.
	start, pos int64
	ring       []ringEntry
	ringSize   int
	subs       map[*sub]struct{}
	catchingUp int // subscriptions on a dedicated watch
	// Progress requests on the shared watch: at most one in flight
	// (sent at progSent; zero: none), its answer going to every watch the
	// feed serves; one asked for meanwhile (progWanted) is sent when it
	// is answered, or after feedProgressWait without an answer.
	progSent   time.Time
	progWanted bool
}

// ringEntry is one response of the shared watch: whole revisions, the
// last of them rev.
type ringEntry struct {
	rev    int64
	events []*clientv3.Event
	size   int
	at     time.Time
}

// ShareWatches makes a Feed of the watches under prefix ("/": all) that
// this store and the stores WithTransformers makes from it (before or
// after) open without previous values from a revision (see Watch). Until
// its Run starts and after it ends, those watches are dedicated etcd
// watches as before. Call it once per store family; a second call
// replaces the first feed for watches opened afterwards. log may be nil.
func (s *Store) ShareWatches(prefix string, log *slog.Logger) *Feed {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	f := &Feed{
		store: s, prefix: prefix, log: log,
		ringBytes: feedRingBytes, ringAge: feedRingAge, probe: feedProbe, retry: 100 * time.Millisecond,
		breakc: make(chan error),
		subs:   make(map[*sub]struct{}),
	}
	s.feed.Store(f)
	return f
}

// SharedWatch makes the store's Feed of prefix (ShareWatches) and
// returns its Run (storage.WatchSharer).
func (s *Store) SharedWatch(prefix string, log *slog.Logger) func(ctx context.Context) {
	return s.ShareWatches(prefix, log).Run
}

var _ storage.WatchSharer = (*Store)(nil)

// FeedStats is a snapshot of a Feed's state.
type FeedStats struct {
	// Live: the shared watch is open.
	Live bool
	// Subscribers are the watches the feed serves; CatchingUp those still
	// on a dedicated etcd watch. Switches counts the watches that moved
	// from a dedicated watch to the feed.
	Subscribers, CatchingUp int
	Switches                int64
	// Start and Pos: the ring holds every event after Start; every event
	// up to Pos has been received.
	Start, Pos int64
	// RingRevisions is the number of responses (whole revisions) in the
	// ring.
	RingRevisions int
}

// Stats returns the feed's current state.
func (f *Feed) Stats() FeedStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return FeedStats{Live: f.live, Subscribers: len(f.subs), CatchingUp: f.catchingUp, Switches: f.switches.Load(),
		Start: f.start, Pos: f.pos, RingRevisions: len(f.ring)}
}

// Run runs the shared watch until ctx ends; then every watch it serves
// ends with an Error event and new watches are dedicated again. It
// blocks; the caller owns the goroutine it runs in, and runs it once at a
// time (it may run it again after it returned). Every goroutine it
// starts has ended when it returns.
func (f *Feed) Run(ctx context.Context) {
	f.mu.Lock()
	f.running = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.running = false
		f.end_locked(errors.New("watch: the shared etcd watch stopped"))
		f.mu.Unlock()
	}()
	backoff := f.retry
	fresh := true
	for ctx.Err() == nil {
		if fresh {
			rev, err := f.store.Revision(ctx)
			if err != nil {
				f.log.Warn("etcd feed: current revision", "err", err)
				if !feedPause(ctx, &backoff) {
					return
				}
				continue
			}
			f.mu.Lock()
			f.start, f.pos, f.ring, f.ringSize = rev, rev, nil, 0
			f.mu.Unlock()
			fresh = false
		}
		received, compacted, err := f.session(ctx)
		if ctx.Err() != nil {
			return
		}
		f.log.Warn("etcd feed: shared watch failed, restarting", "prefix", f.prefix, "err", err)
		fresh = compacted
		if received {
			backoff = f.retry
		}
		if !feedPause(ctx, &backoff) {
			return
		}
	}
}

// feedPause waits *d or until ctx ends (false), then doubles *d up to 5 s.
func feedPause(ctx context.Context, d *time.Duration) bool {
	t := time.NewTimer(*d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	*d = min(2**d, 5*time.Second)
	return true
}

// session runs one shared watch from pos+1 until it fails: received
// says whether it received anything, compacted whether it failed because
// pos+1 is compacted. Every watch the feed serves has then ended.
func (f *Feed) session(ctx context.Context) (received, compacted bool, err error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	w := clientv3.NewWatcher(f.store.cli)
	defer func() {
		cancel()
		w.Close()
	}()
	f.mu.Lock()
	from := f.pos + 1
	ch := w.Watch(wctx, f.prefix, clientv3.WithPrefix(), clientv3.WithRev(from))
	f.live, f.shared = true, w
	f.progSent, f.progWanted = time.Time{}, false
	f.mu.Unlock()
	tick := time.NewTicker(feedProgressWait)
	defer tick.Stop()
	for err == nil {
		select {
		case now := <-tick.C:
			f.mu.Lock()
			ask := f.progWanted && now.Sub(f.progSent) >= feedProgressWait
			if ask {
				f.progSent, f.progWanted = now, false
			}
			f.mu.Unlock()
			if ask {
				_ = w.RequestProgress(wctx)
			}
		case resp, ok := <-ch:
			switch {
			case !ok:
				err = errors.New("etcd watch channel closed")
			case resp.Err() != nil:
				err = resp.Err()
				switch {
				case resp.CompactRevision > 0:
					compacted = true
					f.store.sawCompacted(resp.CompactRevision)
					err = fmt.Errorf("revision %d compacted (at %d)", from, resp.CompactRevision)
				case errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrGRPCNoLeader):
					err = fmt.Errorf("%w: etcd: %w", storage.ErrUnavailable, err)
				}
			default:
				got, ask := f.deliver(resp)
				received = received || got
				if ask {
					_ = w.RequestProgress(wctx)
				}
			}
		case err = <-f.breakc:
		}
	}
	f.mu.Lock()
	f.live, f.shared = false, nil
	f.end_locked(fmt.Errorf("watch: shared etcd watch: %w", err))
	f.mu.Unlock()
	return received, compacted, err
}

// end_locked ends every watch the feed serves with err.
func (f *Feed) end_locked(err error) {
	for s := range f.subs {
		s.fail(err, f.pos)
		delete(f.subs, s)
	}
}

// deliver adds resp, a response of the shared watch, to the ring and
// hands it to every watch it concerns, all under f.mu so that a watch
// registering from the ring misses nothing. It reports whether resp
// carried events or progress, and whether a progress request waits to
// be sent (its caller sends it).
func (f *Feed) deliver(resp clientv3.WatchResponse) (got, ask bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if resp.IsProgressNotify() {
		p := resp.Header.Revision
		f.pos = max(f.pos, p)
		for s := range f.subs {
			if p >= s.next-1 {
				s.push(clientv3.WatchResponse{Header: resp.Header})
			}
		}
		f.progSent = time.Time{}
		if f.progWanted {
			f.progSent, f.progWanted = time.Now(), false
			ask = true
		}
		return true, ask
	}
	if len(resp.Events) == 0 {
		return false, false
	}
	e := ringEntry{rev: resp.Events[len(resp.Events)-1].Kv.ModRevision, events: resp.Events, at: time.Now()}
	for _, ev := range resp.Events {
		e.size += len(ev.Kv.Key) + len(ev.Kv.Value) + feedEventOverhead
	}
	f.ring = append(f.ring, e)
	f.ringSize += e.size
	f.pos = max(f.pos, e.rev)
	for s := range f.subs {
		s.offer(resp.Header.Revision, resp.Events)
	}
	f.trim_locked(e.at)
	return true, false
}

// trim_locked drops the oldest revisions beyond the ring's bounds.
func (f *Feed) trim_locked(now time.Time) {
	n := 0
	for n < len(f.ring) && (f.ringSize > f.ringBytes || now.Sub(f.ring[n].at) > f.ringAge) {
		f.ringSize -= f.ring[n].size
		f.start = f.ring[n].rev
		f.ring[n] = ringEntry{}
		n++
	}
	f.ring = f.ring[n:]
}

// register_locked makes the feed serve s from s.next on: the ring's
// revisions from it, then live ones.
func (f *Feed) register_locked(s *sub) {
	i := sort.Search(len(f.ring), func(i int) bool { return f.ring[i].rev >= s.next })
	for _, e := range f.ring[i:] {
		s.offer(e.rev, e.events)
	}
	f.subs[s] = struct{}{}
}

// watch is a watch of prefix from from served by the feed (see
// Store.Watch) for st, or nil when the feed is not running.
func (f *Feed) watch(ctx context.Context, st *Store, prefix string, from int64) *watcher {
	ctx, cancel := context.WithCancel(ctx)
	s := &sub{feed: f, prefix: prefix, prefixB: []byte(prefix), next: from, wake: make(chan struct{}, 1), ch: make(chan clientv3.WatchResponse)}
	w := newWatcher(st, s, cancel)
	w.ended = s.endErr
	f.mu.Lock()
	switch {
	case !f.running:
		f.mu.Unlock()
		cancel()
		return nil
	case f.live && from > f.start && from >= f.store.compacted.Load():
		f.register_locked(s)
		f.mu.Unlock()
	default:
		f.catchingUp++
		f.mu.Unlock()
		dctx, dcancel := context.WithCancel(ctx)
		s.dedicated, s.dcancel = clientv3.NewWatcher(f.store.cli), dcancel
		dch := s.dedicated.Watch(clientv3.WithRequireLeader(dctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(from))
		s.wg.Add(1)
		go s.catchUp(ctx, st, dch, from)
	}
	s.wg.Add(1)
	go s.pump(ctx)
	w.wg.Add(1)
	go w.run(ctx, s.ch, from)
	return w
}

// sub is one watch the feed serves (or will, once caught up): the
// watchSource of its watcher. Its responses wait in an unbounded queue
// that pump hands to the watcher over ch.
type sub struct {
	feed   *Feed
	prefix string
	// prefixB is prefix, compared with the keys of every event.
	prefixB []byte
	// next is the first revision not yet delivered; f.mu guards it once
	// registered (before, the catch-up goroutine owns it).
	next int64
	wake chan struct{}
	ch   chan clientv3.WatchResponse
	wg   sync.WaitGroup // pump, catchUp

	mu sync.Mutex
	// queue waits for pump; done: nothing more comes (err says why);
	// gone: pump has ended, nothing more is queued.
	queue      []clientv3.WatchResponse
	done, gone bool
	err        error
	errRev     int64
	// dedicated is the etcd watch of a sub catching up, nil once it
	// moved to the feed.
	dedicated clientv3.Watcher
	dcancel   context.CancelFunc
}

// push queues resp.
func (s *sub) push(resp clientv3.WatchResponse) {
	s.mu.Lock()
	if s.done || s.gone {
		s.mu.Unlock()
		return
	}
	s.queue = append(s.queue, resp)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// offer queues the events of evs (whole revisions, the shared watch's
// or the ring's) under s's prefix from s.next on. The caller holds f.mu.
func (s *sub) offer(header int64, evs []*clientv3.Event) {
	if len(evs) == 0 || evs[len(evs)-1].Kv.ModRevision < s.next {
		return
	}
	i := 0
	for i < len(evs) && evs[i].Kv.ModRevision < s.next {
		i++
	}
	evs = evs[i:]
	all := true
	for _, ev := range evs {
		if !bytes.HasPrefix(ev.Kv.Key, s.prefixB) {
			all = false
			break
		}
	}
	if !all {
		var mine []*clientv3.Event
		for _, ev := range evs {
			if bytes.HasPrefix(ev.Kv.Key, s.prefixB) {
				mine = append(mine, ev)
			}
		}
		evs = mine
	}
	if len(evs) == 0 {
		// Not forwarded: an empty response looks like progress.
		return
	}
	s.next = evs[len(evs)-1].Kv.ModRevision + 1
	s.push(clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{Revision: header}, Events: evs})
}

// fail ends s with err after what is queued.
func (s *sub) fail(err error, rev int64) {
	s.mu.Lock()
	if !s.done {
		s.done, s.err, s.errRev = true, err, rev
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// endErr is why s ended (see watcher.ended).
func (s *sub) endErr() (error, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err, s.errRev
}

// pump hands the queued responses to the watcher until ctx ends or s is
// done and drained, then closes ch.
func (s *sub) pump(ctx context.Context) {
	defer s.wg.Done()
	defer close(s.ch)
	defer func() {
		s.mu.Lock()
		s.gone, s.queue = true, nil
		s.mu.Unlock()
	}()
	for {
		s.mu.Lock()
		q, done := s.queue, s.done
		s.queue = nil
		s.mu.Unlock()
		if len(q) == 0 {
			if done {
				return
			}
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		for i := range q {
			select {
			case s.ch <- q[i]:
			case <-ctx.Done():
				return
			}
		}
	}
}

// catchUp forwards the responses of s's dedicated etcd watch until one
// ends at a revision from which the feed's ring continues; then it
// registers s with the feed and closes the dedicated watch. It asks the
// dedicated watch for progress now and then, so that a prefix without
// changes catches up too.
func (s *sub) catchUp(ctx context.Context, st *Store, dch clientv3.WatchChan, from int64) {
	defer s.wg.Done()
	f := s.feed
	defer func() {
		f.mu.Lock()
		f.catchingUp--
		f.mu.Unlock()
	}()
	t := time.NewTicker(f.probe)
	defer t.Stop()
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.dedicated.RequestProgress(clientv3.WithRequireLeader(ctx))
			continue
		case resp, ok = <-dch:
		}
		var r int64
		switch {
		case !ok:
			if ctx.Err() == nil {
				s.fail(errors.New("watch: etcd watch channel closed"), 0)
			}
			return
		case resp.Err() != nil:
			s.fail(st.watchErr(resp, from), resp.Header.GetRevision())
			return
		case resp.IsProgressNotify():
			r = resp.Header.Revision
		case len(resp.Events) > 0:
			r = resp.Events[len(resp.Events)-1].Kv.ModRevision
		default:
			continue
		}
		s.push(resp)
		if s.switchAt(r) {
			s.closeDedicated()
			return
		}
	}
}

// switchAt registers s with the feed after r, everything up to which s
// has received, if the ring continues from r.
func (s *sub) switchAt(r int64) bool {
	f := s.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.live || r < f.start {
		return false
	}
	s.next = max(s.next, r+1)
	f.register_locked(s)
	f.switches.Add(1)
	return true
}

// RequestProgress asks the dedicated watch, or once s is on the feed the
// shared watch, for a progress notification. Requests on the shared
// watch are coalesced (see Feed.progSent): one in flight holds back the
// next until it is answered, however many watches ask. A request that meets the
// watch it went to closed meanwhile (s moved to the feed, the shared
// watch failed and s is ending) is not an error.
func (s *sub) RequestProgress(ctx context.Context) error {
	s.mu.Lock()
	d := s.dedicated
	s.mu.Unlock()
	if d != nil {
		err := d.RequestProgress(ctx)
		s.mu.Lock()
		moved := s.dedicated == nil
		s.mu.Unlock()
		if err == nil || !moved {
			return err
		}
	}
	f := s.feed
	f.mu.Lock()
	w := f.shared
	if w != nil && !f.progSent.IsZero() && time.Since(f.progSent) < feedProgressWait {
		// The answer to the request in flight may predate this one's
		// changes: one more follows it.
		f.progWanted = true
		w = nil
	} else if w != nil {
		f.progSent = time.Now()
	}
	f.mu.Unlock()
	if w == nil {
		return nil // the shared watch is down (s has ended or is ending), or a request is queued
	}
	err := w.RequestProgress(ctx)
	if err != nil {
		f.mu.Lock()
		if f.shared != w {
			err = nil
		}
		f.mu.Unlock()
	}
	return err
}

// Close unregisters s and waits for its goroutines; the watcher has
// cancelled its context.
func (s *sub) Close() error {
	s.feed.mu.Lock()
	delete(s.feed.subs, s)
	s.feed.mu.Unlock()
	s.wg.Wait()
	return s.closeDedicated()
}

// closeDedicated closes s's own etcd watch, if it still has one.
func (s *sub) closeDedicated() error {
	s.mu.Lock()
	d := s.dedicated
	s.dedicated = nil
	s.mu.Unlock()
	if d == nil {
		return nil
	}
	s.dcancel()
	return d.Close()
}
