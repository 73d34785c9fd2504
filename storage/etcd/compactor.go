package etcd

import (
	"context"
	"log/slog"
	"time"
)

// RunCompactor compacts etcd's history every interval until ctx ends. Each
// run compacts to the revision observed at the previous run, so at least one
// interval of history is always kept for watches to resume from, and never
// past floor() when floor is set and says more than 0 (the history store's
// last recorded revision: what it has not read yet stays in etcd). Several
// servers may run it against one cluster: compaction is idempotent.
// It blocks; the caller owns the goroutine it runs in.
func (s *Store) RunCompactor(ctx context.Context, interval time.Duration, log *slog.Logger, floor func() int64) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		target := last
		if floor != nil {
			if f := floor(); f > 0 {
				target = min(target, f)
			}
		}
		if target > 0 {
			if err := s.Compact(ctx, target); err != nil && ctx.Err() == nil {
				log.Warn("compaction failed", "revision", target, "err", err)
			} else if err == nil {
				log.Debug("compacted", "revision", target)
			}
		}
		rev, err := s.Revision(ctx)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("compaction: read revision", "err", err)
			}
			continue
		}
		last = rev
	}
}
