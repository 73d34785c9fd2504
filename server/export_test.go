package server

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/objwatch/objwatch/storage/watchcache"
)

// WatchCache returns the watch cache serving gvr (nil if none), so that
// tests can wait on its revision and count its watchers.
func WatchCache(s *Server, gvr schema.GroupVersionResource) *watchcache.Cache {
	res, ok := s.registry.Get(gvr)
	if !ok {
		return nil
	}
	return s.cacheFor(res)
}

// WriteHintsUsed is how many watch-cache events s built from write hints.
func WriteHintsUsed(s *Server) int64 { return s.hintsUsed.Load() }
