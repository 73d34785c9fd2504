package objects

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/internalversion"

	"github.com/objwatch/objwatch/server/registry"
)

// Follow keeps a view of res current for the server itself (no user):
// a watch with its initial events, ending in an InitialEnd bookmark; when
// the watch times out (after timeout) it is resumed from the last
// revision it delivered, without a new list; after any failure (and an
// error from each) it starts again from a fresh list (backoff from 100 ms
// to 5 s, logged), until ctx ends. begin is called before each fresh
// list's first item, each on every item (bookmarks included) in order.
// The RBAC index, the admission webhook configurations and the admission
// policies are fed this way. It blocks, calling begin and each from its
// own goroutine only.
func (s *Service) Follow(ctx context.Context, res *registry.Resource, timeout time.Duration, begin func(), each func(Item) error) {
	backoff := 100 * time.Millisecond
	rv := "" // where a resumed watch starts; "": a fresh list
	for ctx.Err() == nil {
		next, err := followOnce(ctx, s, res, timeout, rv, begin, each)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errFollowTimedOut) && next != "" {
			rv, backoff = next, 100*time.Millisecond
			continue
		}
		rv = ""
		s.cfg.Log.Warn("watch of "+res.Plural+" for the server ended; listing again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

var errFollowTimedOut = errors.New("watch timed out")

// followOnce runs one watch of s's Follow, from a fresh list (rv "") or
// resumed after rv. It returns where a resumed watch would start: the
// last revision delivered after the initial events ("" if they did not
// end).
func followOnce(ctx context.Context, s *Service, res *registry.Resource, timeout time.Duration, rv string, begin func(), each func(Item) error) (next string, err error) {
	list := &internalversion.ListOptions{Watch: true, AllowWatchBookmarks: true, ResourceVersion: rv}
	if rv == "" {
		yes := true
		list.SendInitialEvents = &yes
	}
	opts := WatchOptions{List: list, Timeout: timeout, Decoded: true}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	src, err := s.Watch(wctx, &Request{Verb: "watch", Resource: res}, opts)
	if err != nil || src == nil {
		return "", err
	}
	defer src.Stop()
	next = rv
	if rv == "" {
		begin()
	}
	for {
		it, ok := src.TryNext()
		if !ok {
			if err := src.Wait(wctx, nil); err != nil {
				if wctx.Err() != nil && ctx.Err() == nil {
					return next, errFollowTimedOut
				}
				return next, err
			}
			continue
		}
		if err := each(it); err != nil {
			return "", err
		}
		switch {
		case it.Type == Bookmark && (it.InitialEnd || next != ""):
			next = strconv.FormatInt(it.Rev, 10)
		case next != "": // an event after the initial ones
			next = itemRV(it)
		}
	}
}

// itemRV is an event's resourceVersion.
func itemRV(it Item) string {
	if it.Object != nil {
		return it.Object.GetResourceVersion()
	}
	var m struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	json.Unmarshal(it.JSON, &m)
	return m.Metadata.ResourceVersion
}
