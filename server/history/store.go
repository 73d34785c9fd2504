package history

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/centrifugal/fdelta"
	"github.com/prometheus/client_golang/prometheus"
)

// cacheSize is the database's block cache: decompressed blocks of
// records, which rebuilding values and listing prefixes read again.
const cacheSize = 64 << 20

// memTableSize is the size of Pebble's memtable (see Open).
const memTableSize = 32 << 20

// Options configure a Store.
type Options struct {
	// Retention is how long a revision is kept after it was recorded
	// (0: forever). The state of every object at the oldest kept revision
	// stays readable: an object unchanged for longer keeps its last change.
	Retention time.Duration
	// MaxSize bounds the database's size on disk in bytes (0: no bound);
	// past it the oldest revisions are dropped first.
	MaxSize int64
	// FullEvery: at most this many records of a key in a row are deltas
	// before a whole copy (default 16). Reading a past value applies up to
	// FullEvery-1 deltas.
	FullEvery int
	// ValueCache bounds, in bytes, the keys' last values the writer keeps
	// as the bases of their next deltas (default 128 MiB, about 100,000
	// objects of 1.3 KiB; negative: none, every base is rebuilt from the
	// database).
	// A base rebuilt costs a seek into the database, often a block read
	// and decompressed: several times the record's own CPU.
	ValueCache int
	// DiskReserve is the free space, in bytes, the store leaves on its
	// file system (default and least 128 MiB: four memtables; negative:
	// none): an Append that finds less refuses with ErrDiskFull (see
	// room.go).
	DiskReserve int64
	Log         *slog.Logger
}

func (o *Options) defaults() {
	if o.FullEvery <= 0 {
		o.FullEvery = 16
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.ValueCache == 0 {
		o.ValueCache = 128 << 20
	}
	if o.DiskReserve == 0 {
		o.DiskReserve = 128 << 20
	}
	if o.DiskReserve > 0 {
		// Room for what Pebble may take between two looks at the free
		// space (checkBytes of records): a new write-ahead log, which it
		// allocates a memtable's size at once, and a memtable's flush,
		// without which it stalls every write.
		o.DiskReserve = max(o.DiskReserve, 4*memTableSize)
	}
}

// Gap is a run of revisions the store could not record (etcd compacted
// them before the store read them): reads at them are refused, and a key
// deleted within it is recorded as deleted at To+1.
type Gap struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// Found is when the store found the gap.
	Found time.Time `json:"found"`
}

// Store is the history database: every change of every key it is given,
// in a Pebble database in one directory. One goroutine appends (Append,
// AddGap, Trim are serialized by the store); reads are safe concurrently
// with them and each sees one consistent state.
type Store struct {
	db   *pebble.DB
	opts Options

	recorded, oldest atomic.Int64
	durable          atomic.Int64 // see Durable
	// advanced is closed (and replaced) whenever Recorded moves; wanted
	// tells the recorder that a reader waits (see Wanted).
	advanced atomic.Pointer[chan struct{}]
	wanted   chan struct{}
	gaps     atomic.Pointer[[]Gap]
	damaged  atomic.Bool // a read found a damaged block
	room     room        // the free space on the store's disk (room.go)

	// closing guards the database against Close: every use holds it
	// shared, Close exclusively.
	closing sync.RWMutex
	closed  bool

	// lag observes how long after its write each revision with an
	// author note was recorded.
	lag prometheus.Histogram

	mu       sync.Mutex          // the writer
	last     map[string]keyState // per key, its last record (the writer's)
	values   valueCache          // some keys' last values, for the next delta
	lastTime time.Time           // the time of the last revision appended
}

// keyState is what the writer remembers of a key's last record.
type keyState struct {
	rev       int64
	created   int64
	sinceFull int // records since its last whole copy
	deleted   bool
}

// valueCache holds the last values of keys, up to a number of bytes;
// past it, entries are dropped at random (Go's map order), which keeps
// the often written keys' values often enough. Its owner serializes use.
type valueCache struct {
	m         map[string][]byte
	size, max int
}

func (c *valueCache) get(key string) ([]byte, bool) {
	v, ok := c.m[key]
	return v, ok
}

