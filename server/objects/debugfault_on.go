//go:build objwatch_debugfault

package objects

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/objwatch/objwatch/storage/watchcache"
)

// debugFault is the armed test fault of a service; its methods are safe
// for concurrent use.
type debugFault struct {
	name    string
	dropped atomic.Bool // FaultDropEventAfterRestart: the one event was dropped
}

func newDebugFault(name string) (*debugFault, error) {
	switch name {
	case "":
		return nil, nil
	case FaultDropEventAfterRestart, FaultDropRestOfRevision:
		return &debugFault{name: name}, nil
	}
	return nil, fmt.Errorf("objects: unknown debug fault %q", name)
}

// wrap returns src, or a source that drops the fault's events when req
// and wr are a watch it breaks.
func (f *debugFault) wrap(src Source, req *Request, wr watchRequest) Source {
	if f == nil || wr.rv == 0 || req.Resource.Plural != "configmaps" || req.Resource.Group != "" {
		return src
	}
	if f.name == FaultDropRestOfRevision {
		return &revisionFaultSource{Source: src}
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

// revisionFaultSource drops every event of a revision after its first.
// It belongs to the watch's goroutine.
type revisionFaultSource struct {
	Source
	last int64 // the revision of the last event sent
}

func (s *revisionFaultSource) TryNext() (Item, bool) {
	for {
		it, ok := s.Source.TryNext()
		if !ok || it.Type == watchcache.Bookmark {
			return it, ok
		}
		rev := itemRev(it)
		if rev != 0 && rev == s.last {
			continue
		}
		s.last = rev
		return it, ok
	}
}

// itemRev is an event's resourceVersion, from whichever form it has (0 if
// none).
func itemRev(it Item) int64 {
	var rv string
	switch {
	case it.Object != nil:
		rv = it.Object.GetResourceVersion()
	case it.JSON != nil:
		var o struct {
			Metadata struct {
				RV string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if json.Unmarshal(it.JSON, &o) == nil {
			rv = o.Metadata.RV
		}
	case it.Frame != nil:
		var e struct {
			Object struct {
				Metadata struct {
					RV string `json:"resourceVersion"`
				} `json:"metadata"`
			} `json:"object"`
		}
		if json.Unmarshal(it.Frame, &e) == nil {
			rv = e.Object.Metadata.RV
		}
	}
	n, _ := strconv.ParseInt(rv, 10, 64)
	return n
}
