package audit

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// burst appends n durable records (URIs /r/from.. /r/from+n-1) from 16
// goroutines and waits for each, without Run: the batches' leaders write
// them, as in a server's requests.
func burst(t *testing.T, l *Log, from, n int) {
	t.Helper()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				ev := &auditv1.Event{Level: auditv1.LevelMetadata, AuditID: "x", Stage: auditv1.StageResponseComplete,
					Verb: "create", User: userInfo(ServerUser), RequestURI: fmt.Sprintf("/r/%d", i),
					StageTimestamp: metav1.NowMicro(),
					Annotations:    map[string]string{"pad": strings.Repeat("p", 1500)}}
				if err := l.append(ev, nil, true).Wait(); err != nil {
					t.Errorf("record %d: %v", i, err)
				}
			}
		})
	}
	for i := from; i < from+n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

// crash leaves l as a machine that went down would: its files are closed
// without the final fsync and journal reset that Run ends with.
func crash(l *Log) {
	l.f.Close()
	l.j.f.Close()
}

// refill makes sure the journal of l (at path) holds records after a
// burst of n: a batch that does not fit in the journal is made durable by
// the log's own fsync and starts the journal over empty, so a burst whose
// last batch was one leaves it empty; a few more records fill it again.
// It returns the records written in all.
func refill(t *testing.T, l *Log, path string, n int) int {
	t.Helper()
	for tries := 0; tries < 3; tries++ {
		if _, held := journalStart(t, path); held > 0 {
			break
		}
		burst(t, l, n, 5)
		n += 5
	}
	return n
}

// journalStart is the log offset of the journal's entries and their
// length.
func journalStart(t *testing.T, path string) (int64, int) {
	t.Helper()
	f, err := os.Open(journalPath(path))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	off, data, err := scanJournal(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	return off, len(data)
}

// uris returns the request URIs recorded in the files, in order.
func uris(t *testing.T, files []string) []string {
	t.Helper()
	var out []string
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		err = Scan(f, Filter{}, func(ev *auditv1.Event, _ []byte) bool { out = append(out, ev.RequestURI); return true })
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// wantURIs checks that /r/0 ... /r/n-1 are each recorded once.
func wantURIs(t *testing.T, got []string, n int) {
	t.Helper()
	seen := map[string]int{}
	for _, u := range got {
		seen[u]++
	}
	for i := range n {
		if c := seen[fmt.Sprintf("/r/%d", i)]; c != 1 {
			t.Errorf("/r/%d recorded %d times, want once", i, c)
		}
	}
	if len(got) != n {
		t.Errorf("%d records, want %d", len(got), n)
	}
}

// TestJournalRestoresLostRecords: records made durable by the journal
// alone, which the file system had not written to the log when the
// machine went down (emulated by cutting or zeroing the log from the
// journal's start on), are back in the log when it is opened, in a chain
// that verifies; a journal that wrapped around holds what the last log
// fsync did not.
func TestJournalRestoresLostRecords(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, f *os.File, off int64, n int)
	}{
		{"cut", func(t *testing.T, f *os.File, off int64, n int) {
			if err := f.Truncate(off + int64(n)/3); err != nil {
				t.Fatal(err)
			}
		}},
		{"cut at the journal's start", func(t *testing.T, f *os.File, off int64, n int) {
			if err := f.Truncate(off); err != nil {
				t.Fatal(err)
			}
		}},
		{"zeros", func(t *testing.T, f *os.File, off int64, n int) {
			if _, err := f.WriteAt(make([]byte, n/2), off+int64(n)/4); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			l, err := New(Config{Path: path, JournalSize: 64 << 10, Log: quiet})
			if err != nil {
				t.Fatal(err)
			}
			burst(t, l, 0, 300) // ~550 KB of records: the journal wraps
			total := refill(t, l, path, 300)
			crash(l)
			off, n := journalStart(t, path)
			if off == 0 || n == 0 {
				t.Fatalf("journal starts at log offset %d with %d bytes; want a wrapped journal holding records", off, n)
			}
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			tc.lose(t, f, off, n)
			f.Close()

			l, err = New(Config{Path: path, JournalSize: 64 << 10, Log: quiet})
			if err != nil {
				t.Fatal(err)
			}
			burst(t, l, total, 10)
			crash(l)
			wantURIs(t, uris(t, []string{path}), total+10)
			if res, err := Verify([]string{path}, nil); err != nil || res.Records != total+10 || !res.Anchored {
				t.Errorf("Verify = %+v, %v", res, err)
			}
		})
	}
}

