package history

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/objwatch/objwatch/storage"
)

// Entry is one key's state at a revision, or one change of it.
type Entry struct {
	Key string
	// Revision is the revision of the change that made this state (the
	// object's resourceVersion), CreateRevision the one that created it.
	Revision, CreateRevision int64
	// Deleted: the change deleted the key (Value is empty).
	Deleted bool
	// InGap: a deletion found after a gap; it happened at some revision
	// within the gap, not at Revision.
	InGap bool
	Value []byte
	// Time is when the change was made, Author who made it (nil: unknown).
	Time   time.Time
	Author *Author
}

// Errors of reads at a revision the store cannot answer.
var (
	// ErrNotRetained: the revision is older than the store keeps.
	ErrNotRetained = errors.New("history: revision no longer retained")
	// ErrNotRecorded: the revision is newer than the store has recorded.
	ErrNotRecorded = errors.New("history: revision not recorded yet")
)

// GapError reports a read at a revision within a gap.
type GapError struct{ Gap Gap }

func (e *GapError) Error() string {
	return fmt.Sprintf("history: revisions %d-%d could not be recorded (etcd compacted them before the history store read them)", e.Gap.From, e.Gap.To)
}

// check reports whether the store can answer reads at rev.
func (s *Store) check(rev int64) error {
	if rev < s.Oldest() || rev <= 0 {
		return fmt.Errorf("%w: %d (oldest %d)", ErrNotRetained, rev, s.Oldest())
	}
	if rev > s.Recorded() {
		return fmt.Errorf("%w: %d (recorded %d)", ErrNotRecorded, rev, s.Recorded())
	}
	for _, g := range s.Gaps() {
		if g.From <= rev && rev <= g.To {
			return &GapError{g}
		}
	}
	return nil
}

// reader is one consistent read of the database.
type reader struct {
	it   *pebble.Iterator
	done func()
}

// newReader holds the store open until close.
func (s *Store) newReader() (*reader, error) {
	done, err := s.use()
	if err != nil {
		return nil, err
	}
	it, err := s.db.NewIter(nil)
	if err != nil {
		done()
		return nil, fmt.Errorf("history: %w", err)
	}
	return &reader{it: it, done: done}, nil
}

// heldReader is a reader for a caller that holds the store open.
func (s *Store) heldReader() (*reader, error) {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return &reader{it: it, done: func() {}}, nil
}

func (r *reader) close() { r.it.Close(); r.done() }

