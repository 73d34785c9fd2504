package audit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/objwatch/objwatch/server/apistatus"
	"github.com/objwatch/objwatch/server/objects"
)

// DefaultHeadroom is the room kept allocated past the log's end (see
// room): more than the record of any one write (etcd refuses values over
// 1.5 MiB by default; a record holds at most the request, the response
// and the diff).
const DefaultHeadroom = 16 << 20

// room is the disk space allocated past the end of the log file (with
// fallocate's FALLOC_FL_KEEP_SIZE: the file's size, and so what a reader
// sees, is unchanged). Records are written into it, so a record of a
// write admitted while the room stood cannot fail for want of space: a
// full file system refuses the next write *before* it reaches etcd
// (Reserve), never its record after.
//
// The guarantee holds for the records of the writes in flight at once up
// to the headroom; records beyond it (many large writes admitted
// together on a file system that filled meanwhile) may still fail, and
// then the batch is taken back from the file whole (see Log.write): no
// torn record, the chain intact, and the log writes again once there is
// space.
//
// Its methods are safe for concurrent use: mu guards f and end; size
// mirrors the log's size (written by the io holder).
type room struct {
	headroom int64

	mu     sync.Mutex
	f      *os.File // the current log file
	end    int64    // allocated up to here in f (0: nothing past its end)
	noFall bool     // the file system has no fallocate: free space is checked instead

	size atomic.Int64 // the log file's size
	lim  atomic.Int64 // end - headroom: writes are admitted at once while size ≤ lim
}

// errNoRoom is Reserve's error when the file system has no room.
var errNoRoom = errors.New("no space left for the audit log")

// use makes f (a new or just-opened log file of size) the file the room
// is allocated in; the caller releases the previous file's room first.
func (r *room) use(f *os.File, size int64) {
	r.mu.Lock()
	r.f, r.end = f, size
	r.size.Store(size)
	r.lim.Store(size - r.headroom - 1) // nothing allocated yet: the next Reserve allocates
	r.mu.Unlock()
}

// grown notes the log's new size (the io holder, after a write).
func (r *room) grown(size int64) { r.size.Store(size) }

// ensure allocates room for headroom bytes past the file's end, unless
// it is there already.
func (r *room) ensure() error {
	if r.headroom <= 0 || r.size.Load() <= r.lim.Load() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	size := r.size.Load()
	if r.f == nil || size+r.headroom <= r.end {
		return nil
	}
	if r.noFall {
		return freeSpace(r.f, r.headroom)
	}
	// Twice the headroom: the next allocation is a headroom of records
	// away, not the next write.
	err := preallocate(r.f, size, 2*r.headroom)
	if errors.Is(err, errNoFallocate) {
		r.noFall = true
		return freeSpace(r.f, r.headroom)
	}
	if err != nil {
		return err
	}
	r.end = size + 2*r.headroom
	r.lim.Store(r.end - r.headroom)
	return nil
}

// release frees what is allocated past the file's end (before the file
// is rotated or closed), so that the file holds only its records.
func (r *room) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil && r.end > r.size.Load() && !r.noFall {
		_ = punch(r.f, r.size.Load(), r.end-r.size.Load()) // best effort: only space is at stake
	}
	r.f, r.end = nil, 0
}

// Reserve is a Validate hook of the object service: before a write
// reaches etcd, it makes sure the log has room for the write's record
// (Config.Headroom allocated past its end). On a file system without
// that room it refuses the write with 507 Insufficient Storage: nothing
// is stored that the log could not show. Dry runs, and requests the
// policy records nothing of, pass. Safe for concurrent use.
func (l *Log) Reserve(ctx context.Context, a *objects.Attempt) error {
	if a.Request != nil && (a.Request.DryRun || a.Request.User != nil && RecordFrom(ctx) == nil) {
		return nil // nothing written, or a request the policy records nothing of (as Written)
	}
	if err := l.room.ensure(); err != nil {
		return apistatus.New(http.StatusInsufficientStorage, metav1.StatusReason("InsufficientStorage"),
			fmt.Sprintf("audit log %s: no room for this write's record (%v): nothing was written", l.cfg.Path, err))
	}
	return nil
}
