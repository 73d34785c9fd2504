package change

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// DedupOptions configure a Dedup. The zero value is ready to use.
type DedupOptions struct {
	// Fingerprinter computes content fingerprints; nil: one that
	// excludes Volatile().
	Fingerprinter *Fingerprinter
	// MaxKeys bounds how many keys are remembered (default 100,000); the
	// least recently seen key is forgotten first. A forgotten key's next
	// event counts as new content.
	MaxKeys int
	// TTL, if positive, forgets keys not seen for this long.
	TTL time.Duration
	// Clock is for tests; nil: the real clock.
	Clock clock.PassiveClock
	// Registerer, if set, gets the counters
	// objwatch_change_dedup_events_total{dedup=Name,result="new"|"duplicate"}.
	Registerer prometheus.Registerer
	// Name labels the metrics (default "default").
	Name string
}

// Dedup remembers the fingerprint of the latest content delivered per key
// and tells whether an event brings new content: a PATCH and an UPDATE
// that produce the same content, a relist replaying what was delivered, a
// periodic resync, all reach the handler once.
//
// Its memory is bounded (DedupOptions.MaxKeys, TTL): about 100 bytes per
// key plus the key. A Dedup is safe for concurrent use.
type Dedup[K comparable] struct {
	fp      *Fingerprinter
	max     int
	ttl     time.Duration
	clock   clock.PassiveClock
	fresh   prometheus.Counter
	dupes   prometheus.Counter
	dropped atomic.Uint64

	mu      sync.Mutex
	entries map[K]*entry[K]
	lru     entry[K] // sentinel: lru.next is the most recently seen
}

type entry[K comparable] struct {
	key        K
	fp         Fingerprint
	seen       time.Time
	prev, next *entry[K]
}

// NewDedup returns a Dedup.
func NewDedup[K comparable](opts DedupOptions) (*Dedup[K], error) {
	d := &Dedup[K]{fp: opts.Fingerprinter, max: opts.MaxKeys, ttl: opts.TTL, clock: opts.Clock, entries: map[K]*entry[K]{}}
	if d.fp == nil {
		fp, err := NewFingerprinter(Volatile()...)
		if err != nil {
			return nil, err
		}
		d.fp = fp
	}
	if d.max <= 0 {
		d.max = 100_000
	}
	if d.clock == nil {
		d.clock = clock.RealClock{}
	}
	d.lru.next, d.lru.prev = &d.lru, &d.lru
	if opts.Registerer != nil {
		name := opts.Name
		if name == "" {
			name = "default"
		}
		events := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "objwatch_change_dedup_events_total",
			Help:        "Events checked for new content, by result: new (delivered) or duplicate (dropped).",
			ConstLabels: prometheus.Labels{"dedup": name},
		}, []string{"result"})
		if err := opts.Registerer.Register(events); err != nil {
			return nil, fmt.Errorf("dedup metrics: %w", err)
		}
		d.fresh, d.dupes = events.WithLabelValues("new"), events.WithLabelValues("duplicate")
	}
	return d, nil
}

// Fresh reports whether obj brings content not yet delivered for key, and
// remembers it as delivered if so: call it once per event, and deliver the
// event if it returns true. Objects are as for Between. An object that
// cannot be fingerprinted counts as new.
func (d *Dedup[K]) Fresh(key K, obj any) bool {
	sum, err := d.fp.Sum(obj)
	if err != nil {
		d.count(true)
		return true
	}
	now := d.clock.Now()
	d.mu.Lock()
	e, ok := d.entries[key]
	if ok && d.ttl > 0 && now.Sub(e.seen) >= d.ttl {
		d.remove_locked(e)
		ok = false
	}
	fresh := !ok || e.fp != sum
	if !ok {
		e = &entry[K]{key: key}
		d.entries[key] = e
	} else {
		d.unlink_locked(e)
	}
	e.fp, e.seen = sum, now
	d.pushFront_locked(e)
	d.evict_locked(now)
	d.mu.Unlock()
	d.count(fresh)
	return fresh
}

func (d *Dedup[K]) count(fresh bool) {
	if !fresh {
		d.dropped.Add(1)
	}
	if d.fresh == nil {
		return
	}
	if fresh {
		d.fresh.Inc()
	} else {
		d.dupes.Inc()
	}
}

// Forget drops what was delivered for key; call it when the object is
// deleted, so that a re-created object with the same content is new.
func (d *Dedup[K]) Forget(key K) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.entries[key]; ok {
		d.remove_locked(e)
	}
}

// Len returns the number of keys remembered.
func (d *Dedup[K]) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.entries)
}

// Dropped returns how many events Fresh found to be duplicates.
func (d *Dedup[K]) Dropped() uint64 { return d.dropped.Load() }

func (d *Dedup[K]) unlink_locked(e *entry[K]) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (d *Dedup[K]) pushFront_locked(e *entry[K]) {
	e.prev, e.next = &d.lru, d.lru.next
	d.lru.next.prev = e
	d.lru.next = e
}

func (d *Dedup[K]) remove_locked(e *entry[K]) {
	d.unlink_locked(e)
	delete(d.entries, e.key)
}

// evict_locked forgets keys over the bound and, from the least recently
// seen end, keys past their TTL.
func (d *Dedup[K]) evict_locked(now time.Time) {
	for len(d.entries) > d.max {
		d.remove_locked(d.lru.prev)
	}
	if d.ttl <= 0 {
		return
	}
	for e := d.lru.prev; e != &d.lru && now.Sub(e.seen) >= d.ttl; e = d.lru.prev {
		d.remove_locked(e)
	}
}