func (c *valueCache) put(key string, v []byte) {
	if c.m == nil {
		c.m = map[string][]byte{}
	}
	if len(v) > c.max/64 {
		c.drop(key)
		return // a large value would push out many small ones (and none fits a negative max)
	}
	// One lookup and one assignment, not a delete and an insert: most
	// puts replace the key's last value.
	if old, ok := c.m[key]; ok {
		c.size -= len(key) + len(old)
	}
	c.m[key] = v
	c.size += len(key) + len(v)
	for k := range c.m {
		if c.size <= c.max {
			break
		}
		c.drop(k)
	}
}

func (c *valueCache) drop(key string) {
	if old, ok := c.m[key]; ok {
		c.size -= len(key) + len(old)
		delete(c.m, key)
	}
}

func (c *valueCache) reset() { clear(c.m); c.size = 0 }

// ErrCorrupt reports a database that failed its checks: Open refuses it,
// and a read that finds damage answers it.
var ErrCorrupt = errors.New("history: corrupt database")

// Open opens (or creates) the database in dir. A database Pebble refuses
// (a malformed manifest, a corrupt write-ahead log, a block's checksum on
// the way to the metadata) is an error wrapping ErrCorrupt; a directory it
// may not use (permissions, another process's lock) any other error.
// Verify checks every block.
func Open(dir string, opts Options) (*Store, error) {
	opts.defaults()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	s := &Store{opts: opts, room: room{dir: dir, reserve: opts.DiskReserve}, last: map[string]keyState{}, values: valueCache{max: opts.ValueCache}, wanted: make(chan struct{}, 1),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "objwatch_history_record_lag_seconds",
			Help:    "Time from a change's write (its author note) to its record in the history store.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 16),
		})}
	// Damage found while reading is an error of that read (and logged),
	// never the end of the server.
	events := &pebble.EventListener{DataCorruption: func(info pebble.DataCorruptionInfo) {
		s.damaged.Store(true)
		opts.Log.Error("history: damaged database", "detail", info.String())
	}}
	cache := pebble.NewCache(cacheSize)
	defer cache.Unref() // the database holds its own reference
	// vfs.Default, not Pebble's disk-health-checking wrapper, whose
	// goroutine a failed Open leaves running.
	po := &pebble.Options{Logger: pebbleLog{opts.Log}, EventListener: events, Cache: cache, FS: vfs.Default}
	// A memtable of 32 MiB, not Pebble's 4 MiB: records are keyed by key
	// then revision, so every flushed table overlaps the whole keyspace
	// and each compaction into the base level rewrites it; fewer, larger
	// flushes rewrite it less often (BenchmarkStoreSustainedCPU: about a
	// fifth less CPU per revision). Its pages are touched as records
	// arrive, so a quiet store costs little of it.
	po.MemTableSize = memTableSize
	for i := range po.Levels {
		// Records of one key repeat each other (authors, keys, deltas
		// of the same fields): zstd finds more of it than Snappy, in
		// blocks larger than the default 4 KiB. The upper levels, which
		// records pass through soon after they are written, use Snappy;
		// the bottom two zstd at its fastest level (1), which costs less
		// CPU than level 3 on the cores the writes share, for slightly
		// more bytes.
		po.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.SnappyCompression }
		if i >= len(po.Levels)-2 {
			po.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.BalancedCompression }
		}
		po.Levels[i].BlockSize = 32 << 10
	}
	db, err := pebble.Open(dir, po)
	if err != nil {
		// A directory this process may not use (permissions, another
		// process's lock) is an error of the setup; anything else
		// Pebble refuses (a malformed manifest, a corrupt log) is damage.
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EAGAIN) {
			return nil, fmt.Errorf("history: open %s: %w", dir, err)
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, dir, err)
	}
	s.db = db
	ch := make(chan struct{})
	s.advanced.Store(&ch)
	if err := s.loadMeta(); err != nil {
		db.Close()
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, dir, err)
	}
	return s, nil
}

// ErrClosed: the store was closed.
var ErrClosed = errors.New("history: store closed")

// Close closes the database, once the reads and writes under way have
// ended; later ones fail with ErrClosed.
func (s *Store) Close() error {
	s.closing.Lock()
	defer s.closing.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.db.Close()
}

// use holds the store open until done is called.
func (s *Store) use() (done func(), err error) {
	s.closing.RLock()
	if s.closed {
		s.closing.RUnlock()
		return nil, ErrClosed
	}
	if s.damaged.Load() {
		s.closing.RUnlock()
		return nil, fmt.Errorf("%w (found since it was opened; see the server's log)", ErrCorrupt)
	}
	return s.closing.RUnlock, nil
}

