package watchcache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/btree"
)

// ErrNoSnapshot: the cache holds no state at the revision asked for (older
// than its snapshots, from before a relist, compacted by the store, or
// newer than the cache). The caller reads the store, which serves it or
// answers 410.
var ErrNoSnapshot = errors.New("watch cache holds no snapshot at that revision")

// maxRanks bounds the remaining-count memo of one snapshot.
const maxRanks = 1024

// snapshot is the cache's objects as they were at revisions rev up to,
// not including, until (0: up to the cache's current revision and on,
// until the next write): a copy-on-write clone of the btree taken when a
// read first needed it (btree.Clone is O(1); the live tree then copies the
// nodes it writes), with past: the objects of the keys written after rev,
// before the clone, as they were at rev. Nothing writes a snapshot, so it
// is read without Cache.mu.
type snapshot struct {
	rev, until int64
	tree       *btree.BTreeG[*Object]
	// past is in key order; obj is nil for a key that did not exist at
	// rev.
	past []pastObject

	mu sync.Mutex
	// after memoizes how many objects under a prefix are at or after a
	// start key: a walk's next page learns its remainingItemCount from
	// the page before instead of counting the rest of the range.
	after map[rangeStart]int
}

type pastObject struct {
	key string
	obj *Object
}

type rangeStart struct{ prefix, start string }

// covers reports whether s holds the state at rev.
func (s *snapshot) covers(rev int64) bool {
	return s.rev <= rev && (s.until == 0 || rev < s.until)
}

// ascend calls fn with the snapshot's objects from key start on, in key
// order, until fn returns false.
func (s *snapshot) ascend(start string, fn func(*Object) bool) {
	past := s.past[sort.Search(len(s.past), func(i int) bool { return s.past[i].key >= start }):]
	more := true
	s.tree.AscendGreaterOrEqual(&Object{Key: start}, func(o *Object) bool {
		// Keys before o that the tree lacks were deleted after rev.
		for ; len(past) > 0 && past[0].key < o.Key; past = past[1:] {
			if p := past[0].obj; p != nil && !fn(p) {
				more = false
				return false
			}
		}
		if len(past) > 0 && past[0].key == o.Key {
			p := past[0].obj
			past = past[1:]
			if p == nil {
				return true // created after rev
			}
			o = p
		}
		more = fn(o)
		return more
	})
	for ; more && len(past) > 0; past = past[1:] {
		if p := past[0].obj; p != nil {
			more = fn(p)
		}
	}
}

// wrote_locked records a write at rev: the live snapshot, if any, now
// ends before it (or, at its own revision, a transaction's later event,
// no longer holds at all).
func (c *Cache) wrote_locked(rev int64) {
	n := len(c.snaps)
	if n == 0 || c.snaps[n-1].until != 0 {
		return
	}
	if s := c.snaps[n-1]; s.rev < rev {
		s.until = rev
		return
	}
	c.snaps[n-1] = nil
	c.snaps = c.snaps[:n-1]
}

// snapshot_locked returns a snapshot holding the state at rev, taking one
// if none does: a clone of the live tree, with the keys written after rev
// as the history says they were. Snapshots are taken by reads, not by
// writes, so a cache nobody pages through keeps none. rev must not be
// newer than the cache; a revision before the history or the store's
// compaction is ErrNoSnapshot.
func (c *Cache) snapshot_locked(rev int64) (*snapshot, error) {
	if s := c.snapshotAt_locked(rev); s != nil {
		return s, nil
	}
	if rev < c.oldest || rev < c.compacted || rev > c.rev {
		return nil, fmt.Errorf("%w: revision %d, cache holds %d to %d", ErrNoSnapshot, rev, max(c.oldest, c.compacted), c.rev)
	}
	// The history holds every event after c.oldest, in revision order: the
	// first event of a key after rev has its state at rev as Prev.
	first := sort.Search(len(c.history), func(i int) bool { return c.history[i].Rev > rev })
	later := c.history[first:]
	if n := len(c.snaps); len(later) == 0 && n > 0 && c.snaps[n-1].until == 0 {
		// Nothing changed since rev: the live snapshot (taken at a
		// revision the cache reached without writes) holds from rev on.
		// Only one snapshot may be open-ended, the newest.
		c.snaps[n-1].rev = rev
		return c.snaps[n-1], nil
	}
	s := &snapshot{rev: rev, tree: c.objects.Clone()}
	if len(later) > 0 {
		s.until = later[0].Rev
		seen := make(map[string]bool, len(later))
		for _, e := range later {
			if !seen[e.Obj.Key] {
				seen[e.Obj.Key] = true
				s.past = append(s.past, pastObject{e.Obj.Key, e.Prev})
			}
		}
		sort.Slice(s.past, func(i, j int) bool { return s.past[i].key < s.past[j].key })
	}
	i := sort.Search(len(c.snaps), func(i int) bool { return c.snaps[i].rev > rev })
	c.snaps = slices.Insert(c.snaps, i, s)
	c.pruneSnapshots_locked()
	return s, nil
}

