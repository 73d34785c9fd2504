// Package cachefile keeps a watch cache's state on disk across restarts:
// the objects as the cache holds them (storage/watchcache.Object: key,
// namespace, name, labels, fields, revision, wire JSON) at one revision,
// so that a restarted server loads them without decoding every stored
// value, then catches up from that revision with a watch (see
// storage/watchcache, "Saved state").
//
// # Format
//
// A file is a header, records and a trailer, integers as unsigned varints
// (encoding/binary's uvarint), strings and byte strings as a uvarint
// length and the bytes:
//
//	header   magic "owcache\n", format (1), prefix, fingerprint, revision,
//	         CRC-32C (Castagnoli) of the header's bytes before it, 4 bytes
//	         little-endian
//	record   tag 1, key, name, namespace, label count, that many
//	         key/value pairs, field count, that many pairs, revision, JSON
//	trailer  tag 0, record count, CRC-32C of every record and the tag and
//	         count, 4 bytes little-endian
//
// Records are in strictly increasing key order, every key under the
// prefix, every revision positive and not above the header's. The
// fingerprint is the caller's: whatever shaped the cached form, so that a
// file is used only by a binary that would have made the same objects
// from the same stored values; a file whose prefix or fingerprint differs
// from what the caller expects is ErrMismatch, any other damage
// ErrDamaged. Nothing read from a file is used before its trailer checks.
//
// # Fingerprints
//
// The fingerprint names the decoding, not the executable: Decoding gives
// the part outside the caller's own code (this format, the Go release,
// the versions of the modules the caller names), and the caller adds a
// version of its own decoding that it bumps by hand, and what the
// resource's objects were defined by. So a new binary whose decoding did
// not change (a rebuild, a release that changed other code) uses the
// files of the one before, which is what makes a rolling upgrade start
// from them; a binary whose decoding changed (its own version bumped, a
// module of the decode at another version, another Go release) discards
// them and lists the store. A decoding changed without its version being
// bumped would serve the old form until the next list; the caller guards
// its version with a golden test of its decoding (server/objects,
// TestCachedFormGolden).
//
// # Concurrency
//
// A File is used by one cache: Save and Load must not run concurrently
// (the cache serializes them). Files of different caches are independent.
package cachefile

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"go/version"
	"hash"
	"hash/crc32"
	"io"
	"iter"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/objwatch/objwatch/storage/watchcache"
)

// Format is the version of the file layout and of the cached form it
// holds; a binary that changes either changes it.
const Format = 1

const magic = "owcache\n"

const (
	tagEnd    = 0
	tagObject = 1
)

// ErrDamaged: the file is not a whole, well-formed cache file (truncated,
// corrupted, out of order, failed checksum).
var ErrDamaged = errors.New("cache file damaged")

// ErrMismatch: the file is well formed but was written for another prefix
// or fingerprint (another decoding, another definition of the resource).
var ErrMismatch = errors.New("cache file does not match")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is what a file says about its objects.
type Header struct {
	Prefix      string
	Fingerprint string
	Rev         int64
}

// Write writes h and objs (in increasing key order, each under h.Prefix)
// to w; it returns how many objects it wrote.
func Write(w io.Writer, h Header, objs iter.Seq[*watchcache.Object]) (int, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	e := encoder{w: bw, sum: crc32.New(castagnoli)}
	e.raw([]byte(magic))
	e.uint(Format)
	e.str(h.Prefix)
	e.str(h.Fingerprint)
	e.uint(uint64(h.Rev))
	e.checksum()
	n := 0
	last := ""
	for o := range objs {
		if n > 0 && o.Key <= last || !strings.HasPrefix(o.Key, h.Prefix) || o.Rev <= 0 || o.Rev > h.Rev {
			return n, fmt.Errorf("cache file: object %q at revision %d out of order or range (after %q, header revision %d)", o.Key, o.Rev, last, h.Rev)
		}
		last = o.Key
		e.uint(tagObject)
		e.str(o.Key)
		e.str(o.Name)
		e.str(o.Namespace)
		e.uint(uint64(len(o.Labels)))
		for k, v := range o.Labels {
			e.str(k)
			e.str(v)
		}
		e.uint(uint64(len(o.Fields)))
		for k, v := range o.Fields {
			e.str(k)
			e.str(v)
		}
		e.uint(uint64(o.Rev))
		e.bytes(o.JSON)
		n++
	}
	e.uint(tagEnd)
	e.uint(uint64(n))
	e.checksum()
	if e.err != nil {
		return n, e.err
	}
	return n, bw.Flush()
}

type encoder struct {
	w   *bufio.Writer
	sum hash.Hash32
	buf [binary.MaxVarintLen64]byte
	err error
}

