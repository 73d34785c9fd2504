package audit

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/objwatch/objwatch/storage"
)

// chainFields are a record's place in the chain.
type chainFields struct {
	seq  int64
	prev string
}

func parseChain(line []byte) (chainFields, error) {
	var ev struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(line, &ev); err != nil {
		return chainFields{}, fmt.Errorf("not a record: %w", err)
	}
	seq, err := strconv.ParseInt(ev.Annotations[SeqAnnotation], 10, 64)
	if err != nil {
		return chainFields{}, fmt.Errorf("no %s", SeqAnnotation)
	}
	prev := ev.Annotations[PrevHashAnnotation]
	if len(prev) != 2*sha256.Size {
		return chainFields{}, fmt.Errorf("no %s", PrevHashAnnotation)
	}
	return chainFields{seq: seq, prev: prev}, nil
}

// genesis is the prev-hash of the first record of a chain.
var genesis = hex.EncodeToString(make([]byte, sha256.Size))

// Checkpoint is the head of a chain as the server last saved it in etcd.
type Checkpoint struct {
	// Seq is the head record's number; Hash the hex SHA-256 of its line.
	Seq  int64     `json:"seq"`
	Hash string    `json:"hash"`
	Path string    `json:"path,omitempty"`
	Time time.Time `json:"time,omitzero"`
}

// CheckpointKey is the default etcd key of the checkpoints of the log at
// path on this host: each server's log has its own chain.
func CheckpointKey(path string) string {
	abs, _ := filepath.Abs(path)
	host, _ := os.Hostname()
	sum := sha256.Sum256([]byte(host + ":" + abs))
	return "/registry/objwatch.io/audit/checkpoints/" + hex.EncodeToString(sum[:8])
}

// ReadCheckpoint returns the checkpoint stored at key.
func ReadCheckpoint(ctx context.Context, store storage.Interface, key string) (Checkpoint, error) {
	kv, err := store.Get(ctx, key)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("audit checkpoint: %w", err)
	}
	var c Checkpoint
	if err := json.Unmarshal(kv.Value, &c); err != nil {
		return Checkpoint{}, fmt.Errorf("audit checkpoint %s: %w", key, err)
	}
	return c, nil
}

// checkpoints saves the head every CheckpointInterval while it changes.
func (l *Log) checkpoints(ctx context.Context) {
	t := time.NewTicker(l.cfg.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.checkpoint(ctx)
		}
	}
}

// checkpoint saves the head if it changed since the last checkpoint. Only
// the checkpoint goroutine, then Run after it, call it.
func (l *Log) checkpoint(ctx context.Context) {
	l.headMu.Lock()
	h := l.head
	l.headMu.Unlock()
	if h.Seq == 0 || h.Seq == l.saved {
		return
	}
	h.Path, h.Time = l.cfg.Path, time.Now().UTC()
	b, _ := json.Marshal(h)
	key := l.cfg.CheckpointKey
	kv, err := l.cfg.Storage.Get(ctx, key)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		_, err = l.cfg.Storage.Create(ctx, key, b)
	case err == nil:
		_, err = l.cfg.Storage.Update(ctx, key, b, kv.ModRevision)
	}
	if err != nil {
		l.cfg.Log.Warn("audit checkpoint", "key", key, "err", err)
		return
	}
	l.saved = h.Seq
}

// TamperError names the first record where a chain does not hold.
type TamperError struct {
	File   string
	Line   int   // 1-based line in File; 0: the file as a whole
	Seq    int64 // the record's seq where it has one
	Reason string
}

func (e *TamperError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.File, e.Reason)
	}
	return fmt.Sprintf("%s:%d (seq %d): %s", e.File, e.Line, e.Seq, e.Reason)
}

// VerifyResult is what an intact chain holds.
type VerifyResult struct {
	Records        int
	FirstSeq, Head int64
	// Anchored: the first record is the chain's first (seq 1); else older
	// records are in files not given (rotated away).
	Anchored bool
	// Checkpointed: the checkpoint given was found in the chain.
	Checkpointed bool
}

// Verify checks the chain through files, oldest first: every record's
// prev-hash is the hash of the line before it and seqs follow each other;
// with cp (Seq > 0), the checkpointed record is present with the
// checkpointed hash. The error is a *TamperError naming the first record
// that was edited, removed, reordered or truncated.
func Verify(files []string, cp *Checkpoint) (VerifyResult, error) {
	var res VerifyResult
	var prev string
	var seq int64
	var lastFile string
	var lastLine int
	prevFile, prevLine := "", 0
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return res, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 64<<20)
		n := 0
		for sc.Scan() {
			n++
			line := sc.Bytes()
			c, err := parseChain(line)
			if err != nil {
				f.Close()
				return res, &TamperError{File: name, Line: n, Reason: "truncated or edited: " + err.Error()}
			}
			switch {
			case res.Records == 0:
				res.FirstSeq, res.Anchored = c.seq, c.seq == 1
				if c.seq == 1 && c.prev != genesis {
					f.Close()
					return res, &TamperError{File: name, Line: n, Seq: c.seq, Reason: "the first record does not start a chain (edited)"}
				}
			case c.seq != seq+1:
				f.Close()
				return res, &TamperError{File: name, Line: n, Seq: c.seq, Reason: fmt.Sprintf("seq %d follows seq %d: a record was removed or reordered here", c.seq, seq)}
			case c.prev != prev:
				f.Close()
				return res, &TamperError{File: prevFile, Line: prevLine, Seq: seq,
					Reason: fmt.Sprintf("edited: its hash is not the prev-hash of the next record (%s:%d)", filepath.Base(name), n)}
			}
			prevFile, prevLine = name, n
			sum := sha256.Sum256(line)
			prev, seq = hex.EncodeToString(sum[:]), c.seq
			res.Records++
			if cp != nil && c.seq == cp.Seq {
				if prev != cp.Hash {
					f.Close()
					return res, &TamperError{File: name, Line: n, Seq: c.seq, Reason: "differs from the checkpoint in etcd: the log was rewritten"}
				}
				res.Checkpointed = true
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return res, &TamperError{File: name, Line: n + 1, Reason: "truncated or unreadable: " + err.Error()}
		}
		lastFile, lastLine = name, n
	}
	res.Head = seq
	if cp != nil && cp.Seq > 0 && !res.Checkpointed {
		if seq < cp.Seq {
			return res, &TamperError{File: lastFile, Line: lastLine, Seq: seq,
				Reason: fmt.Sprintf("the log ends at seq %d but etcd's checkpoint is at seq %d: truncated", seq, cp.Seq)}
		}
		return res, &TamperError{File: files[0], Reason: fmt.Sprintf("starts after etcd's checkpoint (seq %d): older files not given", cp.Seq)}
	}
	return res, nil
}
