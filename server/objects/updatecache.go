package objects

// Optimistic updates from the watch cache.
//
// An update (or patch) reads the object, applies its change and writes the
// result conditionally on the revision it read. Like kube-apiserver's
// GuaranteedUpdate, the first attempt takes the object from the resource's
// watch cache instead of reading it from etcd: a guess, which saves a round
// trip whenever it is right. The write stays conditional on the guess's
// revision, so a wrong guess cannot be written over: it fails with a
// conflict and the update starts again from a quorum read.
//
// Everything an update would answer without a successful write is decided
// on etcd's state, never on a guess (kube-apiserver's origStateIsCurrent):
// an error from the mutation (a resourceVersion or UID precondition, a
// failed JSON patch test, a malformed patch result), from defaulting or
// validation, and "nothing changed" (no write) are re-checked by starting
// again from a quorum read. An object missing from the cache is read from
// etcd. Dry runs never guess.
//
// The guess is exact: the cache decodes each stored value with
// fromStorage for the same *registry.Resource, as storeReader.get does, and
// keeps it encoded (decodeForCache, or a write hint that tests check
// against it); decoding that JSON gives back storeReader.get's object. Custom
// resources stored in another version are no exception: the cache of the
// requested version converts them exactly as storeReader.get does. But the
// cache of a version other than the storage version holds another form
// than an update writes, so it cannot tell an update that changes nothing:
// those updates guess only from this server's last write (its stored
// bytes), never from the cache.
//
// A guess is only taken from a cache that exists (none is started for it)
// and has finished its initial list. After this server wrote a key, its
// next guess for the key waits (briefly) for the cache to have that write:
// sequential updates of one object through one server then guess right
// instead of conflicting. A key whose guess turned out stale, or whose
// cache did not catch up in time, is read from etcd for a while: another
// writer is ahead of the cache there.

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

const (
	// guessWait bounds how long a guess waits for the cache to have this
	// server's last write of the key.
	guessWait = 50 * time.Millisecond
	// guessPause is how long a key is read from etcd after a stale guess
	// or a cache that did not catch up.
	guessPause = time.Second
	// maxGuessKeys bounds the keys remembered (see guessKeyMap); forgetting
	// one only costs a stale guess or an etcd read.
	maxGuessKeys = 4096
)

// guesses are a Service's update guesses: where they come from (the
// caches, or this server's last write of a key), which keys they pause
// for, and how they fared. Safe for concurrent use.
type guesses struct {
	caches  *Caches
	store   storage.Interface // for Config.Verify's comparisons with etcd
	verify  bool              // Config.Verify
	noCache bool              // Config.DisableWatchCache
	keys    *guessKeyMap

	// off makes every update read etcd, and override replaces what the
	// cache returned for a key (to hold a guess stale): switches only
	// tests flip (export_test.go).
	off      atomic.Bool
	override atomic.Pointer[func(key string, o *watchcache.Object, ok bool) (*watchcache.Object, bool)]

	used, stale, rechecked, fromLastWrite atomic.Int64 // see Counts
}

// updateGuess is an update attempt's starting point taken from the watch
// cache, not confirmed by etcd.
type updateGuess struct {
	gs  *guesses
	obj *watchcache.Object // the guessed state (JSON unset when stored is set)
	// stored is the guessed state's stored value when the guess is this
	// server's own last write of the key; nil for a cache guess.
	stored []byte
	// recheck: the attempt was abandoned to be redone from etcd.
	recheck bool
}

// updateState returns the state an update attempt starts from: on the
// first attempt the watch cache's copy when it may stand in for etcd's (g
// is then set), otherwise a quorum read. g is the previous attempt's guess
// on entry.
// last is what this server's previous update of the key stored, if that
// update came right before this one (see keyTurn.takeLast): the best guess.
// known, when set, is etcd's current state as a failed conditional write
// read it in its transaction: as good as a quorum read.
func (s *Service) updateState(ctx context.Context, req *Request, opts WriteOptions, retry *conflictRetry, last storage.KeyValue, g **updateGuess) (*unstructured.Unstructured, storage.KeyValue, error) {
	prev := *g
	*g = nil
	res := req.Resource
	if known := retry.next(); known != nil {
		return s.current(ctx, res, req.Namespace, req.Name, known)
	}
	if retry.first() && !opts.DryRun {
		if ng, cur := s.guesses.guess(ctx, res, res.Key(req.Namespace, req.Name), last); ng != nil {
			*g = ng
			return cur, storage.KeyValue{Key: ng.obj.Key, ModRevision: ng.obj.Rev}, nil
		}
	}
	cur, kv, err := s.etcd.get(ctx, res, req.Namespace, req.Name)
	if prev != nil && prev.recheck && (err != nil || kv.ModRevision != prev.obj.Rev) {
		s.guesses.stale.Add(1)
	}
	return cur, kv, err
}