func (e *encoder) raw(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
		e.sum.Write(b)
	}
}

func (e *encoder) uint(v uint64) { e.raw(e.buf[:binary.PutUvarint(e.buf[:], v)]) }

func (e *encoder) str(s string) {
	e.uint(uint64(len(s)))
	if e.err == nil {
		_, e.err = e.w.WriteString(s)
		e.sum.Write([]byte(s))
	}
}

func (e *encoder) bytes(b []byte) {
	e.uint(uint64(len(b)))
	e.raw(b)
}

// checksum writes the CRC of what was written since the last one and
// starts the next.
func (e *encoder) checksum() {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], e.sum.Sum32())
	if e.err == nil {
		_, e.err = e.w.Write(b[:])
	}
	e.sum.Reset()
}

// Read reads a file of size bytes from r: its header, passed to check
// (whose error ends the read, as ErrMismatch), then each object to add,
// in key order. It returns the header once the trailer has checked; an
// error means nothing added may be used. Bad input is ErrDamaged, never a
// panic or an allocation beyond size.
func Read(r io.Reader, size int64, check func(Header) error, add func(*watchcache.Object)) (Header, error) {
	d := decoder{r: bufio.NewReaderSize(r, 1<<20), sum: crc32.New(castagnoli), left: size}
	var h Header
	if m := d.raw(len(magic)); d.err == nil && string(m) != magic {
		return h, fmt.Errorf("%w: not a cache file", ErrDamaged)
	}
	if f := d.uint(); d.err == nil && f != Format {
		return h, fmt.Errorf("%w: format %d, this binary reads %d", ErrMismatch, f, Format)
	}
	h.Prefix = d.str()
	h.Fingerprint = d.str()
	h.Rev = d.rev(1 << 62)
	d.checksum()
	if d.err != nil {
		return h, d.err
	}
	if err := check(h); err != nil {
		return h, fmt.Errorf("%w: %w", ErrMismatch, err)
	}
	n, last := uint64(0), ""
	for d.err == nil {
		switch tag := d.uint(); {
		case d.err != nil:
		case tag == tagEnd:
			if count := d.uint(); d.err == nil && count != n {
				d.fail("trailer counts %d objects, the file holds %d", count, n)
			}
			d.checksum()
			if d.err == nil && d.left != 0 {
				d.fail("%d bytes after the trailer", d.left)
			}
			if d.err != nil {
				return h, d.err
			}
			return h, nil
		case tag != tagObject:
			d.fail("record tag %d", tag)
		default:
			o := d.object(h)
			if d.err == nil && (n > 0 && o.Key <= last || !strings.HasPrefix(o.Key, h.Prefix)) {
				d.fail("key %q out of order or outside %q (after %q)", o.Key, h.Prefix, last)
			}
			if d.err == nil {
				last = o.Key
				n++
				add(o)
			}
		}
	}
	return h, d.err
}

type decoder struct {
	r    *bufio.Reader
	sum  hash.Hash32
	left int64 // bytes of the file not read yet
	err  error
	// big holds what peek read that did not fit in r's buffer.
	big []byte
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrDamaged, fmt.Sprintf(format, args...))
	}
}

// raw reads n bytes into a new slice (fewer than the file has left:
// ErrDamaged).
func (d *decoder) raw(n int) []byte {
	b := d.peek(n)
	if b == nil {
		return nil
	}
	out := bytes.Clone(b)
	d.skip(n)
	return out
}

// peek returns the next n bytes without consuming them (skip does), in
// the reader's buffer when they fit, else in d.big. Fewer than n bytes
// left is ErrDamaged.
func (d *decoder) peek(n int) []byte {
	if d.err != nil || int64(n) > d.left {
		d.fail("%d bytes wanted, %d left", n, d.left)
		return nil
	}
	if n <= d.r.Size() {
		b, err := d.r.Peek(n)
		if err != nil {
			d.fail("read: %v", err)
			return nil
		}
		return b
	}
	d.big = make([]byte, n)
	if _, err := io.ReadFull(d.r, d.big); err != nil {
		d.fail("read: %v", err)
		return nil
	}
	return d.big
}

// skip consumes the n bytes peek returned, adding them to the checksum.
func (d *decoder) skip(n int) {
	if d.big != nil {
		d.sum.Write(d.big)
		d.big = nil
	} else {
		b, _ := d.r.Peek(n)
		d.sum.Write(b)
		d.r.Discard(n)
	}
	d.left -= int64(n)
}

func (d *decoder) uint() uint64 {
	if d.err != nil {
		return 0
	}
	b := d.peek(int(min(d.left, binary.MaxVarintLen64)))
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.skip(n)
	return v
}

