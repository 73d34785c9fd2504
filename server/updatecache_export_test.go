package server

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// Every server test checks each update guess against a quorum read of the
// same revision, and each write decided on a guess against the stored value
// (see verifyGuesses).
func init() { verifyGuesses.Store(true) }

// UpdateGuesses returns how many updates in this process (all servers)
// started from the watch cache, how many of those guesses were older than
// etcd, and how many answers had to be re-checked against etcd.
func UpdateGuesses() (used, stale, rechecked int64) {
	return guessesUsed.Load(), guessesStale.Load(), guessesRechecked.Load()
}

// SetUpdateGuesses turns update guesses on or off until restore.
func SetUpdateGuesses(on bool) (restore func()) {
	was := !updateGuessesOff.Swap(!on)
	return func() { updateGuessesOff.Store(!was) }
}

// SetVerify turns the test checks of write hints and update guesses on or
// off until restore (benchmarks measure without them).
func SetVerify(on bool) (restore func()) {
	hints, guesses := verifyHints.Swap(on), verifyGuesses.Swap(on)
	return func() { verifyHints.Store(hints); verifyGuesses.Store(guesses) }
}

// ResetUpdateGuessKeys forgets every key's last write and pause in s.
func ResetUpdateGuessKeys(s *Server) {
	s.guessKeys.mu.Lock()
	defer s.guessKeys.mu.Unlock()
	clear(s.guessKeys.m)
}

// FreezeUpdateGuess makes update guesses of one object see the watch
// cache's copy as of now (none if the cache has none), as if the cache had
// stopped there, until unfreeze.
func FreezeUpdateGuess(s *Server, gvr schema.GroupVersionResource, namespace, name string) (unfreeze func()) {
	res, ok := s.registry.Get(gvr)
	if !ok {
		panic("FreezeUpdateGuess: not served: " + gvr.String())
	}
	c := s.existingCache(res)
	if c == nil {
		panic("FreezeUpdateGuess: no watch cache for " + gvr.String())
	}
	key := res.Key(namespace, name)
	frozen, _, had := c.Get(key)
	f := func(k string, o *watchcache.Object, ok bool) (*watchcache.Object, bool) {
		if k == key {
			return frozen, had
		}
		return o, ok
	}
	guessOverride.Store(&f)
	return func() { guessOverride.Store(nil) }
}

// UpdateGuessesFromLastWrite returns how many update guesses were this
// server's previous write of the key rather than the cache's copy.
func UpdateGuessesFromLastWrite() int64 { return guessesFromLastWrite.Load() }

// HoldUpdateTurn takes an object's update turn as an update of it would,
// as if that update had stored stored; updates of the object queue behind
// it until release. waiters is the number of updates queued.
func HoldUpdateTurn(s *Server, gvr schema.GroupVersionResource, namespace, name string, stored storage.KeyValue) (waiters func() int, release func()) {
	res, ok := s.registry.Get(gvr)
	if !ok {
		panic("HoldUpdateTurn: not served: " + gvr.String())
	}
	key := res.Key(namespace, name)
	turn, err := s.keyLocks.lock(context.Background(), key)
	if err != nil {
		panic(err)
	}
	turn.wrote(stored)
	waiters = func() int {
		s.keyLocks.mu.Lock()
		defer s.keyLocks.mu.Unlock()
		return turn.l.refs - 1
	}
	return waiters, turn.unlock
}

// UpdateConflictReads returns how many update attempts started from the
// state a conflicting write returned.
func UpdateConflictReads() int64 { return conflictReads.Load() }
