package objects

import (
	"context"
	"sync"

	"github.com/objwatch/objwatch/storage"
)

// keyLocks serializes this server's read-modify-write cycles on one
// storage key. Concurrent updates of one object would otherwise mostly
// conflict in etcd and retry, each retry costing a read, the mutation, a
// validation and a failed transaction (with 16 patches in flight on one
// object, most of the server's write CPU). Servers sharing the etcd still
// race through optimistic concurrency, which stays the guarantee: this only
// saves work. Safe for concurrent use; the zero value is not usable.
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	held chan struct{} // capacity 1: holding the lock is having sent
	refs int           // holders and waiters; guarded by keyLocks.mu
	// last is what the previous holder wrote (the stored value and its
	// revision), when it wrote; only the holder touches it. It lives as
	// long as updates of the key queue behind each other.
	last storage.KeyValue
}

// keyTurn is a held key lock.
type keyTurn struct {
	k   *keyLocks
	key string
	l   *keyLock
}

func newKeyLocks() *keyLocks { return &keyLocks{locks: map[string]*keyLock{}} }

// lock waits for key's lock or for ctx to end. On success the caller must
// call the turn's unlock exactly once.
func (k *keyLocks) lock(ctx context.Context, key string) (*keyTurn, error) {
	k.mu.Lock()
	l := k.locks[key]
	if l == nil {
		l = &keyLock{held: make(chan struct{}, 1)}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	select {
	case l.held <- struct{}{}:
		return &keyTurn{k, key, l}, nil
	case <-ctx.Done():
		k.release(key, l)
		return nil, ctx.Err()
	}
}

// release drops one reference to l, forgetting it with the last.
func (k *keyLocks) release(key string, l *keyLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l.refs--; l.refs == 0 {
		delete(k.locks, key)
	}
}

// unlock ends the turn.
func (t *keyTurn) unlock() { <-t.l.held; t.k.release(t.key, t.l) }

// takeLast returns what the previous holder wrote, if it wrote (ok), and
// forgets it: a turn that does not write leaves nothing for the next.
func (t *keyTurn) takeLast() (kv storage.KeyValue, ok bool) {
	kv, t.l.last = t.l.last, storage.KeyValue{}
	return kv, kv.ModRevision > 0
}

// wrote records what this turn stored, for the next holder.
func (t *keyTurn) wrote(kv storage.KeyValue) { t.l.last = kv }
