package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/objwatch/objwatch/storage"
)

// ErrClosed: the log's Run has returned; nothing more is recorded.
var ErrClosed = errors.New("audit log closed")

// Config configures a Log.
type Config struct {
	// Path is the log file (--audit-log-path). Required.
	Path string
	// Policy decides what is recorded; nil: LoadPolicy(PolicyFile).
	Policy *Policy
	// PolicyFile is an audit.k8s.io Policy file (--audit-policy-file).
	PolicyFile string
	// MaxSizeMB rotates the file when it would grow beyond this many
	// megabytes (--audit-log-maxsize); 0 never rotates.
	MaxSizeMB int
	// MaxBackups is how many rotated files are kept
	// (--audit-log-maxbackup); 0 keeps all.
	MaxBackups int
	// Storage keeps the chain's checkpoints; nil keeps none.
	Storage storage.Interface
	// CheckpointKey is where the head of the chain is checkpointed
	// (default CheckpointKey(Path)).
	CheckpointKey string
	// CheckpointInterval between checkpoints of a changed head (default
	// 10 s); one is also taken when Run ends.
	CheckpointInterval time.Duration
	// JournalSize is the size in bytes of the journal beside the log
	// (PATH.journal; see journal.go): 0 is DefaultJournalSize; negative:
	// no journal, the log itself is fsynced for every batch.
	JournalSize int64
	// Headroom is the disk space kept allocated past the log's end, so
	// that a write is refused before it reaches etcd when its record
	// would not fit (Reserve; see room): 0 is DefaultHeadroom, negative
	// keeps none (records that do not fit then fail after their writes).
	Headroom int64
	Log      *slog.Logger
}

// Stats are a log's counters since it was opened.
type Stats struct {
	Records, Fsyncs int64
}

// Log is an audit log: records are queued by any number of requests and
// written in queue order, one fsync (of the journal beside the log, see
// journal.go) for everything queued while the previous fsync ran (group
// commit). The writer is whoever holds the io
// token: the response waiting for a batch's first durable record takes
// it (the batch's leader) and writes everything queued, its followers'
// records too (they wait only for the batch's done), so no other
// goroutine has to be woken and scheduled between a write's etcd commit
// and its record's fsync; Run's goroutine takes it for the records nobody
// waits for. A Log is safe for concurrent use; its owner calls Run once
// and keeps it running while requests are served.
type Log struct {
	cfg    Config
	policy *Policy

	mu       sync.Mutex // guards the fields below; never held across I/O
	queue    []queued   // lines with empty chain fields, in order
	durables int        // records in queue that are waited for
	next     *batch     // the batch queue will be written in
	stopped  bool       // Run has returned

	// io is the right to write the file (capacity 1: a send takes it, a
	// receive gives it back); it is held across the write and fsync.
	io chan struct{}

	// Owned by the holder of io (and New before it).
	f    *os.File
	size int64
	j    *journal // nil: none (Config.JournalSize < 0)
	seq  int64
	prev [sha256.Size]byte
	err  error // a failed write that could not be taken back: everything after it fails
	room room  // space allocated past the log's end (room.go)
	// lastSync is the last fsync's duration; batched holds the most
	// waited records an fsync made durable in the last window and in the
	// current one (batchWindow long, from windowStart on). The commit
	// delay follows them.
	lastSync    time.Duration
	batched     [2]int
	windowStart time.Time
	// spare is the queue written last, kept for the next flush's records.
	spare []queued

	headMu    sync.Mutex // guards head; a leaf
	head      Checkpoint
	records   atomic.Int64
	fsyncs    atomic.Int64
	takenBack atomic.Int64 // batches whose write failed and was undone
	// syncSeconds and waitSeconds: each fsync's duration, and how long
	// each response waited for its record to be durable.
	syncSeconds, waitSeconds prometheus.Histogram
	buf                      []byte
	saved                    int64 // the last checkpointed seq (checkpoint goroutine, then Run)
}

// batch is the records written together with one fsync. done is closed
// once they are on disk (or failed: err).
type batch struct {
	log  *Log
	done chan struct{}
	err  error
	led  bool // a durable record is queued in it: its leader is chosen (guarded by log.mu)
}

