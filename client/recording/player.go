package recording

import (
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsjson "sigs.k8s.io/json"

	"github.com/objwatch/objwatch/client"
)

// Handler is what a Player calls: the method set of client/informer's
// Handler, so an informer.HandlerFuncs (or any informer handler) plays
// unchanged.
type Handler[T client.Object] interface {
	OnAdd(obj T, initial bool)
	OnUpdate(old, new T)
	OnDelete(obj T, finalStateUnknown bool)
}

// Player plays one resource of a recording into handlers, making the calls
// an informer makes for the same stream, in the same order: an object
// listed or added that the cache lacks is OnAdd (initial for the initial
// list), a changed one OnUpdate, one re-created under a new UID OnDelete
// (final state unknown) then OnAdd; a relist changes only what differs and
// deletes, final state unknown, what it no longer lists; a state the cache
// already has changes nothing.
//
// Time is virtual: Step, RunUntil and Run advance the clock to each item's
// recorded time without sleeping, so a test runs at CPU speed and is
// deterministic. Disconnect injects watch outages, with or without a 410.
//
// A Player is not safe for concurrent use; handlers run on the caller's
// goroutine, one call at a time, and may read Get and List (the cache as
// the handler's call left it).
type Player[T client.Object] struct {
	resource string
	items    []Item
	next     int
	now      time.Duration
	handlers []Handler[T]
	elem     reflect.Type

	store   map[key]T // what handlers were told
	truth   map[key]T // the recorded state; differs from store while down
	listing []T       // a relist in progress (delivered)
	tlist   map[key]T // a relist in progress (truth)

	outages  []outage // sorted by at, not yet started
	down     *outage
	buffered []Item // missed during a plain disconnect, delivered at reconnect
	calls    int
}

type key struct{ namespace, name string }

func keyOf(o client.Object) key { return key{o.GetNamespace(), o.GetName()} }

// outage is an injected watch outage from at to at+dur.
type outage struct {
	at, dur time.Duration
	gone    bool
}

// NewPlayer returns a Player of rec's items of resource (as the header
// names it: "v1/configmaps").
func NewPlayer[T client.Object](rec *Recording, resource string) (*Player[T], error) {
	if !slices.Contains(rec.Header.Resources, resource) {
		return nil, fmt.Errorf("recording: the recording has no resource %q (it has %v)", resource, rec.Header.Resources)
	}
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("recording: %v is not a pointer to a struct", t)
	}
	p := &Player[T]{resource: resource, elem: t.Elem(), store: map[key]T{}, truth: map[key]T{}}
	for _, it := range rec.Items {
		if it.Resource == resource {
			p.items = append(p.items, it)
		}
	}
	return p, nil
}

// AddHandler adds a handler; it gets OnAdd (initial) for what the cache
// holds, then every later call.
func (p *Player[T]) AddHandler(h Handler[T]) {
	for _, k := range sortedKeys(p.store) {
		h.OnAdd(p.store[k], true)
	}
	p.handlers = append(p.handlers, h)
}

// Disconnect injects a watch outage at virtual time at, lasting down:
// items recorded in [at, at+down) are not delivered when they happen. At
// at+down the watch comes back: with gone false it resumes and delivers
// them all, in order; with gone true (the server answered 410) the player
// relists, making only the calls that bring handlers from what they knew
// to the recorded state (intermediate states are skipped, deletions are
// final state unknown). Outages must not overlap nor start before Now.
func (p *Player[T]) Disconnect(at, down time.Duration, gone bool) error {
	if at < p.now || down < 0 {
		return fmt.Errorf("recording: outage at %v for %v: at is before now (%v) or down is negative", at, down, p.now)
	}
	o := outage{at: at, dur: down, gone: gone}
	i, _ := slices.BinarySearchFunc(p.outages, o, func(a, b outage) int { return cmp.Compare(a.at, b.at) })
	if i > 0 && p.outages[i-1].at+p.outages[i-1].dur > at || i < len(p.outages) && at+down > p.outages[i].at ||
		p.down != nil && p.down.at+p.down.dur > at {
		return fmt.Errorf("recording: outage at %v for %v overlaps another", at, down)
	}
	p.outages = slices.Insert(p.outages, i, o)
	return nil
}

// Now returns the virtual time: the recorded time of the last item played
// (or reconnect made).
func (p *Player[T]) Now() time.Duration { return p.now }

// Calls returns how many handler calls were made (per handler).
func (p *Player[T]) Calls() int { return p.calls }