// Verify reads every block of the database, which checks its checksum,
// and every record's encoding. It takes time proportional to the
// database's size. Damage found marks the store damaged (see Damaged).
func (s *Store) Verify() error {
	done, err := s.use()
	if err != nil {
		return err
	}
	defer done()
	it, err := s.db.NewIter(nil)
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return s.damage(err)
		}
		if len(it.Key()) > 0 && it.Key()[0] == spaceRecord {
			if _, err := decodeRecord(v); err != nil {
				return s.damage(fmt.Errorf("record %q: %w", it.Key(), err))
			}
		}
	}
	if err := it.Error(); err != nil {
		return s.damage(err)
	}
	return nil
}

const (
	metaRecorded = "recorded"
	metaOldest   = "oldest"
	metaGaps     = "gaps"
	metaFormat   = "format"
)

func (s *Store) loadMeta() error {
	format, err := s.metaInt(metaFormat)
	if err != nil {
		return err
	}
	if format == 0 {
		if err := s.db.Set(metaKey(metaFormat), binary.BigEndian.AppendUint64(nil, recordFormat), pebble.Sync); err != nil {
			return err
		}
	} else if format != recordFormat {
		return fmt.Errorf("database format %d, this server reads %d", format, recordFormat)
	}
	rec, err := s.metaInt(metaRecorded)
	if err != nil {
		return err
	}
	old, err := s.metaInt(metaOldest)
	if err != nil {
		return err
	}
	var gaps []Gap
	if v, c, err := s.db.Get(metaKey(metaGaps)); err == nil {
		err = json.Unmarshal(v, &gaps)
		c.Close()
		if err != nil {
			return fmt.Errorf("gaps: %w", err)
		}
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return err
	}
	s.recorded.Store(rec)
	s.durable.Store(rec) // what Open read back is on disk
	if it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{spaceTime}, UpperBound: []byte{spaceTime + 1}}); err == nil {
		if it.Last() {
			s.lastTime, _, _ = parseTimeKey(it.Key())
		}
		it.Close()
	}
	s.oldest.Store(old)
	s.gaps.Store(&gaps)
	return nil
}

