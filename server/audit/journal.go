package audit

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"
)

// The journal is a file of fixed size beside the log (PATH.journal) that
// makes batches durable without fsyncing the log. Appending to the log
// changes its size, so every fdatasync of the log commits the file
// system's journal, and etcd's WAL fsyncs on the same file system wait
// behind those commits. The journal's blocks are written once, with
// zeros, when it is created; after that each batch overwrites blocks the
// file already has, and an fdatasync of it flushes the data alone.
//
// Each batch the log is written goes into the journal too, as an entry:
//
//	magic "OWJ1" | crc32c of the rest | pass (8) | log offset (8) | length (4) | 0 (4) | the batch's bytes
//
// (little-endian), one after the other from the start of the file. The
// log offset is where the batch starts in the log; pass is a random
// number drawn each time the journal starts over, so entries of an
// earlier pass left further on in the file are not taken for this one.
// The journal starts over, after an fdatasync of the log itself (which
// makes every entry so far redundant), when a batch would not fit before
// its end, when the log is rotated, and when the log is opened. Starting
// over zeroes the first header and fsyncs the journal, so a crash right
// after it finds an empty journal.
//
// So at any time the log on disk holds every record up to the journal's
// first entry's log offset, and the journal's entries, contiguous in the
// log from there, hold every batch written since. Opening the log after a
// crash (New) compares them with the log: bytes of the log that are
// missing or zero (the file system had not written them) are written
// from the journal; then the log is fsynced and the journal starts over.
// A log that holds other bytes there, or that is shorter than the
// journal's start, was changed while the server was down: the journal is
// kept beside it (PATH.journal-TIMESTAMP) and a warning logged, and the
// log is used as it is (`objwatch audit verify` tells what was changed).
// A kill -9 loses nothing either way: what the server wrote is in the
// kernel's page cache, and the journal matters only when the machine
// itself goes down.

const (
	journalMagic  = "OWJ1"
	journalHeader = 32
	// DefaultJournalSize is the journal's size when Config.JournalSize
	// is 0.
	DefaultJournalSize = 16 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// journal is the ring beside the log; it is owned by the holder of the
// log's io token (and New before it).
type journal struct {
	f    *os.File
	path string
	size int64  // the file's size, fixed
	pos  int64  // where the next entry goes
	pass uint64 // the current pass's entries carry it
	// writeback: the log's writeback was started in this pass.
	writeback bool
}

// journalPath is the journal of the log at path.
func journalPath(path string) string { return path + ".journal" }

// openJournal opens the journal at path, creating it (size bytes of
// zeros, fsynced) if it does not exist or has another size. It returns
// the log offset and the bytes of the last pass's entries, for recover;
// the journal must be reset before it is written.
func openJournal(path string, size int64) (*journal, int64, []byte, error) {
	if size < 2*journalHeader {
		return nil, 0, nil, fmt.Errorf("journal size %d is too small", size)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	var off int64
	var data []byte
	if err == nil {
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, 0, nil, err
		}
		if off, data, err = scanJournal(f, st.Size()); err != nil {
			f.Close()
			return nil, 0, nil, err
		}
		if st.Size() == size {
			return &journal{f: f, path: path, size: size}, off, data, nil
		}
		f.Close() // a journal of another size: read, then made anew
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil, err
	}
	if f, err = createJournal(path, size); err != nil {
		return nil, 0, nil, err
	}
	return &journal{f: f, path: path, size: size}, off, data, nil
}

// createJournal writes a journal of size zero bytes and fsyncs it and
// its directory.
func createJournal(path string, size int64) (*os.File, error) {
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	zeros := make([]byte, min(size, 1<<20))
	for off := int64(0); off < size && err == nil; off += int64(len(zeros)) {
		_, err = f.Write(zeros[:min(int64(len(zeros)), size-off)])
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	return f, nil
}

// scanJournal reads the entries of the pass at the journal's start: their
// log offset and bytes, nothing if the first header is not an entry's.
// It stops at the first header that is not one of the pass's entries,
// contiguous with the one before, or whose checksum fails (an entry cut
// by a crash: never acknowledged).
func scanJournal(r io.ReaderAt, size int64) (int64, []byte, error) {
	var data []byte
	var first, pass uint64
	var hdr [journalHeader]byte
	for pos := int64(0); pos+journalHeader <= size; {
		if _, err := r.ReadAt(hdr[:], pos); err != nil {
			return 0, nil, fmt.Errorf("reading %d: %w", pos, err)
		}
		p, off, n := binary.LittleEndian.Uint64(hdr[8:]), binary.LittleEndian.Uint64(hdr[16:]), int64(binary.LittleEndian.Uint32(hdr[24:]))
		if string(hdr[:4]) != journalMagic || n > size-pos-journalHeader ||
			(data != nil && (p != pass || off != first+uint64(len(data)))) {
			break
		}
		b := make([]byte, journalHeader+n)
		if _, err := r.ReadAt(b, pos); err != nil {
			return 0, nil, fmt.Errorf("reading %d: %w", pos, err)
		}
		if crc32.Checksum(b[8:], castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
			break
		}
		if data == nil {
			first, pass, data = off, p, []byte{}
		}
		data = append(data, b[journalHeader:]...)
		pos += journalHeader + n
	}
	return int64(first), data, nil
}

// fits reports whether an entry of n bytes (its header included) fits
// before the journal's end.
func (j *journal) fits(n int) bool { return j.pos+int64(n) <= j.size }

// write writes b, whose first journalHeader bytes are room for the
// header, as the next entry: a batch written at off in the log.
func (j *journal) write(b []byte, off int64) error {
	encodeEntry(b, j.pass, off)
	if _, err := j.f.WriteAt(b, j.pos); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	j.pos += int64(len(b))
	return nil
}

// encodeEntry fills the header room at b's start for the entry of pass
// holding b[journalHeader:], written at off in the log.
func encodeEntry(b []byte, pass uint64, off int64) {
	copy(b, journalMagic)
	binary.LittleEndian.PutUint64(b[8:], pass)
	binary.LittleEndian.PutUint64(b[16:], uint64(off))
	binary.LittleEndian.PutUint32(b[24:], uint32(len(b)-journalHeader))
	binary.LittleEndian.PutUint32(b[28:], 0)
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[8:], castagnoli))
}