// Done reports whether everything was played.
func (p *Player[T]) Done() bool { return p.next == len(p.items) && p.down == nil }

// Get returns the cached object, as handlers were told.
func (p *Player[T]) Get(namespace, name string) (T, bool) {
	o, ok := p.store[key{namespace, name}]
	return o, ok
}

// List returns the cached objects, sorted by namespace and name.
func (p *Player[T]) List() []T {
	out := make([]T, 0, len(p.store))
	for _, k := range sortedKeys(p.store) {
		out = append(out, p.store[k])
	}
	return out
}

// nextTime returns when the next step happens.
func (p *Player[T]) nextTime() (time.Duration, bool) {
	switch {
	case p.down != nil:
		end := p.down.at + p.down.dur
		if p.next < len(p.items) {
			end = min(end, p.items[p.next].At)
		}
		return end, true
	case p.next < len(p.items):
		return p.items[p.next].At, true
	}
	return 0, false
}

// Step plays the next item, or the reconnect that ends an outage,
// advancing the clock to it. It returns false when everything was played.
func (p *Player[T]) Step() (bool, error) {
	if p.down != nil {
		end := p.down.at + p.down.dur
		if p.next == len(p.items) || end <= p.items[p.next].At {
			p.now = max(p.now, end)
			return true, p.reconnect()
		}
	}
	if p.next == len(p.items) {
		return false, nil
	}
	it := p.items[p.next]
	p.next++
	p.now = it.At
	if len(p.outages) > 0 && p.outages[0].at <= it.At && p.down == nil {
		o := p.outages[0]
		p.outages = p.outages[1:]
		p.down = &o
		if o.at+o.dur <= it.At { // an outage shorter than the gap to it
			p.next--
			return true, p.reconnect()
		}
	}
	if p.down != nil {
		if !p.down.gone {
			p.buffered = append(p.buffered, it)
		}
		return true, p.apply(it, false)
	}
	return true, p.apply(it, true)
}

// RunUntil plays everything recorded up to t (inclusive) and sets the
// clock to t.
func (p *Player[T]) RunUntil(t time.Duration) error {
	for {
		at, ok := p.nextTime()
		if !ok || at > t {
			p.now = max(p.now, t)
			return nil
		}
		if _, err := p.Step(); err != nil {
			return err
		}
	}
}

// Run plays everything.
func (p *Player[T]) Run() error {
	for {
		more, err := p.Step()
		if err != nil || !more {
			return err
		}
	}
}

// reconnect ends the current outage.
func (p *Player[T]) reconnect() error {
	o := p.down
	p.down = nil
	if !o.gone {
		items := p.buffered
		p.buffered = nil
		for _, it := range items {
			if err := p.deliver(it); err != nil {
				return err
			}
		}
		return nil
	}
	if p.tlist != nil {
		// The recording itself is mid-relist, part of it unseen: its
		// synced brings handlers to the whole listed state.
		p.listing = nil
		return nil
	}
	p.sync(p.truth, sortedKeys(p.truth))
	return nil
}

// apply plays one item into the truth and, if deliver, to handlers.
func (p *Player[T]) apply(it Item, deliver bool) error {
	var obj T
	if it.Kind.hasObject() && it.Kind != Bookmark {
		var err error
		if obj, err = p.decode(it); err != nil {
			return err
		}
	}
	switch it.Kind {
	case Initial, Added, Modified:
		p.truth[keyOf(obj)] = obj
	case Deleted:
		delete(p.truth, keyOf(obj))
	case Relist:
		p.tlist = map[key]T{}
	case Listed:
		if p.tlist != nil {
			p.tlist[keyOf(obj)] = obj
		}
	case Synced:
		if p.tlist != nil {
			p.truth, p.tlist = p.tlist, nil
			if deliver && p.listing == nil {
				// A relist that started while the watch was down.
				p.sync(p.truth, sortedKeys(p.truth))
				return nil
			}
		}
	}
	if deliver {
		p.play(it, obj)
	}
	return nil
}

// deliver plays a buffered item to handlers (its truth was applied).
func (p *Player[T]) deliver(it Item) error {
	var obj T
	if it.Kind.hasObject() && it.Kind != Bookmark {
		var err error
		if obj, err = p.decode(it); err != nil {
			return err
		}
	}
	p.play(it, obj)
	return nil
}

