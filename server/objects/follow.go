package objects

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/internalversion"

	"github.com/objwatch/objwatch/server/registry"
)

// Follow keeps a view of res current for the server itself (no user):
// a watch with its initial events, ending in an InitialEnd bookmark,
// started again from a fresh list after every failure (backoff from
// 100 ms to 5 s, logged) and every timeout, until ctx ends. begin is
// called before each watch's first item, each on every item (bookmarks
// included) in order; an error from each restarts the watch. The RBAC
// index, the admission webhook configurations and the admission policies
// are fed this way. It
// blocks, calling begin and each from its own goroutine only.
func (s *Service) Follow(ctx context.Context, res *registry.Resource, timeout time.Duration, begin func(), each func(Item) error) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.followOnce(ctx, res, timeout, begin, each)
		if ctx.Err() != nil {
			return
		}
		s.cfg.Log.Warn("watch of "+res.Plural+" for the server ended; listing again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (s *Service) followOnce(ctx context.Context, res *registry.Resource, timeout time.Duration, begin func(), each func(Item) error) error {
	yes := true
	opts := WatchOptions{
		List:    &internalversion.ListOptions{Watch: true, AllowWatchBookmarks: true, SendInitialEvents: &yes},
		Timeout: timeout, Decoded: true,
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	src, err := s.Watch(wctx, &Request{Verb: "watch", Resource: res}, opts)
	if err != nil || src == nil {
		return err
	}
	defer src.Stop()
	begin()
	for {
		it, ok := src.TryNext()
		if !ok {
			if err := src.Wait(wctx, nil); err != nil {
				if wctx.Err() != nil && ctx.Err() == nil {
					return errors.New("watch timed out")
				}
				return err
			}
			continue
		}
		if err := each(it); err != nil {
			return err
		}
	}
}
