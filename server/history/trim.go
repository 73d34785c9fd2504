package history

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// trimStep bounds the revisions one Trim batch drops.
const trimStep = 20_000

// Trim drops the changes made before cutoff, keeping every key's state at
// cutoff: a key's last change before it stays (whole) unless it was a
// deletion. Reads at revisions before cutoff are refused afterwards.
// cutoff is at most Recorded. It returns how many records it dropped.
func (s *Store) Trim(cutoff int64) (int, error) {
	done, err := s.use()
	if err != nil {
		return 0, err
	}
	defer done()
	s.mu.Lock()
	defer s.mu.Unlock()
	cutoff = min(cutoff, s.recorded.Load())
	dropped := 0
	for s.oldest.Load() < cutoff {
		n, err := s.trimTo(min(cutoff, max(s.oldest.Load(), 1)+trimStep))
		if err != nil {
			return dropped, err
		}
		dropped += n
	}
	return dropped, nil
}

// trimTo moves Oldest to cutoff in one batch.
func (s *Store) trimTo(cutoff int64) (int, error) {
	old := s.oldest.Load()
	r, err := s.heldReader() // Trim holds the store open
	if err != nil {
		return 0, err
	}
	defer r.close()
	keys := map[string]bool{}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: revKey(old, ""), UpperBound: revKey(cutoff, "")})
	if err != nil {
		return 0, err
	}
	for it.First(); it.Valid(); it.Next() {
		if _, key, ok := parseRevKey(it.Key()); ok {
			keys[key] = true
		}
	}
	err = it.Error()
	it.Close()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	dropped := 0
	for key := range keys {
		at, k, ok := r.latest(key, cutoff-1)
		if !ok {
			continue
		}
		var older []int64
		p := keyPrefix(key)
		for ok := r.it.SeekGE(p); ok && bytes.HasPrefix(r.it.Key(), p); ok = r.it.Next() {
			_, rev, ok := parseRecordKey(r.it.Key())
			if !ok || rev >= at {
				break
			}
			older = append(older, rev)
		}
		if k == kindDelete {
			older = append(older, at)
		} else if k == kindDelta {
			// The state at cutoff stays, whole: the deltas it came from go.
			e, err := r.entry(key, at)
			if err != nil {
				return 0, err
			}
			rec := record{kind: kindFull, created: e.CreateRevision, time: e.Time, author: e.Author, payload: e.Value}
			enc, err := rec.encode()
			if err != nil {
				return 0, err
			}
			_ = b.Set(recordKey(key, at), enc, nil)
			_ = b.Set(revKey(at, key), []byte{byte(kindFull)}, nil)
			if st := s.last[key]; st.rev == at {
				s.last[key] = keyState{rev: at, created: st.created} // its value unchanged
			}
		}
		for _, rev := range older {
			_ = b.Delete(recordKey(key, rev), nil)
			_ = b.Delete(revKey(rev, key), nil)
			dropped++
		}
	}
	if err := r.err(); err != nil {
		return 0, err
	}
	// The time index of the dropped revisions.
	for ok := r.it.SeekGE([]byte{spaceTime}); ok; ok = r.it.Next() {
		_, rev, ok := parseTimeKey(r.it.Key())
		if !ok || rev >= cutoff {
			break
		}
		_ = b.Delete(r.it.Key(), nil)
	}
	var gaps []Gap
	for _, g := range s.Gaps() {
		if g.To >= cutoff {
			gaps = append(gaps, g)
		}
	}
	js, err := json.Marshal(gaps)
	if err != nil {
		return 0, err
	}
	_ = b.Set(metaKey(metaGaps), js, nil)
	_ = b.Set(metaKey(metaOldest), binary.BigEndian.AppendUint64(nil, uint64(cutoff)), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, fmt.Errorf("history: trim: %w", err)
	}
	s.oldest.Store(cutoff)
	s.gaps.Store(&gaps)
	return dropped, nil
}

// Retain applies the retention rules at now: drops the changes older than
// Options.Retention, then, while the database is larger than
// Options.MaxSize, the oldest tenth of what is left.
func (s *Store) Retain(now time.Time) error {
	if s.opts.Retention > 0 {
		cutoff := s.Recorded()
		r, err := s.newReader()
		if err != nil {
			return err
		}
		if r.it.SeekGE(timeKey(now.Add(-s.opts.Retention), 0)) {
			if _, rev, ok := parseTimeKey(r.it.Key()); ok {
				cutoff = rev
			}
		}
		r.close()
		if _, err := s.Trim(cutoff); err != nil {
			return err
		}
	}
	for s.opts.MaxSize > 0 && s.Size() > s.opts.MaxSize {
		old, rec := s.Oldest(), s.Recorded()
		if old >= rec {
			return nil
		}
		cutoff := old + max(1, (rec-old)/10)
		if _, err := s.Trim(cutoff); err != nil {
			return err
		}
		if err := s.compact(); err != nil {
			return err
		}
	}
	return nil
}

// compact compacts the whole database, so that the space of dropped
// records (spread over every key's records) is given back.
func (s *Store) compact() error {
	done, err := s.use()
	if err != nil {
		return err
	}
	defer done()
	// Dropped records are spread over the keys: the whole keyspace.
	if err := s.db.Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
		return fmt.Errorf("history: compact: %w", err)
	}
	return nil
}
