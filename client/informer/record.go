package informer

import (
	"fmt"
	"math"
	"sync"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/recording"
)

// Recorder is a handler that writes every call an informer makes into a
// recording; see Record.
type Recorder[T client.Object] struct {
	*Registration[T]
	w        *recording.Writer
	resource string

	mu  sync.Mutex
	err error // the first write error
}

// Record adds a handler to inf that writes what inf tells its handlers
// into w, whose header must name inf's resource (recording.ResourceName):
// OnAdd as "initial" (initial list) or ADDED, OnUpdate as MODIFIED with
// the new state, OnDelete as DELETED (marked unknown when the informer
// missed the deletion). A 410 Gone is recorded as a "gone" line with the
// resourceVersion the server forgot, and the relist after it as what it
// changed, as the informer's handlers see it: the updates it found and the
// deletions it inferred (not as "relist" and "listed" lines: the handlers
// are not told the relist's unchanged objects). A recording.Player of the result makes the same
// calls, in the same order.
//
// The handler never merges notifications (its bound is unlimited), so a
// slow writer costs memory, not states. Remove it (Registration.Remove)
// and wait for Done before closing w. Err returns the first write error.
func Record[T client.Object](inf *SharedInformer[T], w *recording.Writer) (*Recorder[T], error) {
	r := &Recorder[T]{w: w, resource: recording.ResourceName(inf.Resource().GVR)}
	reg, err := inf.AddHandler(r.handler(), HandlerOptions{Name: "recording", Bound: math.MaxInt32})
	if err != nil {
		return nil, fmt.Errorf("informer %s: recording: %w", inf.Name(), err)
	}
	r.Registration = reg
	return r, nil
}

func (r *Recorder[T]) handler() Handler[T] {
	return HandlerFuncs[T]{
		Add: func(obj T, initial bool) {
			kind := recording.Added
			if initial {
				kind = recording.Initial
			}
			r.note(r.w.Object(kind, r.resource, obj))
		},
		Update: func(_, obj T) { r.note(r.w.Object(recording.Modified, r.resource, obj)) },
		Delete: func(obj T, unknown bool) {
			if unknown {
				r.note(r.w.DeletedUnknown(r.resource, obj))
				return
			}
			r.note(r.w.Object(recording.Deleted, r.resource, obj))
		},
		Gone: func(rv string) { r.note(r.w.Marker(recording.Gone, r.resource, rv)) },
	}
}

func (r *Recorder[T]) note(err error) {
	if err == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// Err returns the first error writing the recording, if any.
func (r *Recorder[T]) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}