// TestJournalAcrossRotation: the journal starts over with each rotated
// file; what a crash after rotations loses from the current file comes
// back, and the files form one chain.
func TestJournalAcrossRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	cfg := Config{Path: path, MaxSizeMB: 1, JournalSize: 256 << 10, Log: quiet}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	burst(t, l, 0, 800) // ~1.5 MB: one rotation at least
	total := refill(t, l, path, 800)
	crash(l)
	off, n := journalStart(t, path)
	if n == 0 {
		t.Fatal("the journal holds nothing after the burst")
	}
	if err := os.Truncate(path, off); err != nil {
		t.Fatal(err)
	}
	if l, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	crash(l)
	files, err := Files(path)
	if err != nil || len(files) < 2 {
		t.Fatalf("Files = %v, %v; want a rotated file", files, err)
	}
	wantURIs(t, uris(t, files), total)
	if res, err := Verify(files, nil); err != nil || res.Records != total {
		t.Errorf("Verify = %+v, %v", res, err)
	}
}

// TestJournalEmptyAfterRun: a log closed by Run is durable itself; its
// journal holds nothing, so a log edited afterwards is not "restored".
func TestJournalEmptyAfterRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	writeLog(t, path, 20, 0)
	if _, n := journalStart(t, path); n != 0 {
		t.Errorf("journal after Run holds %d bytes, want none", n)
	}
}

// TestJournalSetAside: a log edited (or cut below the journal's start)
// while the server was down is used as it is; the journal, which does not
// continue it, is kept beside it and a new one started.
func TestJournalSetAside(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(b []byte, off int64) []byte
	}{
		{"edited", func(b []byte, off int64) []byte {
			i := off + int64(bytes.Index(b[off:], []byte("system:apiserver")))
			b[i+int64(len("system:apiserve"))] = 'X'
			return b
		}},
		{"record before the journal edited", func(b []byte, off int64) []byte {
			// The journal's bytes are all there; the record they chain
			// to is not the one they were written after.
			i := bytes.LastIndex(b[:off], []byte("system:apiserver"))
			b[i+len("system:apiserve")] = 'X'
			return b
		}},
		{"cut below the journal", func(b []byte, off int64) []byte {
			return b[:bytes.LastIndexByte(b[:off-1], '\n')+1]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			cfg := Config{Path: path, JournalSize: 64 << 10, Log: quiet}
			l, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			burst(t, l, 0, 100)
			crash(l)
			off, _ := journalStart(t, path)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			changed := tc.change(b, off)
			if err := os.WriteFile(path, changed, 0o600); err != nil {
				t.Fatal(err)
			}
			if l, err = New(cfg); err != nil {
				t.Fatal(err)
			}
			crash(l)
			if after, _ := os.ReadFile(path); !bytes.Equal(after, changed) {
				t.Errorf("the changed log was rewritten (%d bytes, was %d)", len(after), len(changed))
			}
			aside, _ := filepath.Glob(journalPath(path) + "-*")
			if len(aside) != 1 {
				t.Errorf("journals set aside: %v, want one", aside)
			}
			if _, n := journalStart(t, path); n != 0 {
				t.Errorf("the new journal holds %d bytes", n)
			}
		})
	}
}

// TestNoJournal: with JournalSize < 0 there is no journal file and each
// batch fsyncs the log.
func TestNoJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := New(Config{Path: path, JournalSize: -1, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	burst(t, l, 0, 20)
	l.f.Close()
	if _, err := os.Stat(journalPath(path)); !os.IsNotExist(err) {
		t.Errorf("journal file: %v, want none", err)
	}
	wantURIs(t, uris(t, []string{path}), 20)
}

// FuzzScanJournal: scanJournal reads any bytes without failing, and of a
// journal whose pass is followed by anything (an earlier pass's entries,
// a cut entry, garbage) it returns at least the pass's batches, in order.
func FuzzScanJournal(f *testing.F) {
	f.Add([]byte("a\nbb\n"), []byte("ccc\n"), uint64(7), int64(100), []byte{})
	f.Add([]byte("x\n"), []byte("y\n"), uint64(1), int64(0), []byte("OWJ1garbage after the pass"))
	f.Fuzz(func(t *testing.T, b1, b2 []byte, pass uint64, off int64, tail []byte) {
		if off < 0 || len(b1) == 0 {
			return
		}
		var j []byte
		at := off
		for _, b := range [][]byte{b1, b2} {
			e := append(make([]byte, journalHeader), b...)
			encodeEntry(e, pass, at)
			j = append(j, e...)
			at += int64(len(b))
		}
		j = append(j, tail...)
		got, data, err := scanJournal(bytes.NewReader(j), int64(len(j)))
		if err != nil {
			t.Fatalf("scanJournal = %v", err)
		}
		want := append(bytes.Clone(b1), b2...)
		if got != off || !bytes.HasPrefix(data, want) {
			t.Fatalf("scanJournal = %d, %q; want %d, %q...", got, data, off, want)
		}
		// Any bytes at all: no failure, nothing beyond the file.
		if _, data, err := scanJournal(bytes.NewReader(tail), int64(len(tail))); err != nil || len(data) > len(tail) {
			t.Fatalf("scanJournal(tail) = %d bytes, %v", len(data), err)
		}
	})
}
