package history

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/objwatch/objwatch/storage"
	"github.com/objwatch/objwatch/storage/etcd/etcdtest"
)

// Writers hand their notes over in process while the recorder follows
// etcd: every revision they made is recorded with its author, though the
// watch often delivers a change before its writer hears from etcd, and
// etcd holds no note key.
func TestRecorderHandedAuthors(t *testing.T) {
	st := etcdtest.Start(t)
	ctx := t.Context()
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	authors := NewAuthors()
	defer run(&Recorder{Store: s, Source: st, Authors: authors}).stop()
	// The history starts at etcd's state when the recorder first runs
	// (no authors there): wait for it.
	first, err := st.Create(ctx, "/registry/cm/first", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	waitRecorded(t, s, first.ModRevision)

	const writers, each = 8, 25
	type made struct {
		key  string
		rev  int64
		user string
	}
	var mu sync.Mutex
	var all []made
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			user := fmt.Sprintf("user-%d", w)
			for i := range each {
				key := fmt.Sprintf("/registry/cm/w%d-%d", w, i%5)
				c := storage.WithNote(ctx, authors.Note(Author{User: user, Verb: "update"}, time.Now()))
				kv, err := st.Create(c, key, []byte(`{}`))
				if err != nil {
					cur, gerr := st.Get(ctx, key)
					if gerr != nil {
						t.Error(gerr)
						return
					}
					kv, err = st.Update(c, key, []byte(fmt.Sprintf(`{"i":%d}`, i)), cur.ModRevision)
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				all = append(all, made{key, kv.ModRevision, user})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// One write without a note: recorded without an author.
	plain, err := st.Create(ctx, "/registry/cm/plain", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	waitRecorded(t, s, plain.ModRevision)
	for _, m := range all {
		e, err := s.Get(m.key, m.rev)
		if err != nil {
			t.Fatalf("%s@%d: %v", m.key, m.rev, err)
		}
		if e.Author == nil || e.Author.User != m.user {
			t.Errorf("%s@%d: author %+v, want %s", m.key, m.rev, e.Author, m.user)
		}
	}
	if e, err := s.Get("/registry/cm/plain", plain.ModRevision); err != nil || e.Author != nil {
		t.Errorf("the write without a note: %+v, %v; want no author", e, err)
	}
	if _, err := st.Get(ctx, AuthorKey); err == nil {
		t.Error("etcd holds an author key; handed notes must not be written")
	}
	authors.mu.Lock()
	left, busy := len(authors.handed), len(authors.writing)
	authors.mu.Unlock()
	if left != 0 || busy != 0 {
		t.Errorf("after recording: %d notes and %d keys left, want none", left, busy)
	}
}

// take waits for a note only while its server writes one of the
// revision's keys, and no longer than its bound.
func TestAuthorsTake(t *testing.T) {
	ctx := t.Context()
	a := NewAuthors()
	if _, ok := a.take(ctx, 1, []string{"k"}, time.Minute); ok {
		t.Error("a note for a revision nobody handed over")
	}

	// Handed over before it is taken.
	a.Writing("k")
	a.Written("k", 2, []byte("two"))
	if n, ok := a.take(ctx, 2, []string{"k"}, time.Minute); !ok || string(n) != "two" {
		t.Errorf("take(2) = %q, %v", n, ok)
	}

	// Handed over while the recorder waits.
	a.Writing("k")
	go func() {
		time.Sleep(50 * time.Millisecond)
		a.Written("k", 3, []byte("three"))
	}()
	start := time.Now()
	if n, ok := a.take(ctx, 3, []string{"other", "k"}, time.Minute); !ok || string(n) != "three" {
		t.Errorf("take(3) = %q, %v", n, ok)
	}
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Errorf("take(3) returned after %v, before the note came", d)
	}

	// A write that failed: no note, and the wait ends with it.
	a.Writing("k")
	go func() {
		time.Sleep(50 * time.Millisecond)
		a.Written("k", 0, nil)
	}()
	if _, ok := a.take(ctx, 4, []string{"k"}, time.Minute); ok {
		t.Error("take(4) found a note of a failed write")
	}

	// A write that does not end in time.
	a.Writing("stuck")
	start = time.Now()
	if _, ok := a.take(ctx, 5, []string{"stuck"}, 100*time.Millisecond); ok {
		t.Error("take(5) found a note")
	}
	if d := time.Since(start); d < 90*time.Millisecond || d > 5*time.Second {
		t.Errorf("take(5) waited %v, want its bound of 100ms", d)
	}
	a.Written("stuck", 0, nil)

	// Notes of revisions passed over are forgotten.
	for r := int64(10); r < 20; r++ {
		a.Writing("f")
		a.Written("f", r, []byte("n"))
	}
	a.forget(15)
	if len(a.handed) != 4 {
		t.Errorf("%d notes after forget(15), want 4 (16..19)", len(a.handed))
	}

	// A note that comes after the recorder passed its revision (it
	// stopped waiting) is not kept.
	a.pass(30)
	a.Writing("late")
	a.Written("late", 25, []byte("late"))
	if _, ok := a.handed[25]; ok {
		t.Error("a note of a revision the recorder passed is kept")
	}
}