// reset starts a new pass: the first header is zeroed and fsynced. The
// caller has made the log durable first.
func (j *journal) reset() error {
	var zero [journalHeader]byte
	if _, err := j.f.WriteAt(zero[:], 0); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if err := datasync(j.f); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	var p [8]byte
	rand.Read(p[:])
	j.pos, j.pass, j.writeback = 0, binary.LittleEndian.Uint64(p[:]), false
	return nil
}

// setAside renames the journal to PATH-TIMESTAMP and creates a new one.
func (j *journal) setAside() (string, error) {
	aside := j.path + "-" + time.Now().UTC().Format("2006-01-02T15-04-05.000")
	if err := j.f.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(j.path, aside); err != nil {
		return "", err
	}
	f, err := createJournal(j.path, j.size)
	if err != nil {
		return "", err
	}
	j.f = f
	return aside, nil
}

// recoverLog brings the log f up to date with the journal's entries (the
// bytes data, written at off): the bytes of the log there that are
// missing or zero are written from data. It returns why not, if f was
// changed since (the journal does not continue it); then f is untouched.
func recoverLog(f *os.File, off int64, data []byte) (bool, string, error) {
	st, err := f.Stat()
	if err != nil {
		return false, "", err
	}
	size := st.Size()
	if size < off {
		return false, fmt.Sprintf("the log has %d bytes, the journal continues it from byte %d", size, off), nil
	}
	if off > 0 {
		// The journal's first record must follow the log's line before it.
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			return false, "the journal holds no whole record", nil
		}
		c, err := parseChain(data[:nl])
		if err != nil {
			return false, fmt.Sprintf("the journal's first record: %v", err), nil
		}
		before, err := lineBefore(f, off)
		if err != nil {
			return false, "", err
		}
		if sum := sha256.Sum256(before); before == nil || hex.EncodeToString(sum[:]) != c.prev {
			return false, fmt.Sprintf("the record before byte %d is not the one the journal's first record follows", off), nil
		}
	}
	cur := make([]byte, min(size-off, int64(len(data))))
	if _, err := f.ReadAt(cur, off); err != nil && err != io.EOF {
		return false, "", err
	}
	i := 0
	for i < len(cur) && cur[i] == data[i] {
		i++
	}
	end := off + int64(len(data))
	switch {
	case i < len(cur) && cur[i] != 0:
		return false, fmt.Sprintf("the log differs from its journal at byte %d", off+int64(i)), nil
	case i < len(data):
		if _, err := f.WriteAt(data[i:], off+int64(i)); err != nil {
			return false, "", err
		}
		if err := f.Truncate(end); err != nil {
			return false, "", err
		}
		return true, "", datasync(f)
	case size > end:
		// Records written after the journal's last entry that did not
		// reach it; kept unless the file system left zeros among them.
		rest := make([]byte, size-end)
		if _, err := f.ReadAt(rest, end); err != nil && err != io.EOF {
			return false, "", err
		}
		if bytes.IndexByte(rest, 0) >= 0 {
			if err := f.Truncate(end); err != nil {
				return false, "", err
			}
			return true, "", datasync(f)
		}
	}
	return true, "", nil
}

// lineBefore returns the line of r that ends with the newline at end-1,
// without it; nil if there is no newline there.
func lineBefore(r io.ReaderAt, end int64) ([]byte, error) {
	var nl [1]byte
	if end <= 0 {
		return nil, nil
	}
	if _, err := r.ReadAt(nl[:], end-1); err != nil || nl[0] != '\n' {
		return nil, err
	}
	for chunk := int64(64 << 10); ; chunk *= 4 {
		start := max(end-1-chunk, 0)
		b := make([]byte, end-1-start)
		if _, err := r.ReadAt(b, start); err != nil && err != io.EOF {
			return nil, err
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			return b[i+1:], nil
		}
		if start == 0 {
			return b, nil
		}
	}
}

// syncDir fsyncs a directory: the names created or renamed in it survive
// a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
