package objects

import (
	"context"
	"slices"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// What the tests of package objects_test reach into: switches and holds
// on one running service that production code never uses.

// SetUpdateGuesses turns s's update guesses on or off until restore.
func SetUpdateGuesses(s *Service, on bool) (restore func()) {
	was := !s.guesses.off.Swap(!on)
	return func() { s.guesses.off.Store(!was) }
}

// ResetUpdateGuessKeys forgets every key's last write and pause.
func ResetUpdateGuessKeys(s *Service) {
	s.guesses.keys.mu.Lock()
	defer s.guesses.keys.mu.Unlock()
	clear(s.guesses.keys.m)
}

// FreezeUpdateGuess makes update guesses of one object see the watch
// cache's copy as of now (none if the cache has none), as if the cache had
// stopped there, until unfreeze. It panics if res has no cache.
func FreezeUpdateGuess(s *Service, res *registry.Resource, namespace, name string) (unfreeze func()) {
	c := s.caches.existing(res)
	if c == nil {
		panic("FreezeUpdateGuess: no watch cache for " + res.GVR().String())
	}
	key := res.Key(namespace, name)
	frozen, _, had := c.Get(key)
	f := func(k string, o *watchcache.Object, ok bool) (*watchcache.Object, bool) {
		if k == key {
			return frozen, had
		}
		return o, ok
	}
	s.guesses.override.Store(&f)
	return func() { s.guesses.override.Store(nil) }
}

// HoldUpdateTurn takes an object's update turn as an update of it would,
// as if that update had stored stored; updates of the object queue behind
// it until release. waiters is the number of updates queued.
func HoldUpdateTurn(s *Service, res *registry.Resource, namespace, name string, stored storage.KeyValue) (waiters func() int, release func()) {
	turn, err := s.keyLocks.lock(context.Background(), res.Key(namespace, name))
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

// CacheStarted reports whether res's watch cache runs, without starting it.
func CacheStarted(s *Service, res *registry.Resource) bool { return s.caches.existing(res) != nil }

// SetCachedForm makes the watch caches started from now on fingerprint
// their saved states with form instead of CachedForm, as a binary whose
// decoding changed would, until restore.
func SetCachedForm(form int) (restore func()) {
	was := cachedForm.Swap(int64(form))
	return func() { cachedForm.Store(was) }
}

// DecodeForCache decodes kv as res's watch cache does a value it has no
// write hint for.
func DecodeForCache(res *registry.Resource, kv storage.KeyValue) (*watchcache.Object, error) {
	return decodeForCache(res, false)(kv)
}

// CachedDecodeModules are the modules whose versions the saved states'
// fingerprints hold.
func CachedDecodeModules() []string { return slices.Clone(cachedDecodeModules) }
