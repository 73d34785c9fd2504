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
	return s.objects.Caches().For(res)
}

// WriteHintsUsed is how many watch-cache events s built from write hints.
func WriteHintsUsed(s *Server) int64 { return s.objects.Counts().HintsUsed }

// UpdateGuesses returns how many updates through s started from the watch
// cache, how many of those guesses were older than etcd, and how many
// answers had to be re-checked against etcd.
func UpdateGuesses(s *Server) (used, stale, rechecked int64) {
	c := s.objects.Counts()
	return c.GuessesUsed, c.GuessesStale, c.GuessesRechecked
}

// UpdateConflictReads returns how many of s's update and delete attempts
// started from the state a conflicting write returned.
func UpdateConflictReads(s *Server) int64 { return s.objects.Counts().ConflictReads }

// DroppedFramesEncoded is how many watch-cache frames without
// managedFields s encoded.
func DroppedFramesEncoded(s *Server) int64 { return s.objects.Counts().DroppedFrames }

// ShapedFramesEncoded is how many watch-cache frames for watches with
// extensions (projections, patches) s made.
func ShapedFramesEncoded(s *Server) int64 { return s.objects.Counts().ShapedFrames }

// CachedPages is how many lists with a limit, continue token or exact
// resourceVersion s served from its watch cache.
func CachedPages(s *Server) int64 { return s.objects.Counts().CachedPages }

// EncodedFramesMade is how many watch-cache events s encoded in a binary
// watch encoding (each shared by every watch of it).
func EncodedFramesMade(s *Server) int64 { return s.objects.Counts().EncodedFrames }

// ListItemsEncoded is how many list items s's watch caches encoded for
// binary lists (each kept with its object for later lists).
func ListItemsEncoded(s *Server) int64 { return s.objects.Counts().ListItemsEncoded }