// resetSnapshots_locked drops every snapshot after a (re)list at rev (the
// states before it are not known) and counts the listed objects of each
// namespace.
func (c *Cache) resetSnapshots_locked() {
	clear(c.snaps)
	c.snaps = c.snaps[:0]
	c.perNamespace = map[string]int{}
	c.objects.Ascend(func(o *Object) bool {
		c.count_locked(o.Key, 1)
		return true
	})
}

// count_locked adds d to the count of key's namespace, if it has one.
func (c *Cache) count_locked(key string, d int) {
	ns, _, ok := strings.Cut(strings.TrimPrefix(key, c.cfg.Prefix), "/")
	if !ok {
		return
	}
	if c.perNamespace[ns] += d; c.perNamespace[ns] <= 0 {
		delete(c.perNamespace, ns)
	}
}

// pruneSnapshots_locked drops the snapshots that serve no revision the
// history covers and the store has not compacted, and the oldest beyond
// MaxSnapshots.
func (c *Cache) pruneSnapshots_locked() {
	floor := max(c.oldest, c.compacted)
	keep := c.snaps[:0]
	for i, s := range c.snaps {
		if (s.until == 0 || s.until > floor) && len(c.snaps)-i <= c.cfg.MaxSnapshots {
			keep = append(keep, s)
		}
	}
	clear(c.snaps[len(keep):])
	c.snaps = keep
}

// snapshotAt_locked is the snapshot holding the state at rev, or nil.
func (c *Cache) snapshotAt_locked(rev int64) *snapshot {
	i := sort.Search(len(c.snaps), func(i int) bool { return c.snaps[i].rev > rev })
	if i == 0 || rev > c.rev || !c.snaps[i-1].covers(rev) {
		return nil
	}
	return c.snaps[i-1]
}

// Snapshots reports how many snapshots the cache holds and the oldest
// revision they serve (0 when none).
func (c *Cache) Snapshots() (n int, oldest int64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.snaps) == 0 {
		return 0, 0
	}
	return len(c.snaps), min(max(c.snaps[0].rev, c.oldest, c.compacted), c.rev)
}

// pollCompaction asks the store every CompactionPoll whether it has
// compacted the oldest revision the cache would serve from a snapshot,
// and records what it learns (compacted_locked), until ctx ends. A store
// that does not answer is asked again at the next poll.
func (c *Cache) pollCompaction(ctx context.Context) {
	every(ctx, c.cfg.CompactionPoll, func() {
		c.mu.RLock()
		ready, oldest := c.ready, int64(0)
		if len(c.snaps) > 0 {
			oldest = max(c.snaps[0].rev, c.compacted)
		}
		c.mu.RUnlock()
		if !ready || oldest == 0 {
			return
		}
		rev, err := c.cfg.Store.Compacted(ctx, oldest)
		if err != nil {
			if ctx.Err() == nil {
				c.cfg.Log.Debug("watch cache: ask for the compaction revision", "prefix", c.cfg.Prefix, "revision", oldest, "err", err)
			}
			return
		}
		if rev > 0 {
			c.mu.Lock()
			c.compacted_locked(rev)
			c.mu.Unlock()
		}
	})
}

// every calls fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// compacted_locked records that the store has compacted to rev: past
// revisions before it are no longer served, and the snapshots only they
// needed are dropped.
func (c *Cache) compacted_locked(rev int64) {
	if rev <= c.compacted {
		return
	}
	c.compacted = rev
	c.pruneSnapshots_locked()
}

// Page is one page of a list.
type Page struct {
	Objects []*Object
	// Rev is the revision the page was read at.
	Rev int64
	// More: keys follow the last object in the listed range, whether or
	// not they match the filter (as a store's range read says).
	More bool
	// Remaining counts the objects in the range after the page, when More
	// and the filter selects by namespace at most; else -1.
	Remaining int64
}

