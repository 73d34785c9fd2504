package objects

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/objwatch/objwatch/server/fieldmanager"
	"github.com/objwatch/objwatch/storage/watchcache"
)

// frameMemoSize bounds each of a frameMemo's two generations: a watch that
// drops managedFields and is further behind than that makes its own frame
// (the same bytes) instead of sharing one.
const frameMemoSize = 2048

// frameMemo keeps the wire frames without metadata.managedFields of
// recent watch-cache events, so that each is encoded once for every watch
// that drops managedFields, as the full frame is encoded once for the
// others (watchcache.Item.Frame). Frames are keyed by the cache's object
// (shared by every watcher of an event), the event type and the full
// frame's length (an event's frame has a commitTime, a synthetic initial
// event's of the same object has none); the memo holds
// two generations of at most frameMemoSize frames and forgets the older
// when the newer is full.
//
// A frameMemo is safe for concurrent use. mu is a leaf lock: nothing is
// encoded while it is held (each frame is made under its entry's once).
type frameMemo struct {
	mu        sync.Mutex
	cur, prev map[frameKey]*memoFrame // under mu
	made      int64                   // frames encoded, under mu (for tests)
}

type frameKey struct {
	obj *watchcache.Object
	typ string
	n   int    // length of the full frame (frames without managedFields)
	enc string // WatchOptions.EncodeKey (encoded events), "" otherwise
}

type memoFrame struct {
	once sync.Once
	b    []byte
	err  error
}

// frame returns it's frame without managedFields.
func (m *frameMemo) frame(it watchcache.Item) ([]byte, error) {
	full := it.Frame()
	return m.get(frameKey{obj: it.Object, typ: it.Type, n: len(full)}, func() ([]byte, error) { return droppedFrame(it, full) })
}

// encoded returns it encoded by encode, the encoding named key
// (WatchOptions.Encode).
func (m *frameMemo) encoded(it watchcache.Item, key string, encode func(typ string, json []byte) ([]byte, error)) ([]byte, error) {
	return m.get(frameKey{obj: it.Object, typ: it.Type, enc: key}, func() ([]byte, error) { return encode(it.Type, it.Object.JSON) })
}

// get returns the frame of k, made by mk the first time it is asked for.
func (m *frameMemo) get(k frameKey, mk func() ([]byte, error)) ([]byte, error) {
	m.mu.Lock()
	e := m.cur[k]
	if e == nil {
		if e = m.prev[k]; e == nil {
			e = &memoFrame{}
		}
		if len(m.cur) >= frameMemoSize {
			m.prev, m.cur = m.cur, nil
		}
		if m.cur == nil {
			m.cur = make(map[frameKey]*memoFrame, frameMemoSize)
		}
		m.cur[k] = e
	}
	m.mu.Unlock()
	e.once.Do(func() {
		e.b, e.err = mk()
		m.mu.Lock()
		m.made++
		m.mu.Unlock()
	})
	return e.b, e.err
}

// made is how many frames m has made.
func (m *frameMemo) madeCount() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.made
}

// droppedFrame is it's frame with the object's managedFields left out:
// full, its frame ({"type":T,"object":OBJ,...}), with OBJ replaced.
func droppedFrame(it watchcache.Item, full []byte) ([]byte, error) {
	obj := it.Object.JSON
	start := len(`{"type":"`) + len(it.Type) + len(`","object":`)
	end := start + len(obj)
	if end > len(full) || !bytes.Equal(full[start:end], obj) {
		return nil, fmt.Errorf("watch frame of %s does not hold its object", it.Object.Key)
	}
	stripped, err := fieldmanager.DropManagedFieldsJSON(obj)
	if err != nil {
		return nil, err
	}
	if len(stripped) == len(obj) {
		return full, nil // nothing dropped
	}
	b := make([]byte, 0, len(full)-len(obj)+len(stripped))
	b = append(b, full[:start]...)
	b = append(b, stripped...)
	return append(b, full[end:]...), nil
}