func (l *Log) newBatch() *batch { return &batch{log: l, done: make(chan struct{})} }

// ticket is a queued record's place: its batch, and whether its waiter
// leads the batch.
type ticket struct {
	b    *batch
	lead bool
}

// Wait blocks until the record's batch is on disk and returns why not, if
// it is not. The batch's leader, the first durable record queued in it,
// writes it (and everything queued with it) itself, once the batch before
// is written, unless a flush of Run's took it first; the others only wait
// for that. So only one goroutine per batch waits for the io token:
// when every waiter competed for it, their selects' channel locks
// (sellock, selectgo) showed in server profiles beside the fsync itself.
func (t ticket) Wait() error {
	b := t.b
	if t.lead {
		select {
		case <-b.done: // written by Run's flush (the last one keeps io)
		case b.log.io <- struct{}{}:
			select {
			case <-b.done: // written by Run's lazy flush before
			default:
				if d := b.log.commitDelay(); d > 0 {
					time.Sleep(d) // the records of writes finishing now join this fsync
				}
				b.log.flush()
			}
			<-b.log.io
		}
	}
	<-b.done
	return b.err
}

// New opens (or creates) the log file and its journal and continues the
// chain from its last record, or from the newest rotated file's when it
// is empty. Records the journal made durable that the log lacks (the
// machine went down before the file system wrote them) are written to
// the log first; a partial last line (the server died while writing it,
// before any fsync acknowledged it) is cut off. New starts nothing; call
// Run.
func New(cfg Config) (*Log, error) {
	if cfg.Path == "" {
		return nil, errors.New("audit: no log path")
	}
	if cfg.Policy == nil {
		p, err := LoadPolicy(cfg.PolicyFile)
		if err != nil {
			return nil, err
		}
		cfg.Policy = p
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.CheckpointInterval == 0 {
		cfg.CheckpointInterval = 10 * time.Second
	}
	if cfg.CheckpointKey == "" {
		cfg.CheckpointKey = CheckpointKey(cfg.Path)
	}
	if cfg.JournalSize == 0 {
		cfg.JournalSize = DefaultJournalSize
	}
	if cfg.Headroom == 0 {
		cfg.Headroom = DefaultHeadroom
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Path), 0o700); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	l := &Log{cfg: cfg, policy: cfg.Policy, io: make(chan struct{}, 1), room: room{headroom: cfg.Headroom},
		syncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "objwatch_audit_fsync_duration_seconds", Help: "Duration of the audit log's fsyncs.",
			Buckets: waitBuckets,
		}),
		waitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "objwatch_audit_wait_duration_seconds", Help: "How long a mutation's response waited for its audit record to be on disk.",
			Buckets: waitBuckets,
		}),
	}
	l.next = l.newBatch()
	if err := l.open(); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return l, nil
}

// Policy returns the log's policy.
func (l *Log) Policy() *Policy { return l.policy }

// Stats returns the log's counters.
func (l *Log) Stats() Stats { return Stats{Records: l.records.Load(), Fsyncs: l.fsyncs.Load()} }

// open opens the current file and recovers the chain's state.
func (l *Log) open() error {
	f, err := os.OpenFile(l.cfg.Path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		f.Close()
		if l.j != nil {
			l.j.f.Close()
		}
		return err
	}
	if err := l.openJournal(f); err != nil {
		return fail(err)
	}
	last, size, err := lastLine(f)
	if err != nil {
		return fail(err)
	}
	if l.j != nil {
		// Everything in the file is made durable before the journal
		// starts over (its first entry will say it starts at size).
		if err := datasync(f); err != nil {
			return fail(err)
		}
		if err := l.j.reset(); err != nil {
			return fail(err)
		}
	}
	if _, err := f.Seek(size, io.SeekStart); err != nil {
		return fail(err)
	}
	l.f, l.size = f, size
	l.room.use(f, size)
	if last == nil {
		// A fresh file: the chain continues from the newest backup.
		if bs, _ := Backups(l.cfg.Path); len(bs) > 0 {
			if bf, err := os.Open(bs[len(bs)-1]); err == nil {
				last, _, _ = lastLine(bf)
				bf.Close()
			}
		}
	}
	if last != nil {
		r, err := parseChain(last)
		if err != nil {
			return fail(fmt.Errorf("last record of %s: %w", l.cfg.Path, err))
		}
		l.seq, l.prev = r.seq, sha256.Sum256(last)
		l.head = Checkpoint{Seq: l.seq, Hash: hex.EncodeToString(l.prev[:])}
	}
	return nil
}