// ListAt returns the objects matching f in key order as they were at
// revision rev (0: the cache's current revision), from startKey on (a full
// key; "" for the start of the range), at most limit (0: all). A revision
// newer than the cache, older than its snapshots, or older than the
// store's compaction revision as the cache last learnt it, is
// ErrNoSnapshot: the caller waits for the cache first (WaitFor/WaitFresh)
// or reads the store.
//
// The page is read from an immutable snapshot: a walk continued at the
// same revision sees none of the writes since, as a store's read at that
// revision. Safe for concurrent use; the cache's lock is held only to pick
// the snapshot (and the label index's candidates, at the current state).
func (c *Cache) ListAt(f Filter, rev int64, startKey string, limit int) (Page, error) {
	c.mu.RLock()
	if !c.ready {
		c.mu.RUnlock()
		return Page{}, ErrNotReady
	}
	if rev > 0 && rev < c.compacted {
		compacted := c.compacted
		c.mu.RUnlock()
		return Page{}, fmt.Errorf("%w: revision %d, the store has compacted to %d", ErrNoSnapshot, rev, compacted)
	}
	if rev == 0 {
		rev = c.rev
	}
	if rev > c.rev {
		cur := c.rev
		c.mu.RUnlock()
		return Page{}, fmt.Errorf("%w: revision %d, the cache is at %d", ErrNoSnapshot, rev, cur)
	}
	s := c.snapshotAt_locked(rev)
	if s == nil {
		// Taking a snapshot clones the live tree, which needs the
		// writer's lock; it is O(1), plus the history since rev for a
		// past revision.
		c.mu.RUnlock()
		c.mu.Lock()
		var err error
		if !c.ready {
			err = ErrNotReady
		} else {
			s, err = c.snapshot_locked(rev)
		}
		c.mu.Unlock()
		if err != nil {
			return Page{}, err
		}
		c.mu.RLock()
	}
	var cands []*Object
	indexed := false
	total := -1 // objects in the range, when known without counting
	if n := len(c.snaps); s.until == 0 && n > 0 && c.snaps[n-1] == s {
		// The live state (no write since the snapshot, though the cache's
		// revision may have moved on without one; not dropped by a relist
		// since it was taken): its label index and counts apply.
		cands, indexed = c.labels.candidates(f.Labels)
		if f.Namespace != "" {
			total = c.perNamespace[f.Namespace]
		}
	}
	c.mu.RUnlock()

	prefix := c.cfg.Prefix
	if f.Namespace != "" {
		prefix += f.Namespace + "/"
	}
	start := max(startKey, prefix)
	match := f.matcher()
	p := Page{Rev: rev, Remaining: -1}
	full := func() bool { return limit > 0 && len(p.Objects) == limit }
	if indexed {
		i := sort.Search(len(cands), func(i int) bool { return cands[i].Key >= start })
		for _, o := range cands[i:] {
			if !strings.HasPrefix(o.Key, prefix) {
				break
			}
			if match(o) {
				if p.Objects = append(p.Objects, o); full() {
					break
				}
			}
		}
	} else {
		s.ascend(start, func(o *Object) bool {
			if !strings.HasPrefix(o.Key, prefix) {
				return false
			}
			if match(o) {
				p.Objects = append(p.Objects, o)
			}
			return !full()
		})
	}
	if !full() {
		return p, nil
	}
	next := p.Objects[len(p.Objects)-1].Key + "\x00"
	s.ascend(next, func(o *Object) bool {
		p.More = strings.HasPrefix(o.Key, prefix)
		return false
	})
	if p.More && f.selectsByNamespaceOnly() {
		if total < 0 || start != prefix {
			total = s.countFrom(c.cfg.Prefix, prefix, start)
		}
		n := total - len(p.Objects)
		s.remember(prefix, next, n)
		p.Remaining = int64(n)
	}
	return p, nil
}

// selectsByNamespaceOnly: f has no label or field selector.
func (f Filter) selectsByNamespaceOnly() bool {
	return (f.Labels == nil || f.Labels.Empty()) && (f.Fields == nil || f.Fields.Empty())
}

// countFrom counts the objects under prefix at or after start: remembered
// from an earlier page, the tree's size for the whole cache, else counted.
func (s *snapshot) countFrom(all, prefix, start string) int {
	s.mu.Lock()
	n, ok := s.after[rangeStart{prefix, start}]
	s.mu.Unlock()
	switch {
	case ok:
		return n
	case prefix == all && start == prefix && len(s.past) == 0:
		return s.tree.Len()
	}
	s.ascend(start, func(o *Object) bool {
		if !strings.HasPrefix(o.Key, prefix) {
			return false
		}
		n++
		return true
	})
	s.remember(prefix, start, n)
	return n
}

func (s *snapshot) remember(prefix, start string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.after == nil {
		s.after = map[rangeStart]int{}
	}
	if len(s.after) < maxRanks {
		s.after[rangeStart{prefix, start}] = n
	}
}
