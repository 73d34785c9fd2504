package objects

import (
	"context"

	"github.com/objwatch/objwatch/server/registry"
	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// Probe reaches into a running service for tests: switches and holds that
// production code never uses. Each acts on its own service only.
type Probe struct{ s *Service }

// Probe returns the service's test probe.
func (s *Service) Probe() Probe { return Probe{s} }

// SetUpdateGuesses turns update guesses on or off until restore.
func (p Probe) SetUpdateGuesses(on bool) (restore func()) {
	was := !p.s.hooks.guessesOff.Swap(!on)
	return func() { p.s.hooks.guessesOff.Store(!was) }
}

// ResetUpdateGuessKeys forgets every key's last write and pause.
func (p Probe) ResetUpdateGuessKeys() {
	p.s.guessKeys.mu.Lock()
	defer p.s.guessKeys.mu.Unlock()
	clear(p.s.guessKeys.m)
}

// FreezeUpdateGuess makes update guesses of one object see the watch
// cache's copy as of now (none if the cache has none), as if the cache had
// stopped there, until unfreeze. It panics if res has no cache.
func (p Probe) FreezeUpdateGuess(res *registry.Resource, namespace, name string) (unfreeze func()) {
	c := p.s.existingCache(res)
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
	p.s.hooks.guessOverride.Store(&f)
	return func() { p.s.hooks.guessOverride.Store(nil) }
}

// HoldUpdateTurn takes an object's update turn as an update of it would,
// as if that update had stored stored; updates of the object queue behind
// it until release. waiters is the number of updates queued.
func (p Probe) HoldUpdateTurn(res *registry.Resource, namespace, name string, stored storage.KeyValue) (waiters func() int, release func()) {
	turn, err := p.s.keyLocks.lock(context.Background(), res.Key(namespace, name))
	if err != nil {
		panic(err)
	}
	turn.wrote(stored)
	waiters = func() int {
		p.s.keyLocks.mu.Lock()
		defer p.s.keyLocks.mu.Unlock()
		return turn.l.refs - 1
	}
	return waiters, turn.unlock
}
