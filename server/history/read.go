package history

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/objwatch/objwatch/server/jsonenc"
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

// latest finds key's last change at or before rev: its revision and kind.
func (r *reader) latest(key string, rev int64) (int64, kind, bool) {
	p := keyIndexPrefix(key)
	if !r.it.SeekLT(keyIndexKey(key, rev+1)) || !bytes.HasPrefix(r.it.Key(), p) {
		return 0, 0, false
	}
	_, at, ok := parseKeyIndexKey(r.it.Key())
	v := r.it.Value()
	if !ok || len(v) != 1 {
		return 0, 0, false
	}
	return at, kind(v[0]), true
}

// record reads key's record at rev; its payload is a copy.
func (r *reader) record(key string, rev int64) (record, error) {
	k := recordKey(rev, key)
	if !r.it.SeekGE(k) || !bytes.Equal(r.it.Key(), k) {
		if err := r.err(); err != nil {
			return record{}, err
		}
		return record{}, fmt.Errorf("%w: %s at %d: indexed but not recorded", ErrCorrupt, key, rev)
	}
	v, err := r.it.ValueAndErr()
	if err != nil {
		return record{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	rec, err := decodeRecord(bytes.Clone(v))
	if err != nil {
		return record{}, fmt.Errorf("%w: %s at %d: %w", ErrCorrupt, key, rev, err)
	}
	return rec, nil
}

// value rebuilds key's value written at rev (a put): the last whole copy
// at or before it, and the patches after that.
func (r *reader) value(key string, rev int64, rec record) ([]byte, error) {
	var patches [][]byte
	for rec.kind == kindPatch {
		patches = append(patches, rec.payload)
		prev, k, ok := r.latest(key, rev-1)
		if !ok || k == kindDelete {
			return nil, fmt.Errorf("%w: %s at %d: a patch without the value before it", ErrCorrupt, key, rev)
		}
		var err error
		if rec, err = r.record(key, prev); err != nil {
			return nil, err
		}
		rev = prev
	}
	if rec.kind != kindFull {
		return nil, fmt.Errorf("%w: %s at %d: a patch of a deletion", ErrCorrupt, key, rev)
	}
	if len(patches) == 0 {
		return rec.payload, nil
	}
	doc, ok := jsonenc.Decode(rec.payload)
	if !ok {
		return nil, fmt.Errorf("%w: %s at %d: a patched value that is no JSON object", ErrCorrupt, key, rev)
	}
	var cur any = doc
	for i := len(patches) - 1; i >= 0; i-- {
		var err error
		if cur, err = applyPatch(cur, patches[i]); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, key, err)
		}
	}
	out, ok := jsonenc.Append(nil, cur)
	if !ok {
		return nil, fmt.Errorf("%w: %s: a value that cannot be encoded", ErrCorrupt, key)
	}
	return out, nil
}

// entry is key's change at rev, with its value.
func (r *reader) entry(key string, rev int64) (Entry, error) {
	rec, err := r.record(key, rev)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Key: key, Revision: rev, CreateRevision: rec.created, Time: rec.time, Author: rec.author, Deleted: rec.kind == kindDelete, InGap: rec.inGap}
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
	end := upper(append([]byte{spaceKey}, prefix...))
	var out []Entry
	seek := append([]byte{spaceKey}, from...)
	for r.it.SeekGE(seek) && (end == nil || bytes.Compare(r.it.Key(), end) < 0) {
		key, _, ok := parseKeyIndexKey(r.it.Key())
		if !ok {
			return nil, 0, fmt.Errorf("%w: key index entry %q", ErrCorrupt, r.it.Key())
		}
		// The next key's entries start after key's 0x00 separator.
		seek = append(keyIndexPrefix(key)[:len(key)+1], 1)
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
		e, err := r.entry(key, at)
		if err != nil {
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
	var revs []int64
	p := keyIndexPrefix(key)
	for ok := r.it.SeekGE(p); ok && bytes.HasPrefix(r.it.Key(), p); ok = r.it.Next() {
		_, rev, ok := parseKeyIndexKey(r.it.Key())
		if !ok {
			return nil, fmt.Errorf("%w: key index entry %q", ErrCorrupt, r.it.Key())
		}
		revs = append(revs, rev)
	}
	if err := r.err(); err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(revs))
	for _, rev := range revs {
		e, err := r.entry(key, rev)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
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
	// A second iterator walks the records while r rebuilds values.
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: recordKey(from+1, ""), UpperBound: recordKey(to+1, "")})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		rev, key, ok := parseRecordKey(it.Key())
		if !ok {
			return fmt.Errorf("%w: record key %q", ErrCorrupt, it.Key())
		}
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		e, err := r.entry(key, rev)
		if err != nil {
			return err
		}
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
