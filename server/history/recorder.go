package history

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/objwatch/objwatch/server/jsonenc"
	"github.com/objwatch/objwatch/storage"
)

// AuthorKey is the etcd key of the author note: the server's storage puts
// who makes each change there, in the change's transaction (storage.Note).
// It is outside the object keyspace (/registry/), so no watch of objects
// sees it; each write overwrites it.
const AuthorKey = "/objwatch/history/author"

// Prefix is the keyspace recorded: every key objwatch writes.
const Prefix = "/"

// The author note's value is noteFormat, the time the server made the
// change (unix nanoseconds, 8 bytes big-endian), then the Author's JSON,
// which the recorder passes to the store as it is: nothing on the way
// from the request to the record decodes or encodes it again. Earlier
// servers wrote a JSON object of the author's fields and "t" (the time);
// decodeNote reads both.
const noteFormat = 1

// AuthorNote is the storage note saying that a made a change at t.
func AuthorNote(a Author, t time.Time) storage.Note {
	b := make([]byte, 0, 64+len(a.User)+len(a.Verb)+len(a.Manager)+len(a.Server)+16*len(a.Groups))
	b = append(b, noteFormat)
	b = binary.BigEndian.AppendUint64(b, uint64(t.UnixNano()))
	return storage.Note{Key: AuthorKey, Value: a.appendJSON(b)}
}

// appendJSON appends a's JSON, byte for byte as encoding/json writes it
// (its field order, omitempty, HTML escaping), without reflection: every
// write of a server with a store makes one.
func (a *Author) appendJSON(b []byte) []byte {
	b = append(b, '{')
	n := 0
	field := func(name, v string) {
		if v == "" {
			return
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = jsonenc.AppendString(b, v)
	}
	field("user", a.User)
	if len(a.Groups) > 0 {
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, `"groups":[`...)
		for i, g := range a.Groups {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.AppendString(b, g)
		}
		b = append(b, ']')
	}
	field("verb", a.Verb)
	field("manager", a.Manager)
	field("server", a.Server)
	return append(b, '}')
}

// decodeNote reads an author note: the time and the author's JSON (which
// aliases v for the current form). ok is false for a value that is no
// note: the change is then recorded without an author.
func decodeNote(v []byte) (t time.Time, authorJS []byte, ok bool) {
	if len(v) >= 9 && v[0] == noteFormat {
		aj := v[9:]
		if len(aj) == 0 || len(aj) > maxRecordAuthor || !json.Valid(aj) || aj[0] != '{' {
			return time.Time{}, nil, false
		}
		return time.Unix(0, int64(binary.BigEndian.Uint64(v[1:9]))), aj, true
	}
	var old struct {
		Author
		Time int64 `json:"t"`
	}
	if len(v) == 0 || v[0] != '{' || json.Unmarshal(v, &old) != nil {
		return time.Time{}, nil, false
	}
	aj, err := json.Marshal(old.Author)
	if err != nil {
		return time.Time{}, nil, false
	}
	return time.Unix(0, old.Time), aj, true
}

// Recorder feeds a Store from etcd: one watch over every key, from the
// last recorded revision, each revision with its author note. Run it in
// one goroutine; it owns the Store's writes while it runs.
type Recorder struct {
	Store *Store
	// Source is the etcd store, without transformers: values are
	// recorded in their form at rest (encrypted ones stay encrypted).
	Source storage.Interface
	Log    *slog.Logger
	// Now is the clock of changes without an author note (default
	// time.Now).
	Now func() time.Time
	// RetainEvery is how often Run applies the retention rules (default
	// 1 min).
	RetainEvery time.Duration
	// Authors, if set, holds the author notes this server's writes
	// handed over in process (their revisions have no note in etcd).
	Authors *Authors

	// The author note of the revision being read.
	noteRev    int64
	noteTime   time.Time
	noteAuthor []byte
}

// syncEvery is how often the recorder makes what it recorded durable.
const syncEvery = time.Second

// maxBatch bounds the events one Append records.
const maxBatch = 2000