// openJournal opens the log's journal (unless there is to be none) and
// writes to f what its entries hold that f lacks; a journal that does not
// continue f is set aside.
func (l *Log) openJournal(f *os.File) error {
	if l.cfg.JournalSize < 0 {
		return nil
	}
	j, off, data, err := openJournal(journalPath(l.cfg.Path), l.cfg.JournalSize)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	l.j = j
	if len(data) == 0 {
		return nil
	}
	ok, why, err := recoverLog(f, off, data)
	if err != nil {
		return fmt.Errorf("recovering from the journal: %w", err)
	}
	if !ok {
		aside, err := j.setAside()
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		l.cfg.Log.Warn("audit: the journal does not continue the log, which was changed while the server was down; the log is used as it is, the journal kept beside it",
			"log", l.cfg.Path, "journal", aside, "reason", why)
	}
	return nil
}

// lastLine returns f's last complete line (without its newline) and the
// size of its complete lines, cutting off a partial last line.
func lastLine(f *os.File) ([]byte, int64, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	size := st.Size()
	var tail []byte
	for chunk := int64(64 << 10); ; chunk *= 4 {
		off := max(size-chunk, 0)
		tail = make([]byte, size-off)
		if _, err := f.ReadAt(tail, off); err != nil && err != io.EOF {
			return nil, 0, err
		}
		end := bytes.LastIndexByte(tail, '\n')
		if end < 0 && off > 0 {
			continue
		}
		if end < 0 {
			if size > 0 {
				if err := f.Truncate(0); err != nil {
					return nil, 0, err
				}
			}
			return nil, 0, nil
		}
		complete := off + int64(end) + 1
		if complete < size {
			if err := f.Truncate(complete); err != nil {
				return nil, 0, err
			}
		}
		last, err := lineBefore(f, complete)
		return last, complete, err
	}
}

// lazyFlush is how long a record nobody waits for may stay queued: such
// records (RequestReceived stages, reads) cause no fsync of their own but
// go with the next one.
const lazyFlush = 50 * time.Millisecond

// enqueue queues one record line (its chain fields empty) and returns its
// ticket. A durable record (a mutation's, whose response waits for it) is
// written and fsynced by its batch's leader (the first durable record of
// the batch, in its Wait), with everything queued before it; others
// within lazyFlush.
func (l *Log) enqueue(line queued, durable bool) ticket {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		b := l.newBatch()
		b.err = ErrClosed
		close(b.done)
		return ticket{b: b}
	}
	l.queue = append(l.queue, line)
	t := ticket{b: l.next}
	if durable {
		l.durables++
		t.lead = !t.b.led
		t.b.led = true
	}
	l.mu.Unlock()
	return t
}

// Run writes queued records until ctx ends, then writes what is still
// queued, takes a last checkpoint, closes the file and returns. Records
// queued after it returns fail with ErrClosed.
func (l *Log) Run(ctx context.Context) {
	var wg sync.WaitGroup
	cpCtx, stopCP := context.WithCancel(context.WithoutCancel(ctx))
	if l.cfg.Storage != nil {
		wg.Go(func() { l.checkpoints(cpCtx) })
	}
	lazy := time.NewTicker(lazyFlush)
	defer lazy.Stop()
	for {
		select {
		case <-lazy.C:
			select {
			case l.io <- struct{}{}:
				l.flush()
				<-l.io
			case <-ctx.Done():
			}
			continue
		case <-ctx.Done():
		}
		break
	}
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.io <- struct{}{} // kept: nothing is written after this flush
	l.flush()
	if l.j != nil {
		// The log made durable, the journal is empty on the next start.
		if l.err == nil {
			if err := datasync(l.f); err != nil {
				l.fail(err)
			} else if err := l.j.reset(); err != nil {
				l.fail(err)
			}
		}
		l.j.f.Close()
	}
	stopCP()
	wg.Wait()
	if l.cfg.Storage != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		l.checkpoint(ctx)
		cancel()
	}
	l.room.release()
	if err := l.f.Close(); err != nil && l.err == nil {
		l.cfg.Log.Error("audit log", "err", err)
	}
}

