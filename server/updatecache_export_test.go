package server

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// UpdateGuesses returns how many updates through s started from the watch
// cache, how many of those guesses were older than etcd, and how many
// answers had to be re-checked against etcd.
func UpdateGuesses(s *Server) (used, stale, rechecked int64) {
	return s.counts.used.Load(), s.counts.stale.Load(), s.counts.rechecked.Load()
}

// SetUpdateGuesses turns s's update guesses on or off until restore.
func SetUpdateGuesses(s *Server, on bool) (restore func()) {
	was := !s.hooks.guessesOff.Swap(!on)
	return func() { s.hooks.guessesOff.Store(!was) }
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
	s.hooks.guessOverride.Store(&f)
	return func() { s.hooks.guessOverride.Store(nil) }
}

// UpdateGuessesFromLastWrite returns how many of s's update guesses were
// its previous write of the key rather than the cache's copy.
func UpdateGuessesFromLastWrite(s *Server) int64 { return s.counts.fromLastWrite.Load() }

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

// UpdateConflictReads returns how many of s's update and delete attempts
// started from the state a conflicting write returned.
func UpdateConflictReads(s *Server) int64 { return s.counts.conflictReads.Load() }
