package change

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/objwatch/objwatch/client"
	"github.com/objwatch/objwatch/client/informer"
)

// DedupHandler wraps an objwatch informer handler so that it sees each
// object's content once: an update whose content (as d fingerprints it)
// was already delivered for the object's key is dropped — a PATCH and an
// UPDATE that produce the same content, a relist bringing back a state
// with nothing new, a resync.
//
// Adds and deletes are always delivered, so the handler's idea of which
// objects exist stays exact: an add records the object's content, a
// delete forgets it (a re-created object is new). An update the handler
// gets has old as the informer had it, which may be a state the handler
// was not shown, but whose content equals the last one it was shown.
//
// d must serve this handler only (it remembers what this handler saw). The
// wrapper adds no concurrency: it runs on the handler's goroutine.
func DedupHandler[T client.Object](h informer.Handler[T], d *Dedup[informer.Key]) informer.Handler[T] {
	return dedupHandler[T]{h: h, d: d}
}

var (
	_ informer.Handler[client.Object] = dedupHandler[client.Object]{}
	_ informer.Handler[client.Object] = categoryHandler[client.Object]{}
)

type dedupHandler[T client.Object] struct {
	h informer.Handler[T]
	d *Dedup[informer.Key]
}

func (w dedupHandler[T]) OnAdd(obj T, initial bool) {
	w.d.Fresh(informer.KeyOf(obj), obj)
	w.h.OnAdd(obj, initial)
}

func (w dedupHandler[T]) OnUpdate(old, new T) {
	if w.d.Fresh(informer.KeyOf(new), new) {
		w.h.OnUpdate(old, new)
	}
}

func (w dedupHandler[T]) OnDelete(obj T, finalStateUnknown bool) {
	w.d.Forget(informer.KeyOf(obj))
	w.h.OnDelete(obj, finalStateUnknown)
}

// CategoryCounter counts changes by the categories they touch, in the
// counter objwatch_change_events_total{counter=name,category}. Changes to
// the Volatile fields are left out (every update changes the
// resourceVersion), so an update that changed nothing else counts for
// nothing. It is safe for concurrent use.
type CategoryCounter struct {
	cats   *Categories
	ignore []Pattern
	vec    *prometheus.CounterVec
}

// NewCategoryCounter registers a CategoryCounter for cats with reg; name
// (default "default") tells counters in one registry apart.
func NewCategoryCounter(cats *Categories, reg prometheus.Registerer, name string) (*CategoryCounter, error) {
	if name == "" {
		name = "default"
	}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "objwatch_change_events_total",
		Help:        "Changes by the categories of fields they touched (a change touching several counts for each).",
		ConstLabels: prometheus.Labels{"counter": name},
	}, []string{"category"})
	if err := reg.Register(vec); err != nil {
		return nil, fmt.Errorf("category metrics: %w", err)
	}
	cc := &CategoryCounter{cats: cats, vec: vec}
	for _, s := range Volatile() {
		p, err := ParsePattern(s)
		if err != nil {
			return nil, fmt.Errorf("category metrics: %w", err)
		}
		cc.ignore = append(cc.ignore, p)
	}
	return cc, nil
}

// Count counts d once for each category its changes touch (as
// Categories.Of tells, leaving out changes at or below the Volatile fields) and
// returns them, sorted.
func (c *CategoryCounter) Count(d *Diff) []string {
	var out []string
	if d.Err() != nil {
		out = []string{c.cats.def}
	}
	for _, ch := range d.Changes() {
		if slices.ContainsFunc(c.ignore, func(p Pattern) bool { return p.covers(ch) }) {
			continue
		}
		for _, name := range c.cats.OfChange(ch) {
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	for _, name := range out {
		c.vec.WithLabelValues(name).Inc()
	}
	return out
}

// CategoryHandler wraps an objwatch informer handler to count each update
// it gets with c; adds and deletes are not counted. Wrap it in a
// DedupHandler to count only new content. It runs on the handler's
// goroutine.
func CategoryHandler[T client.Object](h informer.Handler[T], c *CategoryCounter) informer.Handler[T] {
	return categoryHandler[T]{h: h, c: c}
}

type categoryHandler[T client.Object] struct {
	h informer.Handler[T]
	c *CategoryCounter
}

func (w categoryHandler[T]) OnAdd(obj T, initial bool) { w.h.OnAdd(obj, initial) }

func (w categoryHandler[T]) OnUpdate(old, new T) {
	w.c.Count(Between(old, new))
	w.h.OnUpdate(old, new)
}

func (w categoryHandler[T]) OnDelete(obj T, finalStateUnknown bool) {
	w.h.OnDelete(obj, finalStateUnknown)
}
