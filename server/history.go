package server

import (
	"context"
	"errors"
	"time"

	"github.com/objwatch/objwatch/server/history"
)

// openHistory opens the history store of Config.History. A store that
// fails its checks is reported (in the log, and to history reads) and the
// server runs without one, serving the present; any other failure to open
// it is an error.
func (s *Server) openHistory() error {
	hc := s.cfg.History
	if hc.Dir == "" {
		return nil
	}
	hs, err := history.Open(hc.Dir, history.Options{Retention: hc.Retention, MaxSize: hc.MaxSize, ValueCache: int(hc.ValueCache), Log: s.cfg.Log})
	if errors.Is(err, history.ErrCorrupt) {
		s.historyErr = err
		s.cfg.Log.Error("history: the store is damaged; serving without history (move it aside to start a new one)", "dir", hc.Dir, "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	s.history = hs
	// In process only without overrides: the recorder follows the main
	// cluster, and another cluster's revisions are not its.
	if hc.LocalAuthors && !hc.WriteAuthorNotes && len(s.cfg.StorageOverrides) == 0 {
		s.authors = history.NewAuthors()
	}
	return nil
}

// recordHistory checks every block of the store, then records etcd's
// changes into it until ctx ends. A damaged store (history.Store.Damaged)
// records nothing more and answers reads with history.ErrCorrupt.
func (s *Server) recordHistory(ctx context.Context) {
	if err := s.history.Verify(); err != nil {
		if errors.Is(err, history.ErrCorrupt) {
			s.cfg.Log.Error("history: the store is damaged; serving without history (move it aside to start a new one)", "dir", s.cfg.History.Dir, "err", err)
		}
		return
	}
	rec := &history.Recorder{Store: s.history, Source: s.rawStore, Log: s.cfg.Log, Authors: s.authors}
	rec.Run(ctx)
}

// CompactionFloor is the newest revision etcd may be compacted to without
// losing what the history store has not durably recorded yet (0: no
// bound).
//
// A store that records nothing more holds etcd back no longer: a damaged
// one, or one whose disk has been full (history.ErrDiskFull) for
// historyStallLimit. Etcd must not fill up for its sake; the revisions it
// then misses become a gap once it records again.
func (s *Server) CompactionFloor() int64 {
	switch {
	case s.history == nil:
		return 0
	case !s.history.HoldsCompaction(historyStallLimit):
		if s.floorLifted.CompareAndSwap(false, true) {
			s.cfg.Log.Error("history: the store records nothing (damaged, or its disk full for too long); etcd is compacted without it, and what it misses will be a gap", "limit", historyStallLimit)
		}
		return 0
	}
	s.floorLifted.Store(false)
	return max(1, s.history.Durable()) // 0 would mean no bound
}

// historyStallLimit is how long a history store that cannot record may
// hold etcd's compaction back.
const historyStallLimit = 10 * time.Minute