// Run records until ctx ends. Without a history it first records every
// key as etcd has it now (the history starts there); after a compaction
// that removed revisions it had not read, it records the gap and etcd's
// state after it.
func (r *Recorder) Run(ctx context.Context) {
	if r.Log == nil {
		r.Log = slog.Default()
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	retain := time.NewTicker(cmp.Or(r.RetainEvery, time.Minute))
	defer retain.Stop()
	syncT := time.NewTicker(syncEvery)
	defer syncT.Stop()
	defer func() {
		if err := r.Store.Sync(); err != nil && !errors.Is(err, ErrClosed) {
			r.Log.Warn("history: sync", "err", err)
		}
	}()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := r.follow(ctx, retain.C, syncT.C)
		if ctx.Err() != nil {
			return
		}
		var ce *storage.CompactedError
		if errors.As(err, &ce) {
			err = r.bridge(ctx, ce.Compacted)
		}
		if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrClosed) {
			r.Log.Error("history: recording stopped", "recorded", r.Store.Recorded(), "err", err)
			return
		}
		if err != nil {
			r.Log.Warn("history: recording", "recorded", r.Store.Recorded(), "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
	}
}

// follow watches from the last recorded revision (again: a revision may
// have been recorded in part) and records until the watch fails.
func (r *Recorder) follow(ctx context.Context, retain, sync <-chan time.Time) error {
	from := r.Store.Recorded()
	if from == 0 {
		rev, err := r.Source.Revision(ctx)
		if err != nil {
			return err
		}
		if err := r.baseline(ctx, rev); err != nil {
			return err
		}
		from = rev
	}
	// Without etcd's previous values: the store keeps each key's last
	// value itself, and etcd reads no old value per event.
	w, err := r.Source.Watch(storage.WithoutPrev(ctx), Prefix, from)
	if err != nil {
		return err
	}
	defer w.Stop()
	var batch []storage.Event
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-retain:
			if err := r.Store.Retain(r.Now()); err != nil {
				r.Log.Warn("history: retention", "err", err)
			}
			continue
		case <-sync:
			if err := r.Store.Sync(); err != nil {
				return err
			}
			continue
		case <-r.Store.Wanted():
			if err := w.RequestProgress(ctx); err != nil {
				r.Log.Debug("history: progress request", "err", err)
			}
			continue
		case ev, ok := <-w.Events():
			if !ok {
				return errors.New("history: watch ended")
			}
			batch = append(batch[:0], ev)
		}
		// Take what else is there, then record it in one batch.
	more:
		for len(batch) < maxBatch {
			select {
			case ev, ok := <-w.Events():
				if !ok {
					break more
				}
				batch = append(batch, ev)
			default:
				break more
			}
		}
		revs, progress, err := r.revisions(batch)
		r.handedNotes(ctx, revs)
		if aerr := r.Store.Append(revs); aerr != nil {
			return aerr
		}
		now := time.Now()
		for _, rv := range revs {
			if rv.Author != nil || rv.AuthorJSON != nil {
				r.Store.lag.Observe(now.Sub(rv.Time).Seconds())
			}
		}
		if progress > 0 {
			if perr := r.Store.Reached(progress); perr != nil {
				return perr
			}
		}
		if err != nil {
			return err
		}
	}
}

// revisions groups events into revisions, each with its author note; an
// error event ends them (returned). progress is the revision of the last
// progress notification (0: none): every change up to it was delivered.
func (r *Recorder) revisions(events []storage.Event) (out []Revision, progress int64, _ error) {
	for _, ev := range events {
		switch ev.Type {
		case storage.Error:
			return out, progress, ev.Err
		case storage.Progress:
			progress = ev.Revision
			continue
		}
		if ev.KV.Key == AuthorKey {
			if ev.Type != storage.Put {
				continue
			}
			if t, aj, ok := decodeNote(ev.KV.Value); ok {
				r.noteRev, r.noteTime, r.noteAuthor = ev.Revision, t, aj
			}
			continue
		}
		if len(out) == 0 || out[len(out)-1].Rev != ev.Revision {
			rv := Revision{Rev: ev.Revision, Time: r.Now()}
			if r.noteRev == ev.Revision {
				rv.AuthorJSON, rv.Time = r.noteAuthor, r.noteTime
			}
			out = append(out, rv)
		}
		c := Change{Key: ev.KV.Key, CreateRevision: ev.KV.CreateRevision}
		if ev.Type == storage.Delete {
			c.Delete = true
		} else {
			c.Value = ev.KV.Value
			if ev.PrevKV != nil {
				c.Prev, c.PrevRevision = ev.PrevKV.Value, ev.PrevKV.ModRevision
			}
		}
		last := &out[len(out)-1]
		last.Changes = append(last.Changes, c)
	}
	return out, progress, nil
}