// play makes the handler calls of one item, as an informer does.
func (p *Player[T]) play(it Item, obj T) {
	switch it.Kind {
	case Initial:
		p.upsert(obj, true)
	case Added, Modified:
		p.upsert(obj, false)
	case Listed:
		p.listing = append(p.listing, obj)
	case Synced:
		if p.listing != nil {
			listed := map[key]T{}
			order := make([]key, 0, len(p.listing))
			for _, o := range p.listing {
				listed[keyOf(o)] = o
				order = append(order, keyOf(o))
			}
			p.listing = nil
			p.sync(listed, order)
		}
	case Relist:
		p.listing = []T{}
	case Deleted:
		k := keyOf(obj)
		old, had := p.store[k]
		if !had {
			return
		}
		delete(p.store, k)
		if it.Unknown || old.GetUID() != obj.GetUID() {
			p.each(func(h Handler[T]) { h.OnDelete(old, true) })
			return
		}
		p.each(func(h Handler[T]) { h.OnDelete(obj, false) })
	}
}

// sync brings the store to state: upserts in order, then deletions (final
// state unknown) of what state lacks, sorted.
func (p *Player[T]) sync(state map[key]T, order []key) {
	for _, k := range order {
		p.upsert(state[k], false)
	}
	for _, k := range sortedKeys(p.store) {
		if _, ok := state[k]; !ok {
			old := p.store[k]
			delete(p.store, k)
			p.each(func(h Handler[T]) { h.OnDelete(old, true) })
		}
	}
}

func (p *Player[T]) upsert(obj T, initial bool) {
	k := keyOf(obj)
	old, had := p.store[k]
	if had && old.GetResourceVersion() == obj.GetResourceVersion() && old.GetUID() == obj.GetUID() {
		return
	}
	p.store[k] = obj
	switch {
	case !had:
		p.each(func(h Handler[T]) { h.OnAdd(obj, initial) })
	case old.GetUID() != obj.GetUID():
		p.each(func(h Handler[T]) { h.OnDelete(old, true) })
		p.each(func(h Handler[T]) { h.OnAdd(obj, initial) })
	default:
		p.each(func(h Handler[T]) { h.OnUpdate(old, obj) })
	}
}

func (p *Player[T]) each(fn func(Handler[T])) {
	p.calls++
	for _, h := range p.handlers {
		fn(h)
	}
}

func (p *Player[T]) decode(it Item) (T, error) {
	obj := reflect.New(p.elem).Interface().(T)
	var err error
	if u, ok := any(obj).(*unstructured.Unstructured); ok {
		// Not UnmarshalJSON, which wants a kind: typed informers'
		// objects may lack theirs.
		err = sigsjson.UnmarshalCaseSensitivePreserveInts(it.Object, &u.Object)
	} else {
		err = json.Unmarshal(it.Object, obj)
	}
	if err != nil {
		return obj, fmt.Errorf("recording: line %d: decoding the %s object: %w", it.Line, it.Kind, err)
	}
	if obj.GetName() == "" {
		return obj, fmt.Errorf("recording: line %d: %s object without a name", it.Line, it.Kind)
	}
	return obj, nil
}

func sortedKeys[T any](m map[key]T) []key {
	ks := make([]key, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].namespace != ks[j].namespace {
			return ks[i].namespace < ks[j].namespace
		}
		return ks[i].name < ks[j].name
	})
	return ks
}

// Next returns the recorded time and line of what Step would play next
// (line 0 for a reconnect), and false when everything was played.
func (p *Player[T]) Next() (at time.Duration, line int, ok bool) {
	at, ok = p.nextTime()
	if !ok {
		return 0, 0, false
	}
	if p.next < len(p.items) && p.items[p.next].At == at && (p.down == nil || p.down.at+p.down.dur > at) {
		line = p.items[p.next].Line
	}
	return at, line, true
}

// Stepper is what Interleave drives: a *Player of any type.
type Stepper interface {
	Next() (at time.Duration, line int, ok bool)
	Step() (bool, error)
}

// Interleave plays several Players (one per resource of a recording) in
// the recording's order: always the one whose next item comes first (by
// time, then by line), so handlers of different resources see the calls
// in the order the events arrived, as an informer per resource would.
func Interleave(players ...Stepper) error {
	for {
		best, bestAt, bestLine := -1, time.Duration(0), 0
		for i, p := range players {
			at, line, ok := p.Next()
			if ok && (best < 0 || at < bestAt || at == bestAt && line < bestLine) {
				best, bestAt, bestLine = i, at, line
			}
		}
		if best < 0 {
			return nil
		}
		if _, err := players[best].Step(); err != nil {
			return err
		}
	}
}