// err is the iterator's error, as ErrCorrupt when it found damage.
func (r *reader) err() error {
	err := r.it.Error()
	if err != nil && errors.Is(err, pebble.ErrCorruption) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

// latest positions the reader at key's last change at or before rev
// and returns its revision and kind.
func (r *reader) latest(key string, rev int64) (int64, kind, bool) {
	p := keyPrefix(key)
	if !r.it.SeekLT(recordKey(key, rev+1)) || !bytes.HasPrefix(r.it.Key(), p) {
		return 0, 0, false
	}
	_, at, ok := parseRecordKey(r.it.Key())
	v := r.it.Value()
	if !ok || len(v) < 2 {
		return 0, 0, false
	}
	return at, kind(v[1] &^ flagInGap), true
}

// current decodes the record the reader is positioned at; its payload
// is a copy.
func (r *reader) current() (record, error) {
	v, err := r.it.ValueAndErr()
	if err != nil {
		return record{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	rec, err := decodeRecord(bytes.Clone(v))
	if err != nil {
		return record{}, fmt.Errorf("%w: record %q: %w", ErrCorrupt, r.it.Key(), err)
	}
	return rec, nil
}

// record reads key's record at rev and leaves the reader there.
func (r *reader) record(key string, rev int64) (record, error) {
	k := recordKey(key, rev)
	if !r.it.SeekGE(k) || !bytes.Equal(r.it.Key(), k) {
		if err := r.err(); err != nil {
			return record{}, err
		}
		return record{}, fmt.Errorf("%w: %s at %d: indexed but not recorded", ErrCorrupt, key, rev)
	}
	return r.current()
}

// value rebuilds the value of rec, key's put at rev, with the reader
// positioned at it: the last whole copy at or before it (the records
// before it are adjacent) and the deltas after that.
func (r *reader) value(key string, rev int64, rec record) ([]byte, error) {
	var deltas [][]byte
	p := keyPrefix(key)
	for rec.kind == kindDelta {
		deltas = append(deltas, rec.payload)
		if !r.it.Prev() || !bytes.HasPrefix(r.it.Key(), p) {
			if err := r.err(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %s at %d: a delta without the value before it", ErrCorrupt, key, rev)
		}
		var err error
		if rec, err = r.current(); err != nil {
			return nil, err
		}
	}
	if rec.kind != kindFull {
		return nil, fmt.Errorf("%w: %s at %d: a delta from a deletion", ErrCorrupt, key, rev)
	}
	v := rec.payload
	// Two buffers take turns: each delta reads one and writes the other.
	var spare []byte
	for i := len(deltas) - 1; i >= 0; i-- {
		out, err := applyDelta(spare[:0], v, deltas[i])
		if err != nil {
			return nil, fmt.Errorf("%w: %s at %d: %w", ErrCorrupt, key, rev, err)
		}
		if i < len(deltas)-1 {
			spare = v
		}
		v = out
	}
	return v, nil
}

// entryOf is rec, key's change at rev, as an Entry without its value.
func entryOf(key string, rev int64, rec record) Entry {
	return Entry{Key: key, Revision: rev, CreateRevision: rec.created, Time: rec.time, Author: rec.author, Deleted: rec.kind == kindDelete, InGap: rec.inGap}
}

// entry is key's change at rev, with its value.
func (r *reader) entry(key string, rev int64) (Entry, error) {
	rec, err := r.record(key, rev)
	if err != nil {
		return Entry{}, err
	}
	e := entryOf(key, rev, rec)
	if !e.Deleted {
		if e.Value, err = r.value(key, rev, rec); err != nil {
			return Entry{}, err
		}
	}
	return e, nil
}

// Get returns key's state at rev; storage.ErrNotFound when it did not
// exist then.
func (s *Store) Get(key string, rev int64) (Entry, error) {
	if err := s.check(rev); err != nil {
		return Entry{}, err
	}
	r, err := s.newReader()
	if err != nil {
		return Entry{}, err
	}
	defer r.close()
	at, k, ok := r.latest(key, rev)
	if !ok || k == kindDelete {
		if err := r.err(); err != nil {
			return Entry{}, err
		}
		return Entry{}, fmt.Errorf("%s at %d: %w", key, rev, storage.ErrNotFound)
	}
	return r.entry(key, at)
}

// List returns the keys under prefix that existed at rev, in key order,
// from startKey on (inclusive; "" for the first), at most limit of them
// (0: all); remaining counts those after them.
func (s *Store) List(prefix, startKey string, rev int64, limit int) (_ []Entry, remaining int64, _ error) {
	if err := s.check(rev); err != nil {
		return nil, 0, err
	}
	r, err := s.newReader()
	if err != nil {
		return nil, 0, err
	}
	defer r.close()
	from := prefix
	if startKey > from {
		from = startKey
	}
	end := upper(append([]byte{spaceRecord}, prefix...))
	var out []Entry
	seek := append([]byte{spaceRecord}, from...)
	for r.it.SeekGE(seek) && (end == nil || bytes.Compare(r.it.Key(), end) < 0) {
		key, _, ok := parseRecordKey(r.it.Key())
		if !ok {
			return nil, 0, fmt.Errorf("%w: record key %q", ErrCorrupt, r.it.Key())
		}
		// The next key's records start after key's 0x00 separator.
		seek = append(keyPrefix(key)[:len(key)+1], 1)
		if key < from {
			continue // startKey sorts inside key's entries (it ends in 0x00)
		}
		at, k, ok := r.latest(key, rev)
		if !ok || k == kindDelete {
			continue
		}
		if limit > 0 && len(out) == limit {
			remaining++ // counted, not read
			continue
		}
		rec, err := r.current() // latest left the reader at it
		if err != nil {
			return nil, 0, err
		}
		e := entryOf(key, at, rec)
		if e.Value, err = r.value(key, at, rec); err != nil {
			return nil, 0, err
		}
		out = append(out, e)
	}
	if err := r.err(); err != nil {
		return nil, 0, err
	}
	return out, remaining, nil
}

// KeyHistory returns every retained change of key, oldest first, each
// with the value it wrote (deletions without one). The first may be older
// than Oldest: the state at Oldest.
func (s *Store) KeyHistory(key string) ([]Entry, error) {
	r, err := s.newReader()
	if err != nil {
		return nil, err
	}
	defer r.close()
	var out []Entry
	var cur []byte // the last value, for the next delta
	p := keyPrefix(key)
	for ok := r.it.SeekGE(p); ok && bytes.HasPrefix(r.it.Key(), p); ok = r.it.Next() {
		_, rev, ok := parseRecordKey(r.it.Key())
		if !ok {
			return nil, fmt.Errorf("%w: record key %q", ErrCorrupt, r.it.Key())
		}
		rec, err := r.current()
		if err != nil {
			return nil, err
		}
		e := entryOf(key, rev, rec)
		if e.Value, err = next(key, rec, cur); err != nil {
			return nil, err
		}
		cur = e.Value
		out = append(out, e)
	}
	return out, r.err()
}

// next is the value rec leaves (nil for a deletion), given cur, the value
// before it.
func next(key string, rec record, cur []byte) ([]byte, error) {
	switch rec.kind {
	case kindDelete:
		return nil, nil
	case kindFull:
		return rec.payload, nil
	}
	if cur == nil {
		return nil, fmt.Errorf("%w: %s: a delta without the value before it", ErrCorrupt, key)
	}
	v, err := applyDelta(nil, cur, rec.payload)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, key, err)
	}
	return v, nil
}

// Changes calls fn with every change of a key under prefix at revisions
// after from up to to (0: Recorded), in revision order, until fn returns
// an error (returned) or they end. Changes lost in a gap are not there
// (see Gaps); those before Oldest only as the state they left.
func (s *Store) Changes(prefix string, from, to int64, fn func(Entry) error) error {
	if to == 0 {
		to = s.Recorded()
	}
	r, err := s.newReader()
	if err != nil {
		return err
	}
	defer r.close()
	// A second iterator walks the revision index while r reads records.
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: revKey(from+1, ""), UpperBound: revKey(to+1, "")})
	if err != nil {
		return err
	}
	defer it.Close()
	last := map[string][]byte{} // each key's value after its last change seen
	for it.First(); it.Valid(); it.Next() {
		rev, key, ok := parseRevKey(it.Key())
		if !ok {
			return fmt.Errorf("%w: revision index key %q", ErrCorrupt, it.Key())
		}
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		rec, err := r.record(key, rev)
		if err != nil {
			return err
		}
		e := entryOf(key, rev, rec)
		cur, seen := last[key]
		switch {
		case e.Deleted:
			cur = nil
		case seen || rec.kind == kindFull:
			if e.Value, err = next(key, rec, cur); err != nil {
				return err
			}
			cur = e.Value
		default: // the key's first change in the window: rebuilt
			if e.Value, err = r.value(key, rev, rec); err != nil {
				return err
			}
			cur = e.Value
		}
		last[key] = cur
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return r.err()
}

// RevisionAt is the last revision recorded at or before t.
func (s *Store) RevisionAt(t time.Time) (int64, error) {
	r, err := s.newReader()
	if err != nil {
		return 0, err
	}
	defer r.close()
	if !r.it.SeekLT(timeKey(t.Add(1), 0)) {
		if err := r.err(); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: nothing recorded before %s", ErrNotRetained, t.UTC().Format(time.RFC3339Nano))
	}
	_, rev, ok := parseTimeKey(r.it.Key())
	if !ok {
		return 0, fmt.Errorf("%w: nothing recorded before %s", ErrNotRetained, t.UTC().Format(time.RFC3339Nano))
	}
	if err := s.check(rev); err != nil {
		return 0, err
	}
	return rev, nil
}