// handedNotes gives the revisions without a note in etcd the notes
// handed over in process (Authors), waiting for those still on their way.
func (r *Recorder) handedNotes(ctx context.Context, revs []Revision) {
	if r.Authors == nil {
		return
	}
	var keys []string
	for i := range revs {
		rv := &revs[i]
		if rv.AuthorJSON != nil || rv.Author != nil {
			continue
		}
		keys = keys[:0]
		for _, c := range rv.Changes {
			keys = append(keys, c.Key)
		}
		v, ok := r.Authors.take(ctx, rv.Rev, keys, handOffWait)
		if !ok {
			continue
		}
		if t, aj, ok := decodeNote(v); ok {
			rv.AuthorJSON, rv.Time = aj, t
		}
	}
	if len(revs) > 0 {
		r.Authors.pass(revs[len(revs)-1].Rev)
	}
}

// handOffWait bounds the wait for a note handed over in process: a write
// whose etcd answer takes longer is recorded without its author.
const handOffWait = 10 * time.Second

// baseline records etcd's state at rev as the start of the history:
// every key at its own mod revision; reads before rev are not retained.
func (r *Recorder) baseline(ctx context.Context, rev int64) error {
	found, _, err := r.state(ctx, rev)
	if err != nil {
		return err
	}
	if r.Authors != nil {
		r.Authors.forget(rev)
	}
	return r.Store.Start(rev, found)
}

// bridge records a gap: etcd compacted revisions after the last recorded
// one. It reads etcd's state at the compaction revision and records it,
// with deletions of the keys gone since.
func (r *Recorder) bridge(ctx context.Context, compacted int64) error {
	recorded := r.Store.Recorded()
	if compacted <= recorded+1 {
		return nil // nothing was lost: resume
	}
	found, keys, err := r.state(ctx, compacted)
	if err != nil {
		return err
	}
	had, _, err := r.Store.List(Prefix, "", recorded, 0)
	if err != nil && !errors.Is(err, ErrNotRetained) {
		return err
	}
	gone := Revision{Rev: compacted, Time: r.Now()}
	for _, e := range had {
		if !keys[e.Key] {
			gone.Changes = append(gone.Changes, Change{Key: e.Key, Delete: true, InGap: true, CreateRevision: e.CreateRevision})
		}
	}
	if len(gone.Changes) > 0 {
		found = append(found, gone)
	}
	if r.Authors != nil {
		r.Authors.forget(compacted)
	}
	g := Gap{From: recorded + 1, To: compacted - 1, Found: r.Now()}
	r.Log.Warn("history: etcd compacted revisions not yet recorded; keeping the gap", "from", g.From, "to", g.To)
	return r.Store.AddGap(g, found)
}

// state reads every key at rev: revisions of the keys changed after the
// store's last recorded one, at their own mod revisions, in order.
func (r *Recorder) state(ctx context.Context, rev int64) ([]Revision, map[string]bool, error) {
	recorded := r.Store.Recorded()
	byRev := map[int64]*Revision{}
	keys := map[string]bool{}
	start := ""
	for {
		l, err := r.Source.List(ctx, Prefix, storage.ListOptions{Revision: rev, StartKey: start, Limit: 1000})
		if err != nil {
			return nil, nil, fmt.Errorf("history: read etcd at %d: %w", rev, err)
		}
		for _, kv := range l.KVs {
			if kv.Key == AuthorKey {
				continue
			}
			keys[kv.Key] = true
			if kv.ModRevision <= recorded {
				continue
			}
			rv := byRev[kv.ModRevision]
			if rv == nil {
				rv = &Revision{Rev: kv.ModRevision, Time: r.Now()}
				byRev[kv.ModRevision] = rv
			}
			rv.Changes = append(rv.Changes, Change{Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision})
		}
		if !l.More || len(l.KVs) == 0 {
			break
		}
		start = l.KVs[len(l.KVs)-1].Key + "\x00"
	}
	out := make([]Revision, 0, len(byRev))
	for _, rv := range byRev {
		out = append(out, *rv)
	}
	sortRevisions(out)
	return out, keys, nil
}