// flush writes everything queued, with one fsync per file written. The
// caller holds io.
func (l *Log) flush() {
	l.mu.Lock()
	q, b, durables := l.queue, l.next, l.durables
	if len(q) == 0 {
		l.mu.Unlock()
		return
	}
	durable := durables > 0 || l.stopped
	l.queue, l.next, l.durables = l.spare[:0], l.newBatch(), 0
	l.mu.Unlock()
	if durable {
		l.sawBatch(durables, time.Now())
	}
	b.err = l.write(q, durable)
	close(b.done)
	for i, line := range q {
		putBuf(line.b)
		q[i] = queued{}
	}
	l.spare = q[:0]
}

// write writes q; durable: and fsyncs it (else the next durable write
// does).
func (l *Log) write(q []queued, durable bool) error {
	if l.err != nil {
		return l.err
	}
	maxSize := int64(l.cfg.MaxSizeMB) << 20
	n := journalHeader
	for _, line := range q {
		n += len(line.b) + 2*sha256.Size + 21 // the hash, a seq, the newline
	}
	buf := l.buf[:0]
	if cap(buf) < n {
		buf = make([]byte, 0, n+n/4) // room for the next batch to be larger
	}
	buf = buf[:journalHeader] // room for the batch's journal header
	// The chain before the batch's records not yet in a file: a write
	// taken back (takenBack) leaves the chain there.
	seq0, prev0 := l.seq, l.prev
	var hexb [2 * sha256.Size]byte
	for _, line := range q {
		l.seq++
		hex.Encode(hexb[:], l.prev[:])
		start := len(buf)
		buf = splice(buf, line, l.seq, hexb[:])
		rec := buf[start:]
		if maxSize > 0 && l.size > 0 && l.size+int64(len(buf)-journalHeader) > maxSize {
			// This record goes to a new file: write and sync the old one.
			if err := l.rotate(buf[journalHeader:start]); err != nil {
				return l.failed(err, seq0, prev0)
			}
			seq0, prev0 = l.seq-1, l.prev // the records before this one are in the old file
			buf = append(buf[:journalHeader], rec...)
			rec = buf[journalHeader:]
		}
		l.prev = sha256.Sum256(rec)
		buf = append(buf, '\n')
	}
	if err := l.sync(buf, durable); err != nil {
		return l.failed(err, seq0, prev0)
	}
	l.records.Add(int64(len(q)))
	l.headMu.Lock()
	l.head = Checkpoint{Seq: l.seq, Hash: hex.EncodeToString(l.prev[:])}
	l.headMu.Unlock()
	if cap(buf) <= 4<<20 {
		l.buf = buf
	}
	return nil
}

// failed handles a batch's failed write: one taken back from the file
// (takenBack) leaves the log as it was before the batch, its chain at
// seq0 and prev0, and the log writes again (the next batch, once there is
// space); any other failure ends the log (fail).
func (l *Log) failed(err error, seq0 int64, prev0 [sha256.Size]byte) error {
	var tb *takenBack
	if !errors.As(err, &tb) {
		return l.fail(err)
	}
	l.seq, l.prev = seq0, prev0
	l.takenBack.Add(1)
	l.cfg.Log.Error("audit log: a batch of records could not be written and was taken back; the writes it recorded were made without their records", "err", tb.err)
	return tb
}

// takenBack is a write to the log file that failed and was undone: the
// file is as it was before it.
type takenBack struct{ err error }

func (t *takenBack) Error() string { return t.err.Error() + " (taken back)" }
func (t *takenBack) Unwrap() error { return t.err }