func (s *Store) metaInt(name string) (int64, error) {
	v, c, err := s.db.Get(metaKey(name))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("metadata %s: %d bytes", name, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// Recorded is the last revision recorded: every change up to it is in the
// store (or in a gap).
func (s *Store) Recorded() int64 { return s.recorded.Load() }

// WaitRecorded waits until Recorded is rev or more, or ctx ends.
func (s *Store) WaitRecorded(ctx context.Context, rev int64) error {
	for {
		ch := *s.advanced.Load()
		if s.Recorded() >= rev {
			return nil
		}
		select {
		case s.wanted <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("history: waiting for revision %d (recorded %d): %w", rev, s.Recorded(), context.Cause(ctx))
		case <-ch:
		}
	}
}

// Sync makes everything recorded so far durable (one fsync of the
// write-ahead log) and moves Durable to it.
func (s *Store) Sync() error {
	done, err := s.use()
	if err != nil {
		return err
	}
	defer done()
	rec := s.Recorded()
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("history: sync: %w", err)
	}
	if rec > s.durable.Load() {
		s.durable.Store(rec)
	}
	return nil
}

// Durable is the last recorded revision that survives a machine crash
// (see Sync): the compactor may compact etcd up to it.
func (s *Store) Durable() int64 { return s.durable.Load() }

// Stalled is how long appends have been refused with ErrDiskFull (0:
// they are not).
func (s *Store) Stalled() time.Duration { return s.room.stalled() }

// HoldsCompaction reports whether etcd's compaction should wait for the
// store (up to Durable): not when the store is damaged (it records
// nothing more), nor when its disk has been full for longer than limit.
// Etcd must not fill up for a store that cannot record; the revisions it
// then misses become a gap once it records again.
func (s *Store) HoldsCompaction(limit time.Duration) bool {
	return !s.Damaged() && s.Stalled() <= limit
}

// Wanted receives when a reader waits for a revision not recorded yet:
// the recorder then asks etcd how far its watch has come (a revision
// without a change of a recorded key moves Recorded only that way).
func (s *Store) Wanted() <-chan struct{} { return s.wanted }

// Reached records that every change up to rev has been recorded (a
// watch's progress notification).
func (s *Store) Reached(rev int64) error {
	done, err := s.use()
	if err != nil {
		return err
	}
	defer done()
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev <= s.recorded.Load() {
		return nil
	}
	if err := s.db.Set(metaKey(metaRecorded), binary.BigEndian.AppendUint64(nil, uint64(rev)), pebble.NoSync); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	s.setRecorded(rev)
	return nil
}

// setRecorded moves Recorded to rev and wakes its waiters.
func (s *Store) setRecorded(rev int64) {
	s.recorded.Store(rev)
	ch := make(chan struct{})
	close(*s.advanced.Swap(&ch))
}

// Oldest is the oldest revision the store answers reads at (0: it never
// dropped any).
func (s *Store) Oldest() int64 { return s.oldest.Load() }

// Gaps are the runs of revisions the store could not record, oldest first.
func (s *Store) Gaps() []Gap { return *s.gaps.Load() }

// Change is one key's change in a revision, as etcd's watch reports it.
type Change struct {
	Key    string
	Delete bool
	// Value is the new value of a put.
	Value []byte
	// Prev and PrevRevision are the key's value before the change and the
	// revision that wrote it (etcd's prevKV; nil and 0 when unknown).
	Prev         []byte
	PrevRevision int64
	// CreateRevision is the revision that created the key (of a delete:
	// of the value it deleted, when known).
	CreateRevision int64
	// InGap: a deletion found after a gap, at some revision within it.
	InGap bool
}

// Revision is the changes one etcd revision made, with when it was made
// and by whom (nil: unknown).
type Revision struct {
	Rev    int64
	Time   time.Time
	Author *Author
	// AuthorJSON, when Author is nil, is the author as JSON (an Author
	// object), recorded as it is: the recorder passes the author note's
	// bytes through.
	AuthorJSON []byte
	Changes    []Change
}

// Append records revs, in revision order, in one atomic batch, and moves
// Recorded to the last one. Appending a revision again (after a restart
// that resumed at Recorded) rewrites the same records.
func (s *Store) Append(revs []Revision) error {
	if len(revs) == 0 {
		return nil
	}
	done, err := s.use()
	if err != nil {
		return err
	}
	defer done()
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, r := range revs {
		for _, c := range r.Changes {
			n += int64(len(c.Key) + len(c.Value) + 64)
		}
	}
	if err := s.room.check(n); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	pending := map[string]keyState{}
	state := func(key string) (keyState, bool) {
		if st, ok := pending[key]; ok {
			return st, true
		}
		st, ok := s.last[key]
		return st, ok
	}
	values := map[string][]byte{} // the values this batch leaves (nil: deleted)
	var rd *reader                // opened for a value not in memory
	defer func() {
		if rd != nil {
			rd.close()
		}
	}()
	// prevValue is key's value at its last record, st.
	prevValue := func(key string, st keyState) ([]byte, error) {
		if v, ok := values[key]; ok {
			return v, nil
		}
		if v, ok := s.values.get(key); ok {
			return v, nil
		}
		if rd == nil {
			var err error
			if rd, err = s.heldReader(); err != nil {
				return nil, err
			}
		}
		e, err := rd.entry(key, st.rev)
		return e.Value, err
	}
	for _, r := range revs {
		authorJS := r.AuthorJSON // once per revision, shared by its changes
		if r.Author != nil {
			var err error
			if authorJS, err = json.Marshal(r.Author); err != nil {
				return fmt.Errorf("history: author: %w", err)
			}
		}
		// Times never go back along revisions, so that the time index
		// answers "the last revision at or before t" with one seek: a
		// revision whose author noted an earlier time than the revision
		// before it was recorded (a request that began before an
		// earlier revision was made) takes that revision's time.
		if r.Time.Before(s.lastTime) {
			r.Time = s.lastTime
		}
		s.lastTime = r.Time
		for _, c := range r.Changes {
			rec := record{created: c.CreateRevision, time: r.Time, authorJS: authorJS, kind: kindDelete, inGap: c.InGap}
			st, known := state(c.Key)
			if rec.created == 0 && known && !st.deleted {
				rec.created = st.created // a deletion seen without the value it deleted
			}
			next := keyState{rev: r.Rev, created: rec.created, deleted: c.Delete}
			if !c.Delete {
				rec.kind, rec.payload = kindFull, c.Value
				if known && !st.deleted && st.rev < r.Rev && st.sinceFull+1 < s.opts.FullEvery {
					// The delta's base is the key's last record's value, as
					// a read rebuilds it: etcd's previous value when the
					// watch sent it for that record, else the store's.
					prev := c.Prev
					if prev == nil || c.PrevRevision != st.rev {
						var err error
						if prev, err = prevValue(c.Key, st); err != nil {
							return err
						}
					}
					if d, ok := deltaBetween(prev, c.Value); ok {
						rec.kind, rec.payload = kindDelta, d
						next.sinceFull = st.sinceFull + 1
					}
				}
				values[c.Key] = c.Value
			} else {
				values[c.Key] = nil
			}
			enc, err := rec.encode()
			if err != nil {
				return err
			}
			if err := b.Set(recordKey(c.Key, r.Rev), enc, nil); err != nil {
				return err
			}
			if err := b.Set(revKey(r.Rev, c.Key), []byte{byte(rec.kind)}, nil); err != nil {
				return err
			}
			pending[c.Key] = next
		}
		if err := b.Set(timeKey(r.Time, r.Rev), nil, nil); err != nil {
			return err
		}
	}
	last := revs[len(revs)-1].Rev
	if last > s.recorded.Load() {
		if err := b.Set(metaKey(metaRecorded), binary.BigEndian.AppendUint64(nil, uint64(last)), nil); err != nil {
			return err
		}
	}
	// Not synced: a process that dies loses nothing the OS has, and
	// Sync (the recorder's, every second) bounds what a machine crash
	// can take; the compactor stops at Durable, so etcd keeps what the
	// store may have lost.
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("history: append: %w", err)
	}
	for k, st := range pending {
		s.last[k] = st
	}
	for k, v := range values {
		if v == nil {
			s.values.drop(k)
		} else {
			s.values.put(k, v)
		}
	}
	if last > s.recorded.Load() {
		s.setRecorded(last)
	}
	return nil
}

