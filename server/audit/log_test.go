package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// runLog opens a log with cfg and runs it; stop ends Run and waits for
// it (the log is closed then).
func runLog(tb testing.TB, cfg Config) (l *Log, stop func()) {
	tb.Helper()
	l, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	return l, func() { cancel(); <-done }
}

// writeLog writes n records to a log at path (maxMB rotates) and returns
// its final checkpoint.
func writeLog(t *testing.T, path string, n, maxMB int) Checkpoint {
	t.Helper()
	l, stop := runLog(t, Config{Path: path, MaxSizeMB: maxMB, Log: quiet})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ev := &auditv1.Event{Level: auditv1.LevelMetadata, AuditID: "x", Stage: auditv1.StageResponseComplete,
				Verb: "create", User: userInfo(ServerUser), RequestURI: fmt.Sprintf("/r/%d", i),
				StageTimestamp: metav1.NowMicro(),
				Annotations:    map[string]string{"pad": strings.Repeat("p", 2000)}}
			if err := l.append(ev, nil, true).Wait(); err != nil {
				t.Errorf("record %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	stop()
	l.headMu.Lock()
	defer l.headMu.Unlock()
	return l.head
}

func lines(t *testing.T, path string) [][]byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
}

func writeLines(t *testing.T, path string, ls [][]byte) {
	if err := os.WriteFile(path, bytes.Join(ls, nil), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyNamesTheTamperedRecord: each kind of tampering fails at the
// record it touched.
func TestVerifyNamesTheTamperedRecord(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	cp := writeLog(t, path, 20, 0)
	if res, err := Verify([]string{path}, &cp); err != nil || res.Records != 20 || !res.Anchored || !res.Checkpointed {
		t.Fatalf("Verify(intact) = %+v, %v", res, err)
	}
	orig := lines(t, path)
	clone := func() [][]byte {
		out := make([][]byte, len(orig))
		for i, l := range orig {
			out[i] = bytes.Clone(l)
		}
		return out
	}
	rechain := func(ls [][]byte) [][]byte {
		// An attacker who rewrites the whole file recomputes every hash.
		prev := genesis
		for i, l := range ls {
			c, _ := parseChain(bytes.TrimSuffix(l, []byte("\n")))
			l = bytes.Replace(l, []byte(`"`+PrevHashAnnotation+`":"`+c.prev+`"`), []byte(`"`+PrevHashAnnotation+`":"`+prev+`"`), 1)
			sum := sha256.Sum256(bytes.TrimSuffix(l, []byte("\n")))
			prev = hex.EncodeToString(sum[:])
			ls[i] = l
		}
		return ls
	}
	for _, tc := range []struct {
		name   string
		tamper func([][]byte) [][]byte
		cp     *Checkpoint
		line   int
		reason string
	}{
		{"edited", func(ls [][]byte) [][]byte {
			ls[6] = bytes.Replace(ls[6], []byte("system:apiserver"), []byte("system:apiserveX"), 1)
			return ls
		}, nil, 7, "edited"},
		{"removed", func(ls [][]byte) [][]byte { return append(ls[:4], ls[5:]...) }, nil, 5, "removed"},
		{"reordered", func(ls [][]byte) [][]byte { ls[9], ls[10] = ls[10], ls[9]; return ls }, nil, 10, "reordered"},
		{"cut mid-record", func(ls [][]byte) [][]byte { ls[19] = ls[19][:100]; return ls }, nil, 20, "truncated"},
		{"last removed", func(ls [][]byte) [][]byte { return ls[:19] }, &cp, 19, "truncated"},
		{"last edited", func(ls [][]byte) [][]byte { ls[19] = bytes.Replace(ls[19], []byte("/r/"), []byte("/R/"), 1); return ls }, &cp, 20, "rewritten"},
		{"rewritten", func(ls [][]byte) [][]byte {
			ls[2] = bytes.Replace(ls[2], []byte("create"), []byte("update"), 1)
			return rechain(ls)
		}, &cp, 20, "rewritten"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "audit.log")
			writeLines(t, p, tc.tamper(clone()))
			_, err := Verify([]string{p}, tc.cp)
			var te *TamperError
			if !errors.As(err, &te) || te.Line != tc.line || !strings.Contains(te.Reason, tc.reason) {
				t.Errorf("Verify = %v, want a TamperError at line %d (%s)", err, tc.line, tc.reason)
			}
		})
	}
}

// TestChainContinuesAcrossRotation: rotated files and the current one form
// one chain, also after the log is reopened.
func TestChainContinuesAcrossRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	writeLog(t, path, 600, 1) // ~1.4 MB of records: at least one rotation
	cp := writeLog(t, path, 10, 1)
	files, err := Files(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("files = %v, want a rotated one", files)
	}
	res, err := Verify(files, &cp)
	if err != nil || res.Records != 610 || !res.Anchored {
		t.Fatalf("Verify(%v) = %+v, %v", files, res, err)
	}
	// Dropping the oldest file leaves a chain that is not anchored.
	res, err = Verify(files[1:], &cp)
	if err != nil || res.Anchored {
		t.Errorf("Verify(without the oldest) = %+v, %v; want intact, not anchored", res, err)
	}
}

