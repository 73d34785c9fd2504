package watchcache

import (
	"context"
	"errors"
	"fmt"
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

// snapshot is the cache's objects as they were from rev on, until the next
// snapshot's rev: a copy-on-write clone of the btree (btree.Clone is O(1);
// the live tree then copies the nodes it writes). Nothing writes a
// snapshot's tree, so it is read without Cache.mu.
type snapshot struct {
	rev  int64
	tree *btree.BTreeG[*Object]

	mu sync.Mutex
	// after memoizes how many objects under a prefix are at or after a
	// start key: a walk's next page learns its remainingItemCount from
	// the page before instead of counting the rest of the range.
	after map[rangeStart]int
}

type rangeStart struct{ prefix, start string }

// snapshot_locked records the live tree as the state at rev, and prunes.
// Events of one revision (a transaction) share one snapshot.
func (c *Cache) snapshot_locked(rev int64) {
	s := &snapshot{rev: rev, tree: c.objects.Clone()}
	if n := len(c.snaps); n > 0 && c.snaps[n-1].rev == rev {
		c.snaps[n-1] = s
	} else {
		c.snaps = append(c.snaps, s)
	}
	c.pruneSnapshots_locked()
}

// resetSnapshots_locked drops every snapshot after a (re)list at rev (the
// states before it are not known) and counts the listed objects of each
// namespace.
func (c *Cache) resetSnapshots_locked(rev int64) {
	clear(c.snaps)
	c.snaps = c.snaps[:0]
	c.snapshot_locked(rev)
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

// pruneSnapshots_locked drops snapshots no revision the history covers
// and the store has not compacted needs (the newest one at or before
// that floor still serves it), and the oldest beyond MaxSnapshots. The
// newest is always kept.
func (c *Cache) pruneSnapshots_locked() {
	floor := max(c.oldest, c.compacted)
	drop := 0
	for n := len(c.snaps); drop < n-1; drop++ {
		if c.snaps[drop+1].rev > floor && n-drop <= c.cfg.MaxSnapshots {
			break
		}
	}
	if drop == 0 {
		return
	}
	clear(c.snaps[:drop])
	c.snaps = c.snaps[drop:]
}

// snapshotAt_locked is the snapshot holding the state at rev, or nil.
func (c *Cache) snapshotAt_locked(rev int64) *snapshot {
	i := sort.Search(len(c.snaps), func(i int) bool { return c.snaps[i].rev > rev })
	if i == 0 || rev > c.rev {
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
	t := time.NewTicker(c.cfg.CompactionPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.RLock()
		ready, oldest := c.ready, int64(0)
		if len(c.snaps) > 0 {
			oldest = max(c.snaps[0].rev, c.compacted)
		}
		c.mu.RUnlock()
		if !ready || oldest == 0 {
			continue
		}
		rev, err := c.cfg.Store.Compacted(ctx, oldest)
		if err != nil {
			if ctx.Err() == nil {
				c.cfg.Log.Debug("watch cache: ask for the compaction revision", "prefix", c.cfg.Prefix, "revision", oldest, "err", err)
			}
			continue
		}
		if rev > 0 {
			c.mu.Lock()
			c.compacted_locked(rev)
			c.mu.Unlock()
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
	s := c.snapshotAt_locked(rev)
	if s == nil {
		oldest := int64(0)
		if len(c.snaps) > 0 {
			oldest = c.snaps[0].rev
		}
		cur := c.rev
		c.mu.RUnlock()
		return Page{}, fmt.Errorf("%w: revision %d, cache holds %d to %d", ErrNoSnapshot, rev, oldest, cur)
	}
	var cands []*Object
	indexed := false
	total := -1 // objects in the range, when known without counting
	if s == c.snaps[len(c.snaps)-1] {
		// The live state: its label index and counts apply.
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
		s.tree.AscendGreaterOrEqual(&Object{Key: start}, func(o *Object) bool {
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
	s.tree.AscendGreaterOrEqual(&Object{Key: next}, func(o *Object) bool {
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
	case prefix == all && start == prefix:
		return s.tree.Len()
	}
	s.tree.AscendGreaterOrEqual(&Object{Key: start}, func(o *Object) bool {
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
