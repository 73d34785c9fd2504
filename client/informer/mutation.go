package informer

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/objwatch/objwatch/client"
)

// detector is the cache mutation detector: it keeps the JSON of every
// cached object and reports objects whose JSON changed while cached (some
// reader modified a shared object). Objects leaving the cache are checked
// once more at the next check, so a handler modifying the old object of an
// update is caught too. For tests only: it doubles the cache's memory.
type detector struct {
	mu      sync.Mutex
	cached  map[any][]byte // object pointer → JSON when cached
	retired map[any][]byte
	report  func(error)
}

func newDetector(report func(error)) *detector {
	if report == nil {
		report = func(err error) { panic(err) }
	}
	return &detector{cached: map[any][]byte{}, retired: map[any][]byte{}, report: report}
}

func (d *detector) add(obj client.Object) {
	b, err := json.Marshal(obj)
	if err != nil {
		return
	}
	d.mu.Lock()
	d.cached[obj] = b
	d.mu.Unlock()
}

func (d *detector) retire(obj client.Object) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b, ok := d.cached[obj]; ok {
		delete(d.cached, obj)
		d.retired[obj] = b
	}
}

// check compares every kept object with its JSON, reports and returns the
// mutations found, and forgets retired objects.
func (d *detector) check() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for _, m := range []map[any][]byte{d.cached, d.retired} {
		for o, want := range m {
			obj := o.(client.Object)
			got, err := json.Marshal(obj)
			if err == nil && string(got) != string(want) {
				errs = append(errs, fmt.Errorf("cached object %s (resourceVersion %s) was modified:\nwas: %s\nnow: %s",
					KeyOf(obj), obj.GetResourceVersion(), want, got))
			}
		}
	}
	clear(d.retired)
	err := errors.Join(errs...)
	if err != nil {
		d.report(err)
	}
	return err
}