// TestReopenCutsPartialRecord: a record cut by a crash is not acknowledged
// and is dropped when the log is reopened; the chain goes on.
func TestReopenCutsPartialRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	writeLog(t, path, 5, 0)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"kind":"Event","level":"Meta`)
	f.Close()
	cp := writeLog(t, path, 5, 0)
	if res, err := Verify([]string{path}, &cp); err != nil || res.Records != 10 {
		t.Fatalf("Verify = %+v, %v", res, err)
	}
}

// TestGroupCommit: concurrent records share fsyncs.
func TestGroupCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, stop := runLog(t, Config{Path: path})
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 20 {
				if err := l.append(&auditv1.Event{Verb: "create"}, nil, true).Wait(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	stop()
	s := l.Stats()
	t.Logf("%d records, %d fsyncs: %.1f records per fsync", s.Records, s.Fsyncs, float64(s.Records)/float64(s.Fsyncs))
	if s.Records != 64*20 || s.Fsyncs >= s.Records/2 {
		t.Errorf("Stats = %+v, want 1280 records in fewer than 640 fsyncs", s)
	}
	if err := l.append(&auditv1.Event{}, nil, true).Wait(); !errors.Is(err, ErrClosed) {
		t.Errorf("append after Run = %v, want ErrClosed", err)
	}
}

// TestLoneWriterDoesNotWait: a writer alone fsyncs each record at once,
// with no commit delay (there is no one to wait for); after an fsync made
// several waiting records durable, a batch's writer waits, bounded, until
// two windows without such a batch have passed.
func TestLoneWriterDoesNotWait(t *testing.T) {
	l, stop := runLog(t, Config{Path: filepath.Join(t.TempDir(), "audit.log")})
	defer stop()
	for range 10 {
		if err := l.append(&auditv1.Event{Verb: "create"}, nil, true).Wait(); err != nil {
			t.Fatal(err)
		}
	}
	l.io <- struct{}{} // the writer's state, as a batch's writer sees it
	d, n := l.commitDelay(), max(l.batched[0], l.batched[1])
	l.sawBatch(5, time.Now())
	busy := l.commitDelay()
	l.sawBatch(1, time.Now().Add(3*batchWindow))
	idle := l.commitDelay()
	<-l.io
	if s := l.Stats(); s.Fsyncs != 10 || d != 0 || n != 1 {
		t.Errorf("lone writer: %d fsyncs for 10 records, last batch %d records, commit delay %v; want 10, 1, 0", s.Fsyncs, n, d)
	}
	if busy <= 0 || busy > maxCommitDelay {
		t.Errorf("commit delay after a batch of 5 = %v, want in (0, %v]", busy, maxCommitDelay)
	}
	if idle != 0 {
		t.Errorf("commit delay two windows after the batch of 5 = %v, want 0", idle)
	}
}
