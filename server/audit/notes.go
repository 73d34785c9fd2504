package audit

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/objwatch/objwatch/server/objects"
	"github.com/objwatch/objwatch/storage"
)

// RecoveredAnnotation marks a record written from its note after a crash.
const RecoveredAnnotation = "objwatch.io/recovered"

// noteEpoch is how long notes share an epoch, the unit of their deletion.
const noteEpoch = time.Second

// notes tracks the notes of this process: which epochs still have
// records not yet on disk.
type notes struct {
	prefix string // this log's note names: prefix + epoch/seq
	start  int64  // this process's first epoch: older ones are recovered

	mu         sync.Mutex
	epoch      int64
	seq        uint64
	unresolved map[int64]int // epoch → notes whose records are not on disk
}

func newNotes(checkpointKey string) *notes {
	now := time.Now().UnixMilli()
	return &notes{prefix: "audit/" + path.Base(checkpointKey) + "/", start: now, epoch: now, unresolved: map[int64]int{}}
}

// epochPrefix is the key prefix of the notes of epoch e.
func (n *notes) epochPrefix(e int64) string {
	return storage.NotesPrefix + n.prefix + fmt.Sprintf("%016x", e) + "/"
}

// add takes a note name in the current epoch, unresolved until resolve.
func (n *notes) add() (name string, epoch int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.seq++
	n.unresolved[n.epoch]++
	return fmt.Sprintf("%s%016x/%016x", n.prefix, n.epoch, n.seq), n.epoch
}

// resolve marks notes of the given epochs done: their records are on
// disk, or none will be written.
func (n *notes) resolve(epochs []int64) {
	n.mu.Lock()
	for _, e := range epochs {
		n.unresolved[e]--
	}
	n.mu.Unlock()
}

// rotate starts a new epoch and returns the earlier ones that are done.
func (n *notes) rotate() []int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.epoch = max(n.epoch+1, time.Now().UnixMilli())
	var done []int64
	for e, c := range n.unresolved {
		if c == 0 && e < n.epoch {
			done = append(done, e)
		}
	}
	return done
}

// deleted forgets epoch e, whose notes are gone from etcd.
func (n *notes) deleted(e int64) {
	n.mu.Lock()
	if n.unresolved[e] == 0 {
		delete(n.unresolved, e)
	}
	n.mu.Unlock()
}

// cleanNotes deletes, every noteEpoch until ctx ends, the epochs whose
// records are all on disk.
func (l *Log) cleanNotes(ctx context.Context) {
	t := time.NewTicker(noteEpoch)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, e := range l.notes.rotate() {
			if _, err := l.cfg.Storage.DeletePrefix(ctx, l.notes.epochPrefix(e)); err != nil {
				if ctx.Err() == nil {
					l.cfg.Log.Warn("audit: delete notes", "epoch", e, "err", err)
				}
				continue // again next time
			}
			l.notes.deleted(e)
		}
	}
}

// Committing is the object service's Committing hook: it makes the
// record the write's request will have when the write succeeds a note of
// the write, so that etcd commits the two together (see the package
// doc, "Durability"). Writes no request's record covers (the server's
// own) are left alone: nobody waits for their records.
func (l *Log) Committing(ctx context.Context, w objects.Write) context.Context {
	r := RecordFrom(ctx)
	if r == nil || l.cfg.Storage == nil {
		return ctx
	}
	patch, paths, err := Diff(w.Old, w.New)
	if err != nil {
		return ctx // Written logs it; the record is fsynced before the response
	}
	ann := []string{PatchAnnotation, string(patch), ChangedPathsAnnotation, string(paths)}
	r.mu.Lock()
	first := !r.wrote
	ev := r.ev
	reason, body := r.reason, r.requestBody
	r.mu.Unlock()
	if first {
		if r.decision.omits(auditv1.StageResponseComplete) {
			return ctx
		}
		ev.Annotations = withAnnotations(ev.Annotations, ann...)
		code := 200
		if w.Old == nil {
			code = 201
		}
		var reqBody []byte
		if body != nil {
			reqBody = body()
		}
		if obj := cmp.Or(w.New, w.Old); ev.ObjectRef != nil && ev.ObjectRef.Name == "" && obj != nil {
			ref := *ev.ObjectRef
			ref.Name = obj.GetName() // a create's, as Written sets it
			ev.ObjectRef = &ref
		}
		ev = r.complete(ev, Response{Code: code, Mutating: true, RequestBody: reqBody}, true, reason)
	} else {
		ev = r.further(ev, w, ann)
	}
	name, epoch := l.notes.add()
	r.mu.Lock()
	r.notes = append(r.notes, epoch)
	r.diffed = diffed{old: w.Old, new: w.New, patch: patch, paths: paths}
	r.mu.Unlock()
	return storage.WithNote(ctx, name, appendEvent(make([]byte, 0, 1024), &ev))
}

