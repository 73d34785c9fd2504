package history

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
)

// running is a Recorder in a goroutine, stopped by stop.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func startRecorder(st storage.Interface, s *Store) *running {
	return run(&Recorder{Store: s, Source: st})
}

// run runs rec in a goroutine until stop.
func run(rec *Recorder) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); rec.Run(ctx) }()
	return r
}

func (r *running) stop() { r.cancel(); <-r.done }

func waitRecorded(t *testing.T, s *Store, rev int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.Recorded() < rev {
		if time.Now().After(deadline) {
			t.Fatalf("recorded %d after 10 s, want %d", s.Recorded(), rev)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The recorder starts from etcd's state, records every later change with
// the author its writer noted, resumes after a stop without losing one,
// and after a compaction that removed changes it had not read records a
// gap and the state after it.
func TestRecorder(t *testing.T) {
	st := etcdtest.Start(t)
	ctx := t.Context()
	put := func(key, v string, who string) int64 {
		t.Helper()
		c := ctx
		if who != "" {
			c = storage.WithNote(ctx, AuthorNote(Author{User: who, Verb: "update", Manager: "test"}, time.Now()))
		}
		cur, err := st.Get(ctx, key)
		var kv storage.KeyValue
		switch {
		case errors.Is(err, storage.ErrNotFound):
			kv, err = st.Create(c, key, []byte(v))
		case err == nil:
			kv, err = st.Update(c, key, []byte(v), cur.ModRevision)
		}
		if err != nil {
			t.Fatal(err)
		}
		return kv.ModRevision
	}
	del := func(key string) int64 {
		t.Helper()
		kv, err := st.Delete(storage.WithNote(ctx, AuthorNote(Author{User: "deleter", Verb: "delete"}, time.Now())), key, 0)
		if err != nil {
			t.Fatal(err)
		}
		return kv.ModRevision
	}
	before := put("/registry/cm/a", `{"v":0}`, "")
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := startRecorder(st, s)
	// The history starts with etcd's state.
	waitRecorded(t, s, before)
	revs := map[int64]string{}
	for i := range 20 {
		v := fmt.Sprintf(`{"v":%d,"pad":"%0200d"}`, i+1, i)
		revs[put("/registry/cm/a", v, fmt.Sprintf("user-%d", i%2))] = v
	}
	gone := del("/registry/cm/a")
	waitRecorded(t, s, gone)
	for rev, v := range revs {
		e, err := s.Get("/registry/cm/a", rev)
		if err != nil || string(e.Value) != v {
			t.Fatalf("at %d: %s %v, want %s", rev, e.Value, err, v)
		}
		if e.Author == nil || (e.Author.User != "user-0" && e.Author.User != "user-1") || e.Author.Manager != "test" {
			t.Fatalf("at %d: author %+v, want user-0 or user-1 with manager test", rev, e.Author)
		}
	}
	h, err := s.KeyHistory("/registry/cm/a")
	if err != nil {
		t.Fatal(err)
	}
	if last := h[len(h)-1]; !last.Deleted || last.Revision != gone || last.Author == nil || last.Author.User != "deleter" {
		t.Fatalf("last change %+v, want the deletion at %d by deleter", last, gone)
	}
	if len(h) != 22 {
		t.Errorf("%d changes, want 22 (the state at the start, 20 updates, the deletion)", len(h))
	}

	// Stopped and restarted: nothing lost.
	r.stop()
	b1 := put("/registry/cm/b", `{"b":1}`, "u")
	b2 := put("/registry/cm/b", `{"b":2}`, "u")
	r = startRecorder(st, s)
	waitRecorded(t, s, b2)
	if e, err := s.Get("/registry/cm/b", b1); err != nil || string(e.Value) != `{"b":1}` {
		t.Fatalf("b at %d after a restart: %s %v", b1, e.Value, err)
	}
	r.stop()

	// Down past a compaction: a gap, then etcd's state after it.
	c1 := put("/registry/cm/c", `{"c":1}`, "u")
	put("/registry/cm/c", `{"c":2}`, "u")
	delB := del("/registry/cm/b")
	last := put("/registry/cm/d", `{"d":1}`, "u")
	if err := st.Compact(ctx, last); err != nil {
		t.Fatal(err)
	}
	r = startRecorder(st, s)
	waitRecorded(t, s, last)
	r.stop()
	gaps := s.Gaps()
	if len(gaps) != 1 || gaps[0].From != b2+1 || gaps[0].To != last-1 {
		t.Fatalf("gaps %+v, want %d-%d", gaps, b2+1, last-1)
	}
	var ge *GapError
	if _, err := s.Get("/registry/cm/c", c1); !errors.As(err, &ge) {
		t.Errorf("a read in the gap: %v, want a GapError", err)
	}
	if e, err := s.Get("/registry/cm/c", last); err != nil || string(e.Value) != `{"c":2}` {
		t.Errorf("c after the gap: %s %v", e.Value, err)
	}
	if _, err := s.Get("/registry/cm/b", last); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("b after the gap (deleted at %d): %v, want not found", delB, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// Notes in the form earlier servers wrote (a JSON object with "t") still
// name their authors; a note that is no author's JSON leaves its change
// recorded without one, and the store undamaged.
func TestRecorderNoteForms(t *testing.T) {
	st := etcdtest.Start(t)
	ctx := t.Context()
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now, err := st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := startRecorder(st, s)
	defer r.stop()
	// The history starts where the recorder first reads etcd: the notes'
	// revisions come after that.
	waitRecorded(t, s, now)
	at := time.Now().Add(time.Hour).Round(0) // after the baseline's time: times never go back
	notes := []struct {
		name, value string
		want        *Author
	}{
		{"old", fmt.Sprintf(`{"user":"earlier","groups":["g"],"verb":"update","t":%d}`, at.UnixNano()), &Author{User: "earlier", Groups: []string{"g"}, Verb: "update"}},
		{"current", string(AuthorNote(Author{User: "now", Manager: "m"}, at).Value), &Author{User: "now", Manager: "m"}},
		{"not-json", "\x01\x00\x00\x00\x00\x00\x00\x00\x01{nope", nil},
		{"wrong-shape", "\x01\x00\x00\x00\x00\x00\x00\x00\x01" + `{"user":5}`, nil},
		{"empty", "", nil},
	}
	var last int64
	revs := map[string]int64{}
	for _, n := range notes {
		kv, err := st.Create(storage.WithNote(ctx, storage.Note{Key: AuthorKey, Value: []byte(n.value)}), "/registry/cm/"+n.name, []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		revs[n.name], last = kv.ModRevision, kv.ModRevision
	}
	waitRecorded(t, s, last)
	for _, n := range notes {
		e, err := s.Get("/registry/cm/"+n.name, revs[n.name])
		if err != nil {
			t.Fatalf("%s: %v", n.name, err)
		}
		if fmt.Sprint(e.Author) != fmt.Sprint(n.want) {
			t.Errorf("%s: author %+v, want %+v", n.name, e.Author, n.want)
		}
		if n.want != nil && !e.Time.Equal(at) {
			t.Errorf("%s: time %v, want %v", n.name, e.Time, at)
		}
	}
	if s.Damaged() {
		t.Error("the store is damaged")
	}
}

func FuzzDecodeNote(f *testing.F) {
	f.Add(AuthorNote(Author{User: "u", Groups: []string{"a", "b"}, Verb: "create"}, time.Unix(0, 42)).Value)
	f.Add([]byte(`{"user":"u","t":42}`))
	f.Add([]byte("\x01\x00\x00\x00\x00\x00\x00\x00\x2a{}"))
	f.Fuzz(func(t *testing.T, v []byte) {
		_, aj, ok := decodeNote(v)
		if !ok {
			return
		}
		// What decodes is recorded: it must be a JSON object within the
		// record's bound.
		if len(aj) == 0 || len(aj) > maxRecordAuthor || aj[0] != '{' || !json.Valid(aj) {
			t.Fatalf("note %q gave author %q", v, aj)
		}
	})
}

// FuzzAuthorJSON checks the author's hand-written JSON against
// encoding/json's for any field values.
func FuzzAuthorJSON(f *testing.F) {
	f.Add("alice", "system:masters", "", "create", "kubectl", "server-1")
	f.Add("", "", "", "", "", "")
	f.Add("<a&b>\u2028\"\\", "g\x00", "\xff", "", "m", "")
	f.Fuzz(func(t *testing.T, user, g1, g2, verb, manager, server string) {
		var groups []string
		for _, g := range []string{g1, g2} {
			if g != "" {
				groups = append(groups, g)
			}
		}
		a := Author{User: user, Groups: groups, Verb: verb, Manager: manager, Server: server}
		want, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.appendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("appendJSON = %s\nencoding/json = %s", got, want)
		}
	})
}
