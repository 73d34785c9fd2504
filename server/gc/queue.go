package gc

import (
	"sync"
	"time"
)

// queue holds the keys waiting to be processed, each at most once, and
// never hands out a key that a worker is processing: a key added while it
// is processed is handed out again after done. Keys whose processing failed
// come back after a delay that doubles per consecutive failure. It is safe
// for concurrent use.
type queue struct {
	mu         sync.Mutex
	cond       *sync.Cond
	order      []string
	dirty      map[string]bool // in order, or to be re-added after processing
	processing map[string]bool
	failures   map[string]int
	timers     map[string]*time.Timer
	closed     bool
}

const (
	retryBase = 50 * time.Millisecond
	retryMax  = 30 * time.Second
)

func newQueue() *queue {
	q := &queue{dirty: map[string]bool{}, processing: map[string]bool{}, failures: map[string]int{}, timers: map[string]*time.Timer{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// add queues key.
func (q *queue) add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addLocked(key)
}

func (q *queue) addLocked(key string) {
	if q.closed || q.dirty[key] {
		return
	}
	q.dirty[key] = true
	if !q.processing[key] {
		q.order = append(q.order, key)
		q.cond.Signal()
	}
}

// addAfter queues key after d, unless a retry of it is already waiting.
func (q *queue) addAfter(key string, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, waiting := q.timers[key]; waiting || q.closed {
		return
	}
	q.timers[key] = time.AfterFunc(d, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		delete(q.timers, key)
		q.addLocked(key)
	})
}

// get waits for a key; ok is false once the queue is closed.
func (q *queue) get() (key string, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return "", false
	}
	key, q.order = q.order[0], q.order[1:]
	delete(q.dirty, key)
	q.processing[key] = true
	return key, true
}

// done ends the processing of key; failed brings it back after a backoff.
func (q *queue) done(key string, failed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if q.dirty[key] {
		q.order = append(q.order, key)
		q.cond.Signal()
	}
	if !failed {
		delete(q.failures, key)
		return
	}
	n := q.failures[key]
	q.failures[key] = n + 1
	delay := min(retryMax, retryBase<<min(n, 20))
	if _, waiting := q.timers[key]; waiting || q.closed {
		return
	}
	q.timers[key] = time.AfterFunc(delay, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		delete(q.timers, key)
		q.addLocked(key)
	})
}

// len is the number of keys waiting.
func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.order)
}

// close wakes the workers to return and stops the retry timers.
func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for k, t := range q.timers {
		t.Stop()
		delete(q.timers, k)
	}
	q.cond.Broadcast()
}

// recent is a map of at most n entries that forgets the oldest first. It
// is safe for concurrent use.
type recent[K comparable, V any] struct {
	mu   sync.Mutex
	m    map[K]V
	ring []K
	next int
}

func newRecent[K comparable, V any](n int) *recent[K, V] {
	return &recent[K, V]{m: make(map[K]V, n), ring: make([]K, n)}
}

func (r *recent[K, V]) get(k K) (V, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[k]
	return v, ok
}

// add sets k to v, unless k is there already; it reports whether it added.
func (r *recent[K, V]) add(k K, v V) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[k]; ok {
		return false
	}
	delete(r.m, r.ring[r.next])
	r.ring[r.next] = k
	r.m[k] = v
	r.next = (r.next + 1) % len(r.ring)
	return true
}
