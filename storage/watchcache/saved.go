package watchcache

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/google/btree"

	"github.com/objwatch/objwatch/storage"
)

// SavedState keeps a cache's objects across restarts (package
// storage/watchcache/cachefile keeps them in a file). The cache calls it
// from one goroutine at a time.
type SavedState interface {
	// Load calls add with each saved object, in key order, and returns
	// the revision they are at. An error (none saved, damaged, made for
	// another decoding or definition) means the cache lists the store; the
	// objects added before it are dropped.
	Load(add func(*Object)) (int64, error)
	// Save replaces the saved state with objs, the state at rev in key
	// order, and returns how many it saved.
	Save(rev int64, objs iter.Seq[*Object]) (int, error)
	// Advance records that the state saved at rev is unchanged through
	// a later revision, which Load then answers.
	Advance(rev, through int64) error
	// Discard removes the saved state: it can no longer be used (the
	// store has compacted its revision).
	Discard() error
}

// resumeStats describe a start from a saved state.
type resumeStats struct {
	from    int64 // the saved state's revision
	objects int
	loaded  time.Duration // reading it
	events  int           // applied while catching up
}

// Resumed reports whether the cache started from its saved state, from
// which revision, and how many events it applied to catch up with the
// store (see "Saved state" in the package doc).
func (c *Cache) Resumed() (from int64, events int, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.resumed.from, c.resumed.events, c.resumed.from > 0 && c.ready && c.catchUp == 0
}

// resume starts the cache from its saved state: it loads it, then
// follows the store from its revision, not ready until it has reached
// the store's revision as read after the load, so that no read is served
// older than a list from the store would be. It returns, for the caller
// to list the store, when there is no usable state (os.ErrNotExist when
// none was saved; a store that fails to tell its revision is asked
// again, the state kept), when the store's revision is older than the state's
// (another store: the state is not its), or when the store has compacted
// the revisions the cache needs (the state is discarded); otherwise, as
// listAndWatch, once ctx ends or the feed needs a relist.
func (c *Cache) resume(ctx context.Context) error {
	began := time.Now()
	objects, index := btree.NewG(32, less), labelIndex{}
	rev, err := c.cfg.Saved.Load(func(o *Object) {
		o.adopt(c.cfg.Encodings)
		objects.ReplaceOrInsert(o)
		index.add(o)
	})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	cur, err := c.storeRevision(ctx)
	if err != nil {
		return fmt.Errorf("store revision: %w", err)
	}
	if cur < rev {
		c.discard()
		return fmt.Errorf("saved at revision %d, the store is at %d: not this store's state", rev, cur)
	}
	c.mu.Lock()
	c.resumed = resumeStats{from: rev, objects: objects.Len(), loaded: time.Since(began)}
	c.savedRev = rev
	c.mu.Unlock()
	c.install(objects, index, rev, cur)
	c.cfg.Log.Info("watch cache: loaded saved state; catching up", "prefix", c.cfg.Prefix, "revision", rev, "store", cur, "objects", objects.Len(), "took", time.Since(began).Round(time.Millisecond))
	err = c.watch(ctx)
	c.mu.Lock()
	failed := c.catchUp > 0
	if failed {
		// Never ready: the list that follows replaces the state.
		c.catchUp, c.resumed = 0, resumeStats{}
	}
	c.mu.Unlock()
	if failed && errors.Is(err, storage.ErrCompacted) {
		c.discard()
	}
	return err
}

// storeRevision reads the store's revision, asking again while the store
// fails to answer: a state already loaded is worth waiting for, since a
// list instead would need the same store and much more of it. It returns
// an error only once ctx ends.
func (c *Cache) storeRevision(ctx context.Context) (int64, error) {
	backoff := 100 * time.Millisecond
	for {
		cur, err := c.cfg.Store.Revision(ctx)
		if err == nil || ctx.Err() != nil {
			return cur, err
		}
		c.cfg.Log.Warn("watch cache: store revision after loading the saved state; asking again", "prefix", c.cfg.Prefix, "err", err)
		if !pause(ctx, &backoff, 5*time.Second) {
			return 0, err
		}
	}
}

// caughtUp_locked makes the cache ready once it has caught up from its
// saved state.
func (c *Cache) caughtUp_locked() {
	c.ready, c.catchUp = true, 0
	r := c.resumed
	c.cfg.Log.Info("watch cache: started from saved state", "prefix", c.cfg.Prefix, "from", r.from, "revision", c.rev,
		"objects", r.objects, "events", r.events, "load", r.loaded.Round(time.Millisecond), "took", time.Since(c.started).Round(time.Millisecond))
}

func (c *Cache) discard() {
	if err := c.cfg.Saved.Discard(); err != nil {
		c.cfg.Log.Warn("watch cache: discard saved state", "prefix", c.cfg.Prefix, "err", err)
	}
}

// saveEvery saves the cache's state every SaveInterval while it changes,
// until ctx ends.
func (c *Cache) saveEvery(ctx context.Context) {
	every(ctx, c.cfg.SaveInterval, func() {
		if err := c.Save(); err != nil {
			c.cfg.Log.Warn("watch cache: save state", "prefix", c.cfg.Prefix, "err", err)
		}
	})
}

// Save writes the cache's current state to its SavedState, unless it is
// not ready or has not moved since it was last saved or loaded; when
// only its revision moved (no object changed), it only advances the
// saved state's revision. The
// state is an immutable snapshot (see "Snapshots"), taken under the
// cache's lock in O(1) and written without it: reads and events go on
// meanwhile. Safe for concurrent use, also after Stop (a server saves its
// caches as it stops); saves are serialized.
func (c *Cache) Save() error {
	if c.cfg.Saved == nil {
		return nil
	}
	c.saving.Lock()
	defer c.saving.Unlock()
	c.mu.Lock()
	if !c.ready || c.rev == c.savedRev {
		c.mu.Unlock()
		return nil
	}
	rev, saved, changed := c.rev, c.savedRev, c.changedSinceSave
	if !changed {
		// Nothing under the prefix changed since the state was saved:
		// only its revision moves on.
		c.mu.Unlock()
		if err := c.cfg.Saved.Advance(saved, rev); err != nil {
			return err
		}
		c.mu.Lock()
		c.savedRev = max(c.savedRev, rev)
		c.mu.Unlock()
		return nil
	}
	s, err := c.snapshot_locked(rev)
	c.changedSinceSave = false
	c.mu.Unlock()
	if err != nil {
		return err
	}
	began := time.Now()
	n, err := c.cfg.Saved.Save(rev, func(yield func(*Object) bool) { s.ascend("", yield) })
	c.mu.Lock()
	if err != nil {
		c.changedSinceSave = true
	} else {
		c.savedRev = max(c.savedRev, rev)
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	c.cfg.Log.Info("watch cache: saved state", "prefix", c.cfg.Prefix, "revision", rev, "objects", n, "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// DiscardSaved removes the cache's saved state (its resource is no
// longer served), after waiting for a save under way.
func (c *Cache) DiscardSaved() {
	if c.cfg.Saved == nil {
		return
	}
	c.saving.Lock()
	defer c.saving.Unlock()
	c.discard()
}