// guess returns a guess of key's current state, decoded: what the
// previous update through this server stored (last, when set), else the
// cache's copy, if there is one to guess from.
func (gs *guesses) guess(ctx context.Context, res *registry.Resource, key string, last storage.KeyValue) (*updateGuess, *unstructured.Unstructured) {
	if gs.off.Load() {
		return nil, nil
	}
	if last.ModRevision > 0 {
		// Exactly what storeReader.get would return had nobody written since:
		// the stored value itself, decoded the same way. No waiting for
		// the cache to have it.
		if objs, err := decodeStored(ctx, res, []storage.KeyValue{last}); err == nil {
			cur := objs[0]
			if gs.verify {
				gs.check(ctx, res, &watchcache.Object{Key: key, Rev: last.ModRevision}, cur)
			}
			gs.used.Add(1)
			gs.fromLastWrite.Add(1)
			return &updateGuess{gs: gs, obj: &watchcache.Object{Key: key, Rev: last.ModRevision}, stored: last.Value}, cur
		}
	}
	c := gs.caches.existing(res)
	if c == nil || !c.Ready() || res.StoredAs != nil || convertsOnWrite(res) {
		// A cache holding another form than the stored one cannot tell
		// whether an update changes nothing (see unchanged).
		return nil, nil
	}
	written, paused := gs.keys.get(c, key)
	if paused {
		return nil, nil
	}
	if written > 0 && c.Revision() < written {
		wctx, cancel := context.WithTimeout(ctx, guessWait)
		err := c.WaitFor(wctx, written)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				gs.keys.pause(key)
			}
			return nil, nil
		}
	}
	o, _, ok := c.Get(key)
	if f := gs.override.Load(); f != nil {
		o, ok = (*f)(key, o, ok)
	}
	if !ok {
		return nil, nil
	}
	cur, err := Decode(o.JSON)
	if err != nil {
		return nil, nil
	}
	if gs.verify {
		gs.check(ctx, res, o, cur)
	}
	gs.used.Add(1)
	return &updateGuess{gs: gs, obj: o}, cur
}

// retry abandons a guessed attempt whose answer would not be a successful
// write, to redo it from etcd. It is false when the attempt did not guess:
// its answer stands.
func (g *updateGuess) retry() bool {
	if g == nil {
		return false
	}
	g.gs.rechecked.Add(1)
	g.recheck = true
	return true
}

// conflicted abandons a guessed attempt whose conditional write found a
// newer revision in etcd, to redo it from etcd whatever its preconditions.
func (g *updateGuess) conflicted() bool {
	if g == nil {
		return false
	}
	g.gs.stale.Add(1)
	g.gs.keys.pause(g.obj.Key)
	return true
}

// unchanged reports whether b, the encoding of an update's result, may be
// what is stored: then the update would answer without writing, which
// only etcd's value can decide. The cache holds the stored object with its
// resourceVersion, encoded as toStorage encodes b with one.
func (g *updateGuess) unchanged(b []byte) bool {
	if g == nil {
		return false
	}
	if g.stored != nil {
		return bytes.Equal(b, g.stored)
	}
	withRV := withResourceVersion(b, g.obj.Rev)
	if withRV == nil || bytes.Equal(withRV, g.obj.JSON) {
		return true
	}
	if g.gs.verify {
		kv, err := g.gs.store.Get(context.Background(), g.obj.Key)
		if err == nil && kv.ModRevision == g.obj.Rev && bytes.Equal(kv.Value, b) {
			panic(fmt.Sprintf("update guess: %s at %d is stored unchanged but its guess differs:\nstored %s\nguess  %s", g.obj.Key, kv.ModRevision, kv.Value, g.obj.JSON))
		}
	}
	return false
}

// check panics if the guess cur for o differs from a quorum read's
// object at the same revision (Config.Verify).
func (gs *guesses) check(ctx context.Context, res *registry.Resource, o *watchcache.Object, cur *unstructured.Unstructured) {
	kv, err := gs.store.Get(ctx, o.Key)
	if err != nil || kv.ModRevision != o.Rev {
		return
	}
	want, err := FromStorage(res, kv)
	if err != nil || !reflect.DeepEqual(want.Object, cur.Object) {
		panic(fmt.Sprintf("update guess: %s at %d differs from decoding it (%v):\nstored %s\nguess  %s", o.Key, o.Rev, err, kv.Value, o.JSON))
	}
}

// wrote records that this server wrote key at rev (an update, or the
// deletion completing one), for the key's next guess, through any
// version's cache, to wait for.
func (gs *guesses) wrote(key string, rev int64) {
	if !gs.noCache && !gs.off.Load() {
		gs.keys.wrote(key, rev)
	}
}

// guessKeyMap remembers, per storage key, the server's last write of the
// key and pauses of its guesses (guesses.keys). It is safe for
// concurrent use.
type guessKeyMap struct {
	mu sync.Mutex
	m  map[string]guessKeyState
}

func newGuessKeyMap() *guessKeyMap { return &guessKeyMap{m: map[string]guessKeyState{}} }

type guessKeyState struct {
	written int64     // revision of the server's last write of the key
	at      time.Time // when it was recorded
	paused  time.Time // no guesses until then
}

// get returns the revision c must reach before a guess of key (0 for
// none), and whether guesses of key are paused.
func (m *guessKeyMap) get(c *watchcache.Cache, k string) (written int64, paused bool) {
	rev := c.Revision()
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.m[k]
	switch {
	case !ok:
		return 0, false
	case time.Now().Before(st.paused):
		return 0, true
	case st.written <= rev:
		delete(m.m, k) // nothing left to wait for
		return 0, false
	}
	return st.written, false
}

func (m *guessKeyMap) wrote(key string, rev int64) {
	m.update(key, func(st *guessKeyState, now time.Time) {
		st.written, st.at = max(st.written, rev), now
	})
}

func (m *guessKeyMap) pause(key string) {
	m.update(key, func(st *guessKeyState, now time.Time) { st.paused = now.Add(guessPause) })
}

func (m *guessKeyMap) update(k string, f func(*guessKeyState, time.Time)) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.m) >= maxGuessKeys {
		// Forget what no longer matters: writes a healthy cache has long
		// had (a cache lagging more would pause the key) and ended pauses.
		for k, st := range m.m {
			if now.Sub(st.at) > guessPause && now.After(st.paused) {
				delete(m.m, k)
			}
		}
		if len(m.m) >= maxGuessKeys/2 {
			clear(m.m)
		}
	}
	st := m.m[k]
	f(&st, now)
	m.m[k] = st
}