// appendFile writes b at the end of the log file; if that fails, it
// cuts the file back to its size before (no torn record is left) and
// says so with a *takenBack. The caller holds io.
func (l *Log) appendFile(b []byte) error {
	n, err := l.f.Write(b)
	if err == nil {
		l.size += int64(n)
		l.room.grown(l.size)
		return nil
	}
	if n > 0 {
		if terr := l.f.Truncate(l.size); terr != nil {
			return fmt.Errorf("%w; cutting back the torn record: %w", err, terr)
		}
	}
	if _, serr := l.f.Seek(l.size, io.SeekStart); serr != nil {
		return fmt.Errorf("%w; seeking back: %w", err, serr)
	}
	return &takenBack{err}
}

func (l *Log) fail(err error) error {
	l.err = fmt.Errorf("audit log: %w", err)
	l.cfg.Log.Error("audit log write failed; requests that need a record fail from now on", "err", err)
	return l.err
}

// maxCommitDelay bounds how long a batch's writer waits for more records;
// batchWindow is how long a batch of several waiting records counts as a
// sign of concurrent writers.
const (
	maxCommitDelay = 8 * time.Millisecond
	batchWindow    = 100 * time.Millisecond
)

// sawBatch records that an fsync is about to make n waiting records
// durable. The caller holds io.
func (l *Log) sawBatch(n int, now time.Time) {
	switch age := now.Sub(l.windowStart); {
	case age >= 2*batchWindow: // both windows are over
		l.batched, l.windowStart = [2]int{}, now
	case age >= batchWindow: // the current window becomes the last
		l.batched, l.windowStart = [2]int{l.batched[1], 0}, now
	}
	l.batched[1] = max(l.batched[1], n)
}

// commitDelay is how long the writer of a batch waits before its fsync
// for the records of the writes finishing meanwhile: four times the last
// fsync's duration, at most maxCommitDelay, and none unless an fsync of
// the last 100 to 200 ms made several waiting records durable (one writer
// at a time has no one to wait for: the delay would be all of its
// cost). The caller holds io.
//
// Each fsync costs about 0.1 ms of kernel CPU on the machines measured
// (docs/PERFORMANCE.md), beside its wait: with many concurrent writes on
// busy cores, fewer and fuller fsyncs are most of what an audited write
// costs more than an unaudited one. With 64 writers, this delay took
// batches from about 3 to 7 waiting records per fsync.
func (l *Log) commitDelay() time.Duration {
	if max(l.batched[0], l.batched[1]) < 2 {
		return 0
	}
	return min(4*l.lastSync, maxCommitDelay)
}

// sync appends b[journalHeader:] to the current file and, if durable,
// makes it durable: written into the journal too (b[:journalHeader] is
// room for its header), and the journal flushed to the disk (fdatasync).
// Without a journal, or when the batch does not fit before the journal's
// end, the file itself is flushed (fdatasync: the data and the size that
// finds it) and the journal starts over. Batches nobody waits for go
// into the journal unflushed: the next fdatasync of it takes them too.
func (l *Log) sync(b []byte, durable bool) error {
	off := l.size
	if err := l.appendFile(b[journalHeader:]); err != nil {
		return err
	}
	switch {
	case l.j == nil:
		if !durable {
			return nil
		}
		return l.datasync(l.f)
	case !l.j.fits(len(b)):
		if err := l.datasync(l.f); err != nil {
			return err
		}
		return l.j.reset()
	}
	if err := l.j.write(b, off); err != nil {
		return err
	}
	if !l.j.writeback && l.j.pos > l.j.size/2 {
		// The log's fdatasync when the journal is full has less to write
		// if the kernel starts on it now.
		l.j.writeback = true
		startWriteback(l.f)
	}
	if !durable {
		return nil
	}
	return l.datasync(l.j.f)
}

// datasync flushes f (the log or its journal), timed.
func (l *Log) datasync(f *os.File) error {
	l.fsyncs.Add(1)
	start := time.Now()
	err := datasync(f)
	l.lastSync = time.Since(start)
	l.syncSeconds.Observe(l.lastSync.Seconds())
	return err
}