// recover writes the records of the notes an earlier process of this log
// left in etcd that its files lack, then deletes those notes. It is
// retried until it succeeds or ctx ends.
func (l *Log) recover(ctx context.Context) {
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		err := l.recoverOnce(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		l.cfg.Log.Warn("audit: recovering records from etcd", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

func (l *Log) recoverOnce(ctx context.Context) error {
	all := storage.NotesPrefix + l.notes.prefix
	lr, err := l.cfg.Storage.List(ctx, all, storage.ListOptions{})
	if err != nil {
		return err
	}
	type found struct {
		ev  auditv1.Event
		rev int64
	}
	var pending []found
	epochs := map[int64]bool{}
	want := map[string]bool{}
	for _, kv := range lr.KVs {
		e, err := strconv.ParseInt(strings.SplitN(strings.TrimPrefix(kv.Key, all), "/", 2)[0], 16, 64)
		if err != nil || e >= l.notes.start {
			continue // not an earlier process's
		}
		epochs[e] = true
		var ev auditv1.Event
		if err := json.Unmarshal(kv.Value, &ev); err != nil {
			l.cfg.Log.Error("audit: unreadable note", "key", kv.Key, "err", err)
			continue
		}
		pending = append(pending, found{ev, kv.ModRevision})
		want[recordIdentity(&ev)] = true
	}
	if len(pending) > 0 {
		files, err := Files(l.cfg.Path)
		if err != nil {
			return err
		}
		if len(files) > 2 {
			files = files[len(files)-2:] // a crash's records are in the newest two
		}
		err = ScanFiles(files, Filter{}, func(ev *auditv1.Event, _ []byte) bool {
			if ev.Stage == auditv1.StageResponseComplete {
				delete(want, recordIdentity(ev))
			}
			return true
		})
		if err != nil {
			return err
		}
		var last *batch
		n := 0
		for _, p := range pending {
			if !want[recordIdentity(&p.ev)] {
				continue
			}
			ev := p.ev
			ev.Annotations = withAnnotations(ev.Annotations, ResourceVersionAnnotation, strconv.FormatInt(p.rev, 10), RecoveredAnnotation, "true")
			last = l.append(&ev, true)
			n++
		}
		if last != nil {
			l.flush()
			if err := last.Wait(); err != nil {
				return err
			}
		}
		l.cfg.Log.Info("audit: recovered records from etcd", "notes", len(pending), "written", n)
	}
	for e := range epochs {
		if _, err := l.cfg.Storage.DeletePrefix(ctx, l.notes.epochPrefix(e)); err != nil {
			return err
		}
	}
	return nil
}

// recordIdentity names the ResponseComplete record of one write of one
// request: a deletecollection's request writes one per object.
func recordIdentity(ev *auditv1.Event) string {
	id := string(ev.AuditID) + "|" + ev.Verb
	if ev.ObjectRef != nil {
		id += "|" + ev.ObjectRef.Namespace + "|" + ev.ObjectRef.Name
	}
	return id
}
