package informer

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is exponential backoff with jitter: each delay is drawn from
// [d/2, d] where d doubles from base up to max. Not safe for concurrent use.
type backoff struct {
	base, max time.Duration
	cur       time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.base
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur/2 + rand.N(b.cur/2+1)
}

func (b *backoff) reset() { b.cur = 0 }

// sleep waits for the next delay or until ctx ends.
func (b *backoff) sleep(ctx context.Context) error {
	t := time.NewTimer(b.next())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
