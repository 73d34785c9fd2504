package history

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// ErrDiskFull: the store's file system has less free space than
// Options.DiskReserve; nothing was appended. Pebble cannot be let run out
// of space: a write-ahead log that fails to write panics the process, so
// the store stops short of it. The recorder retries; the revisions it
// could not record are kept by etcd (the compactor stops at Durable) for
// as long as Server.CompactionFloor holds them, then become a gap.
var ErrDiskFull = errors.New("history: the store's disk is full")

// room watches the free space of the store's file system. check and the
// fields it keeps belong to the writer (it holds Store.mu); stalled and
// full may be read from any goroutine.
type room struct {
	dir     string
	reserve int64 // negative: no check

	lastCheck time.Time
	written   int64 // bytes appended since lastCheck
	low       bool  // the last check found less than reserve

	full         atomic.Bool
	stalledSince atomic.Int64 // unix nanoseconds of the first refusal in a row (0: none)
}

// checkEvery and checkBytes bound how long, and how many appended bytes,
// go between two looks at the free space while there is room (one
// statfs syscall each). Between two looks Pebble may take more than
// the bytes appended: a new write-ahead log is allocated whole (up to a
// memtable's size) when a memtable fills.
const (
	checkEvery = time.Second
	checkBytes = 1 << 20
)

// check returns ErrDiskFull when n more bytes would be appended with less
// than the reserve free.
func (r *room) check(n int64) error {
	if r.reserve < 0 {
		return nil
	}
	r.written += n
	if !r.low && r.written < checkBytes && time.Since(r.lastCheck) < checkEvery {
		return nil
	}
	free, err := freeBytes(r.dir)
	r.lastCheck, r.written = time.Now(), 0
	if err != nil {
		return nil // a file system that cannot tell: Pebble's own errors then
	}
	r.low = free-n < r.reserve
	if !r.low {
		r.full.Store(false)
		r.stalledSince.Store(0)
		return nil
	}
	r.full.Store(true)
	r.stalledSince.CompareAndSwap(0, time.Now().UnixNano())
	return fmt.Errorf("%w: %d bytes free in %s, %d kept in reserve", ErrDiskFull, free, r.dir, r.reserve)
}

// stalled is how long appends have been refused for want of space (0:
// they are not).
func (r *room) stalled() time.Duration {
	since := r.stalledSince.Load()
	if since == 0 {
		return 0
	}
	return time.Since(time.Unix(0, since))
}