// length reads a length, which must fit in what the file has left.
func (d *decoder) length() int {
	v := d.uint()
	if d.err == nil && v > uint64(d.left) {
		d.fail("length %d, %d bytes left", v, d.left)
		return 0
	}
	return int(v)
}

func (d *decoder) str() string {
	n := d.length()
	b := d.peek(n)
	if b == nil {
		return ""
	}
	str := string(b)
	d.skip(n)
	return str
}

// suffix reads a string that key should hold end bytes before its end
// (the name at its end, the namespace before "/" and the name): it
// returns key's own memory when it does, else a new string.
func (d *decoder) suffix(key string, end int) string {
	n := d.length()
	b := d.peek(n)
	if b == nil {
		return ""
	}
	var str string
	if at := len(key) - end - n; n > 0 && at >= 0 && key[at:at+n] == string(b) {
		str = key[at : at+n]
	} else {
		str = string(b)
	}
	d.skip(n)
	return str
}

// rev reads a revision in 1..max.
func (d *decoder) rev(max int64) int64 {
	v := d.uint()
	if d.err == nil && (v == 0 || v > uint64(max)) {
		d.fail("revision %d outside 1..%d", v, max)
	}
	return int64(v)
}

// pairs reads a count and that many key/value pairs (nil for none).
func (d *decoder) pairs() map[string]string {
	n := d.uint()
	if d.err != nil || n == 0 {
		return nil
	}
	if n > uint64(d.left)/2 {
		d.fail("%d pairs, %d bytes left", n, d.left)
		return nil
	}
	m := make(map[string]string, n)
	for range n {
		k := d.str()
		m[k] = d.str()
		if d.err != nil {
			return nil
		}
	}
	if uint64(len(m)) != n {
		d.fail("repeated key in %d pairs", n)
	}
	return m
}

// object reads one record after its tag. The namespace and name share the
// key's memory when the key ends with them, as it does for every object
// the cache holds.
func (d *decoder) object(h Header) *watchcache.Object {
	o := &watchcache.Object{Key: d.str()}
	o.Name = d.suffix(o.Key, 0)
	o.Namespace = d.suffix(o.Key, len(o.Name)+1)
	o.Labels = labels.Set(d.pairs())
	o.Fields = fields.Set(d.pairs())
	o.Rev = d.rev(h.Rev)
	o.JSON = d.raw(d.length())
	return o
}

// checksum reads a CRC and compares it with the bytes read since the last.
func (d *decoder) checksum() {
	want := d.sum.Sum32()
	b := d.raw(4)
	if d.err == nil && binary.LittleEndian.Uint32(b) != want {
		d.fail("checksum %08x, computed %08x", binary.LittleEndian.Uint32(b), want)
	}
	d.sum.Reset()
}

// File is one cache's file in a directory; it implements
// watchcache.SavedState.
type File struct {
	Path        string
	Prefix      string
	Fingerprint string
}

// Load reads the file, calling add with each object; it returns the
// revision they are at. A missing file is os.ErrNotExist; see Read for
// the others.
func (f *File) Load(add func(*watchcache.Object)) (int64, error) {
	file, err := os.Open(f.Path)
	if err != nil {
		return 0, err
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return 0, err
	}
	h, err := Read(file, st.Size(), func(h Header) error {
		switch {
		case h.Prefix != f.Prefix:
			return fmt.Errorf("prefix %q, want %q", h.Prefix, f.Prefix)
		case h.Fingerprint != f.Fingerprint:
			return fmt.Errorf("fingerprint %q, want %q", h.Fingerprint, f.Fingerprint)
		}
		return nil
	}, add)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", f.Path, err)
	}
	if through, ok := f.through(h.Rev); ok {
		return through, nil
	}
	return h.Rev, nil
}

// Advance records that the state saved at rev is still the state at
// through (nothing under the prefix changed between them), so that Load
// answers through: a small file beside the cache file (PATH.rev: magic,
// rev, through, CRC-32C), replaced atomically. A cache whose objects did
// not change need not rewrite them to keep its saved revision newer than
// etcd's compaction.
func (f *File) Advance(rev, through int64) error {
	b := binary.AppendUvarint([]byte(revMagic), uint64(rev))
	b = binary.AppendUvarint(b, uint64(through))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	tmp := f.Path + ".rev.tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, f.Path+".rev")
}

const revMagic = "owcache rev\n"