// deltaBetween is the delta from prev to value when it is smaller than
// value. A delta is made of bytes and carries a checksum of the value it
// makes, so a value read back is the one written, byte for byte.
func deltaBetween(prev, value []byte) ([]byte, bool) {
	if len(prev) == 0 {
		return nil, false
	}
	d := fdelta.Create(prev, value)
	return d, len(d) < len(value)
}

// maxValue bounds the value a delta may make (etcd's own limit on a
// request is 1.5 MiB by default): a damaged delta asking for more is
// refused before anything is allocated.
const maxValue = 64 << 20

// applyDelta makes the value d describes from prev.
func applyDelta(dst, prev, d []byte) ([]byte, error) {
	if n, err := fdelta.OutputSize(d); err != nil || n > maxValue {
		return nil, fmt.Errorf("a delta for %d bytes: %w", n, cmp.Or(err, errCorruptRecord))
	}
	return fdelta.AppendApply(dst, prev, d)
}

// AddGap records that the revisions from..to could not be recorded, and
// the changes found after it (by a relist at to+1): each key's value as
// the relist found it, at its own mod revision, and deletions of the keys
// the store had that the relist did not, at to+1. Recorded moves to to+1.
func (s *Store) AddGap(g Gap, found []Revision) error {
	s.mu.Lock()
	gaps := append(append([]Gap(nil), s.Gaps()...), g)
	s.mu.Unlock()
	js, err := json.Marshal(gaps)
	if err != nil {
		return err
	}
	// Deltas cannot bridge a gap: the next change of every key is whole.
	// Readers see the gap before found moves Recorded past it: a read
	// waiting for a revision within the gap must find the gap, not the
	// relist's sparse revisions as if they were the whole history.
	s.mu.Lock()
	clear(s.last)
	s.values.reset()
	s.gaps.Store(&gaps)
	s.mu.Unlock()
	return s.appendAndMark(found, "gap", func(b *pebble.Batch) func() {
		_ = b.Set(metaKey(metaGaps), js, nil)
		if g.To+1 > s.recorded.Load() {
			_ = b.Set(metaKey(metaRecorded), binary.BigEndian.AppendUint64(nil, uint64(g.To+1)), nil)
		}
		return func() {
			s.gaps.Store(&gaps)
			if g.To+1 > s.recorded.Load() {
				s.setRecorded(g.To + 1)
			}
		}
	})
}

