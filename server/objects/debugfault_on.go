//go:build objwatch_debugfault

package objects

import (
	"fmt"
	"sync/atomic"

	"github.com/objwatch/objwatch/storage/watchcache"
)

// debugFault is the armed test fault of a service; its methods are safe
// for concurrent use.
type debugFault struct {
	dropped atomic.Bool // the one event was dropped
}

func newDebugFault(name string) (*debugFault, error) {
	switch name {
	case "":
		return nil, nil
	case FaultDropEventAfterRestart:
		return &debugFault{}, nil
	}
	return nil, fmt.Errorf("objects: unknown debug fault %q", name)
}

// wrap returns src, or a source that drops the fault's event when req and
// wr are the watch it breaks.
func (f *debugFault) wrap(src Source, req *Request, wr watchRequest) Source {
	if f == nil || wr.rv == 0 || req.Resource.Plural != "configmaps" || req.Resource.Group != "" {
		return src
	}
	return &faultSource{Source: src, f: f}
}

// faultSource drops the first MODIFIED event that the fault has not yet
// dropped in this process. It belongs to the watch's goroutine.
type faultSource struct {
	Source
	f *debugFault
}

func (s *faultSource) TryNext() (Item, bool) {
	it, ok := s.Source.TryNext()
	if ok && it.Type == watchcache.Modified && s.f.dropped.CompareAndSwap(false, true) {
		return s.Source.TryNext()
	}
	return it, ok
}