// through reads PATH.rev: the revision the state saved at rev holds
// through, if it names rev and is whole.
func (f *File) through(rev int64) (int64, bool) {
	b, err := os.ReadFile(f.Path + ".rev")
	if err != nil || len(b) < len(revMagic)+4 || string(b[:len(revMagic)]) != revMagic ||
		crc32.Checksum(b[:len(b)-4], castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return 0, false
	}
	b = b[len(revMagic) : len(b)-4]
	saved, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, false
	}
	through, m := binary.Uvarint(b[n:])
	if m <= 0 || n+m != len(b) || int64(saved) != rev || int64(through) < rev || through > 1<<62 {
		return 0, false
	}
	return int64(through), true
}

// Save replaces the file with objs at rev: written to a temporary file in
// the same directory, synced, then renamed over it, so a crash leaves the
// old file or the new one, never a part.
func (f *File) Save(rev int64, objs iter.Seq[*watchcache.Object]) (int, error) {
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
		return 0, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.Path), filepath.Base(f.Path)+".*.tmp")
	if err != nil {
		return 0, err
	}
	n, err := Write(tmp, Header{Prefix: f.Prefix, Fingerprint: f.Fingerprint, Rev: rev}, objs)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), f.Path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return 0, fmt.Errorf("save %s: %w", f.Path, err)
	}
	if dir, err := os.Open(filepath.Dir(f.Path)); err == nil {
		dir.Sync()
		dir.Close()
	}
	return n, nil
}

// Discard removes the file (its state is of no use: compacted, or the
// resource is gone).
func (f *File) Discard() error {
	for _, p := range []string{f.Path + ".rev", f.Path} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Name is the file name of a resource's cache in a directory: its
// resource, version and group, which are DNS labels and subdomains and
// so make a safe file name.
func Name(group, version, resource string) string {
	if group == "" {
		group = "core"
	}
	return resource + "." + version + "." + group + ".cache"
}

// Decoding identifies, for fingerprints, the code outside the caller
// that shapes a cached form: the file format, the Go release (major.minor:
// encoding/json's output and strconv's number formatting change only with
// a release, not with a patch) and, for each module path in modules, the
// version the running binary was built with (debug.ReadBuildInfo; its
// replacement's path and version when it is replaced, "none" when the
// binary does not use it). The caller adds the version of its own decoding,
// which its own module's version cannot give: binaries built from one
// commit, or releases whose decoding did not change, get the same
// fingerprint, whatever their executables' sizes and times.
//
// Where the versions do not name the code, Decoding falls back to the
// executable's identity (path, size, modification time), so that such a
// binary keeps discarding the files of any other: a binary without build
// information, one built from a modified work tree (vcs.modified=true:
// the caller's decoding may have changed with its version not bumped
// yet), and one in which a module of modules is replaced by a directory
// (a local replace, whose code changes with no version).
//
// Decoding is safe for concurrent use.
func Decoding(modules ...string) string {
	bi, _ := debug.ReadBuildInfo()
	return decoding(bi, executable, modules)
}

// decoding is Decoding of the build bi (nil: none), exe giving the
// executable's identity.
func decoding(bi *debug.BuildInfo, exe func() string, modules []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "format %d", Format)
	if bi == nil {
		return b.String() + " exe " + exe()
	}
	goVersion := version.Lang(bi.GoVersion)
	if goVersion == "" {
		goVersion = bi.GoVersion // a development toolchain: its whole name
	}
	fmt.Fprintf(&b, " %s", goVersion)
	local := false
	for _, st := range bi.Settings {
		local = local || st.Key == "vcs.modified" && st.Value == "true"
	}
	for _, path := range modules {
		m := module(bi, path)
		switch {
		case m == nil:
			fmt.Fprintf(&b, " %s@none", path)
		case m.Replace != nil:
			fmt.Fprintf(&b, " %s=>%s@%s", path, m.Replace.Path, m.Replace.Version)
			local = local || m.Replace.Version == ""
		default:
			fmt.Fprintf(&b, " %s@%s", path, m.Version)
		}
	}
	if local {
		b.WriteString(" exe " + exe())
	}
	return b.String()
}

// module is the module of bi with path, nil if there is none.
func module(bi *debug.BuildInfo, path string) *debug.Module {
	if bi.Main.Path == path {
		return &bi.Main
	}
	for _, m := range bi.Deps {
		if m.Path == path {
			return m
		}
	}
	return nil
}

// executable is the running executable's path, size and modification
// time ("unknown" when it cannot be found).
func executable() string {
	exe, err := os.Executable()
	if err != nil {
		return "unknown"
	}
	st, err := os.Stat(exe)
	if err != nil {
		return "unknown"
	}
	return fmt.Sprintf("%s %d %d", exe, st.Size(), st.ModTime().UnixNano())
}
