package history

import (
	"context"
	"sync"
	"time"

	"github.com/objwatch/objwatch/storage"
)

// Authors takes the author notes of its server's own writes in process
// (a storage.NoteTaker, see AuthorNote), for that server's Recorder: etcd
// then holds no note key for them, and a create costs etcd one key less.
// The notes reach the Recorder through memory only, so a server stopped
// (killed) between a write and its record leaves those few revisions
// without an author; and the history stores of other servers on the same
// etcd see no author for them (they need notes in etcd).
//
// A Recorder that finds a revision without a note waits, before it
// records it, while this server is writing one of its keys: the writer
// hands the note over only once etcd has answered, which may be after
// the watch delivered the change.
//
// Safe for concurrent use.
type Authors struct {
	mu      sync.Mutex
	writing map[string]int   // keys being written, by how many writers
	handed  map[int64][]byte // notes by revision, not yet recorded
	waiters int              // recorders waiting in take
	changed chan struct{}    // closed (and replaced) by Written while waiters > 0
	dropped int64            // notes dropped for want of room
	// passed is the last revision the Recorder has recorded: a note of
	// an earlier one (its write answered after the Recorder stopped
	// waiting) is dropped, not kept for ever.
	passed int64
}

// maxHanded bounds the notes kept for a Recorder that does not take them
// (stopped, or far behind): past it new ones are dropped (their
// revisions are recorded without authors).
const maxHanded = 1 << 20

// NewAuthors returns an empty Authors.
func NewAuthors() *Authors {
	return &Authors{writing: map[string]int{}, handed: map[int64][]byte{}, changed: make(chan struct{})}
}

// Note is the note of a change a made at t, handed over to a.
func (a *Authors) Note(au Author, t time.Time) storage.Note {
	n := AuthorNote(au, t)
	n.Taker = a
	return n
}

// Writing records that a write of key has started.
func (a *Authors) Writing(key string) {
	a.mu.Lock()
	a.writing[key]++
	a.mu.Unlock()
}

// Written records the end of a write of key: note is its author note if
// it made revision rev (> 0).
func (a *Authors) Written(key string, rev int64, note []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n := a.writing[key]; n > 1 {
		a.writing[key] = n - 1
	} else {
		delete(a.writing, key)
	}
	if rev > a.passed {
		if len(a.handed) < maxHanded {
			a.handed[rev] = note
		} else {
			a.dropped++
		}
	}
	if a.waiters > 0 {
		close(a.changed)
		a.changed = make(chan struct{})
	}
}

// take returns the note handed over for rev, a revision changing keys:
// while this server is writing one of them and no note for rev has come,
// it waits for the note at most wait.
func (a *Authors) take(ctx context.Context, rev int64, keys []string, wait time.Duration) ([]byte, bool) {
	var deadline <-chan time.Time
	for {
		a.mu.Lock()
		if n, ok := a.handed[rev]; ok {
			delete(a.handed, rev)
			a.mu.Unlock()
			return n, true
		}
		busy := false
		for _, k := range keys {
			if a.writing[k] > 0 {
				busy = true
				break
			}
		}
		if !busy {
			a.mu.Unlock()
			return nil, false
		}
		a.waiters++
		ch := a.changed
		a.mu.Unlock()
		if deadline == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			deadline = t.C
		}
		expired := false
		select {
		case <-ch:
		case <-ctx.Done():
			expired = true
		case <-deadline:
			expired = true
		}
		a.mu.Lock()
		a.waiters--
		if expired {
			n, ok := a.handed[rev]
			delete(a.handed, rev)
			a.mu.Unlock()
			return n, ok
		}
		a.mu.Unlock()
	}
}

// pass records that the Recorder has recorded every revision up to rev.
func (a *Authors) pass(rev int64) {
	a.mu.Lock()
	a.passed = max(a.passed, rev)
	a.mu.Unlock()
}

// forget drops the notes of revisions up to rev, which the Recorder has
// passed without taking them (their events were in a gap).
func (a *Authors) forget(rev int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.passed = max(a.passed, rev)
	for r := range a.handed {
		if r <= rev {
			delete(a.handed, r)
		}
	}
}