// appendAndMark appends found, then commits (synced) what mark sets in
// a batch of its own and, once it is committed, runs what mark returns.
func (s *Store) appendAndMark(found []Revision, what string, mark func(b *pebble.Batch) func()) error {
	if err := s.Append(found); err != nil {
		return err
	}
	done, err := s.use()
	if err != nil {
		return err
	}
	defer done()
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	after := mark(b)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("history: %s: %w", what, err)
	}
	after()
	return nil
}

// damage marks the store damaged: it answers nothing more.
func (s *Store) damage(err error) error {
	s.damaged.Store(true)
	return fmt.Errorf("%w: %w", ErrCorrupt, err)
}

// Damaged reports whether a read or Verify found damage since Open: then
// every use of the store fails with ErrCorrupt.
func (s *Store) Damaged() bool { return s.damaged.Load() }

// Start begins an empty store's history at rev: found is etcd's state
// then (each key at its own mod revision, see Recorder); reads before rev
// are not retained.
func (s *Store) Start(rev int64, found []Revision) error {
	// Readers see where the history starts before found moves Recorded:
	// a read before rev waiting for found must be refused, not answered
	// from the few revisions found holds.
	s.oldest.Store(rev)
	return s.appendAndMark(found, "start", func(b *pebble.Batch) func() {
		_ = b.Set(metaKey(metaOldest), binary.BigEndian.AppendUint64(nil, uint64(rev)), nil)
		_ = b.Set(metaKey(metaRecorded), binary.BigEndian.AppendUint64(nil, uint64(rev)), nil)
		now := time.Now()
		if now.Before(s.lastTime) {
			now = s.lastTime
		}
		_ = b.Set(timeKey(now, rev), nil, nil)
		return func() {
			s.oldest.Store(rev)
			s.lastTime = now
			s.setRecorded(rev)
		}
	})
}

func sortRevisions(revs []Revision) {
	slices.SortFunc(revs, func(a, b Revision) int { return cmp.Compare(a.Rev, b.Rev) })
}

// Size is the database's size on disk in bytes.
func (s *Store) Size() int64 {
	done, err := s.use()
	if err != nil {
		return 0
	}
	defer done()
	return int64(s.db.Metrics().DiskSpaceUsage())
}

// pebbleLog sends Pebble's messages to the server's log.
type pebbleLog struct{ log *slog.Logger }

func (l pebbleLog) Infof(format string, args ...any) {
	l.log.Debug("history: " + fmt.Sprintf(format, args...))
}

func (l pebbleLog) Errorf(format string, args ...any) {
	l.log.Error("history: " + fmt.Sprintf(format, args...))
}

func (l pebbleLog) Fatalf(format string, args ...any) {
	l.log.Error("history: fatal: " + fmt.Sprintf(format, args...))
	panic(fmt.Sprintf(format, args...))
}

// Collectors are the store's metrics: how far it has recorded and synced,
// the oldest revision it keeps, its size on disk, whether it is damaged,
// and the lag of its records behind the writes.
func (s *Store) Collectors() []prometheus.Collector {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	return []prometheus.Collector{
		gauge("objwatch_history_recorded_revision", "The last etcd revision the history store has recorded.", func() float64 { return float64(s.Recorded()) }),
		gauge("objwatch_history_durable_revision", "The last revision the history store has synced to disk (etcd is never compacted past it).", func() float64 { return float64(s.Durable()) }),
		gauge("objwatch_history_oldest_revision", "The oldest revision the history store answers reads at.", func() float64 { return float64(s.Oldest()) }),
		gauge("objwatch_history_size_bytes", "The history store's size on disk.", func() float64 { return float64(s.Size()) }),
		gauge("objwatch_history_damaged", "1 when the history store found damage and answers no more reads.", func() float64 {
			if s.Damaged() {
				return 1
			}
			return 0
		}),
		gauge("objwatch_history_disk_full", "1 while the history store records nothing because its disk has less free space than its reserve.", func() float64 {
			if s.room.full.Load() {
				return 1
			}
			return 0
		}),
		s.lag,
	}
}