// rotate appends b, the current file's last records, flushes the file
// (the journal starts over for the next one), renames it to a backup
// named as lumberjack (and so kube-apiserver) names them, opens a new one
// and removes backups beyond MaxBackups.
func (l *Log) rotate(b []byte) error {
	if err := l.appendFile(b); err != nil {
		return err
	}
	if err := l.datasync(l.f); err != nil {
		return err
	}
	if l.j != nil {
		// The journal's entries are the old file's, durable in it now.
		// It starts over before the rename: had it kept them, a crash
		// between the rename and its reset would have them compared with
		// (and, from offset 0, written into) the new file.
		if err := l.j.reset(); err != nil {
			return err
		}
	}
	l.room.release()
	if err := l.f.Close(); err != nil {
		return err
	}
	ext := filepath.Ext(l.cfg.Path)
	base := strings.TrimSuffix(l.cfg.Path, ext)
	ts := time.Now().UTC().Format("2006-01-02T15-04-05.000")
	backup := base + "-" + ts + ext
	for i := 1; fileExists(backup); i++ {
		backup = fmt.Sprintf("%s-%s.%d%s", base, ts, i, ext)
	}
	if err := os.Rename(l.cfg.Path, backup); err != nil {
		return err
	}
	f, err := os.OpenFile(l.cfg.Path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	l.f, l.size = f, 0
	l.room.use(f, 0)
	if err := syncDir(filepath.Dir(l.cfg.Path)); err != nil { // the rename and the new file survive a crash
		return err
	}
	if l.cfg.MaxBackups > 0 {
		bs, _ := Backups(l.cfg.Path)
		for len(bs) > l.cfg.MaxBackups {
			os.Remove(bs[0])
			bs = bs[1:]
		}
	}
	return nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Backups returns the rotated files of the log at path, oldest first.
func Backups(path string) ([]string, error) {
	ext := filepath.Ext(path)
	base := strings.TrimSuffix(path, ext)
	ms, err := filepath.Glob(base + "-[0-9][0-9][0-9][0-9]-*" + ext)
	if err != nil {
		return nil, err
	}
	sort.Strings(ms) // the timestamps sort as names
	return ms, nil
}

// Files returns the backups of the log at path, oldest first, then path:
// the whole chain still on disk.
func Files(path string) ([]string, error) {
	bs, err := Backups(path)
	if err != nil {
		return nil, err
	}
	return append(bs, path), nil
}

// queued is a record's line, in a buffer of lineBufs, with its chain
// fields empty at chain.
type queued struct {
	b     []byte
	chain chainAt
}

// splice appends line to buf with its empty chain fields filled.
func splice(buf []byte, line queued, seq int64, prevHex []byte) []byte {
	p, s := line.chain.prev, line.chain.seq
	if p <= 0 || s <= p {
		panic("audit: record without chain fields")
	}
	buf = append(buf, line.b[:p]...)
	buf = append(buf, prevHex...)
	buf = append(buf, line.b[p:s]...)
	buf = strconv.AppendInt(buf, seq, 10)
	return append(buf, line.b[s:]...)
}

// Collectors are the log's metrics: records written and fsyncs (their
// ratio is the group commit's batching), the fsyncs' durations and the
// responses' waits for their records.
func (l *Log) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "objwatch_audit_records_total", Help: "Audit records written.",
		}, func() float64 { return float64(l.records.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "objwatch_audit_fsyncs_total", Help: "fdatasyncs of the audit log or its journal (each makes every record written before it durable).",
		}, func() float64 { return float64(l.fsyncs.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "objwatch_audit_write_failures_total", Help: "Batches of audit records whose write failed (a full file system) and was taken back whole; their writes were made without records.",
		}, func() float64 { return float64(l.takenBack.Load()) }),
		l.syncSeconds, l.waitSeconds,
	}
}

// waitBuckets span an idle disk's fsync (tens of microseconds) to a
// stalled one's.
var waitBuckets = prometheus.ExponentialBuckets(50e-6, 2, 14)
