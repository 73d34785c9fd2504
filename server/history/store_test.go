package history

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/centrifugal/fdelta"
	"github.com/cockroachdb/pebble/v2"
	"github.com/objwatch/objwatch/server/jsonenc"
	"github.com/objwatch/objwatch/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// model is what the store must answer: every key's value at every
// revision, built beside it from the same changes.
type model struct {
	states  []map[string][]byte // states[i]: after revision revs[i]
	revs    []int64
	times   []time.Time
	authors []*Author
	changes map[int64][]string // the keys each revision changed
	created map[string]int64   // a live key's create revision
}

func (m *model) state(rev int64) map[string][]byte {
	i, found := slices.BinarySearch(m.revs, rev)
	if !found {
		i--
	}
	if i < 0 {
		return nil
	}
	return m.states[i]
}

// workload appends n revisions of random changes to keys under two
// prefixes: one-field updates of ~1 KiB objects, list edits, deletions and
// re-creations, and now and then a value that is no JSON object.
func workload(t *testing.T, s *Store, m *model, rng *rand.Rand, start int64, n int) {
	t.Helper()
	cur := map[string][]byte{}
	if len(m.states) > 0 {
		cur = maps.Clone(m.states[len(m.states)-1])
	}
	modRev := map[string]int64{}
	for k := range cur {
		modRev[k] = lastChange(m, k)
	}
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var batch []Revision
	for i := range n {
		rev := start + int64(i)*2 // every other revision is some other key's
		key := fmt.Sprintf("/registry/%s/ns/k%02d", []string{"configmaps", "secrets"}[rng.IntN(2)], rng.IntN(12))
		prev, exists := cur[key]
		c := Change{Key: key, Prev: prev, PrevRevision: modRev[key]}
		if rng.IntN(2) == 0 {
			c.Prev, c.PrevRevision = nil, 0 // as the recorder's watch sends them
		}
		switch {
		case exists && rng.IntN(10) == 0:
			c.Delete = true
			c.CreateRevision = m.created[key]
			delete(cur, key)
			delete(modRev, key)
			delete(m.created, key)
		default:
			c.Value = edit(rng, prev)
			if !exists {
				m.created[key] = rev
			}
			c.CreateRevision = m.created[key]
			cur[key] = c.Value
			modRev[key] = rev
		}
		a := &Author{User: fmt.Sprintf("user-%d", rng.IntN(3)), Groups: []string{"system:authenticated"}, Verb: "update", Manager: "kubectl"}
		r := Revision{Rev: rev, Time: base.Add(time.Duration(rev) * time.Second), Author: a, Changes: []Change{c}}
		batch = append(batch, r)
		m.revs = append(m.revs, rev)
		m.times = append(m.times, r.Time)
		m.authors = append(m.authors, a)
		m.states = append(m.states, maps.Clone(cur))
		m.changes[rev] = []string{key}
		if len(batch) == 1+rng.IntN(8) || i == n-1 {
			if err := s.Append(batch); err != nil {
				t.Fatal(err)
			}
			batch = nil
		}
	}
}

func lastChange(m *model, key string) int64 {
	for i := len(m.revs) - 1; i >= 0; i-- {
		if slices.Contains(m.changes[m.revs[i]], key) {
			return m.revs[i]
		}
	}
	return 0
}

// edit changes one field of prev (a new object when prev is nil).
func edit(rng *rand.Rand, prev []byte) []byte {
	if rng.IntN(40) == 0 {
		return []byte(fmt.Sprintf("not json %d", rng.IntN(1000)))
	}
	obj, ok := jsonenc.Decode(prev)
	if !ok {
		data := map[string]any{}
		for i := range 16 {
			data[fmt.Sprintf("f%02d", i)] = strings.Repeat(string(rune('a'+i)), 50)
		}
		obj = map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "x", "labels": map[string]any{"a": "b"}}, "data": data, "list": []any{int64(1), int64(2)}}
	}
	data := obj["data"].(map[string]any)
	switch rng.IntN(4) {
	case 0:
		data[fmt.Sprintf("f%02d", rng.IntN(20))] = fmt.Sprintf("v%d <&>", rng.IntN(1_000_000))
	case 1:
		delete(data, fmt.Sprintf("f%02d", rng.IntN(20)))
	case 2:
		obj["list"] = append(obj["list"].([]any), int64(rng.IntN(1<<62)))
	case 3:
		obj["metadata"].(map[string]any)["generation"] = int64(rng.IntN(100))
	}
	b, ok := jsonenc.Append(nil, obj)
	if !ok {
		panic("encode")
	}
	return b
}

// check compares every read of s with m at the revisions from oldest on.
func check(t *testing.T, s *Store, m *model, oldest int64) {
	t.Helper()
	for i, rev := range m.revs {
		if rev < oldest {
			continue
		}
		want := m.states[i]
		for _, key := range allKeys(m) {
			e, err := s.Get(key, rev)
			w, ok := want[key]
			switch {
			case !ok:
				if !errors.Is(err, storage.ErrNotFound) {
					t.Fatalf("get %s at %d: %v %q, want not found", key, rev, err, e.Value)
				}
			case err != nil:
				t.Fatalf("get %s at %d: %v", key, rev, err)
			case !bytes.Equal(e.Value, w):
				t.Fatalf("get %s at %d:\n got %s\nwant %s", key, rev, e.Value, w)
			}
		}
		// A list of one prefix, in pages of 3.
		var got []string
		start := ""
		for {
			page, remaining, err := s.List("/registry/configmaps/", start, rev, 3)
			more := remaining > 0
			if err != nil {
				t.Fatalf("list at %d: %v", rev, err)
			}
			for _, e := range page {
				if !bytes.Equal(e.Value, want[e.Key]) {
					t.Fatalf("list at %d: %s is %s, want %s", rev, e.Key, e.Value, want[e.Key])
				}
				got = append(got, e.Key)
			}
			if !more {
				break
			}
			start = page[len(page)-1].Key + "\x00"
		}
		var wantKeys []string
		for k := range want {
			if strings.HasPrefix(k, "/registry/configmaps/") {
				wantKeys = append(wantKeys, k)
			}
		}
		slices.Sort(wantKeys)
		if !slices.Equal(got, wantKeys) {
			t.Fatalf("list at %d: %v, want %v", rev, got, wantKeys)
		}
	}
}

func allKeys(m *model) []string {
	set := map[string]bool{}
	for _, ks := range m.changes {
		for _, k := range ks {
			set[k] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

func newModel() *model { return &model{changes: map[int64][]string{}, created: map[string]int64{}} }

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{FullEvery: 5})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Every revision of every key reads back byte for byte, by get, paginated
// list, key history and changes, also after a restart and after changes
// appended since (when patches start again from whole copies).
func TestStoreReadsEveryRevision(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	m := newModel()
	rng := rand.New(rand.NewPCG(1, 2))
	workload(t, s, m, rng, 10, 300)
	check(t, s, m, 0)
	if got, want := s.Recorded(), m.revs[len(m.revs)-1]; got != want {
		t.Errorf("recorded %d, want %d", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	workload(t, s, m, rng, m.revs[len(m.revs)-1]+2, 200)
	check(t, s, m, 0)
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}

	// Key history: every change of one key, with its author and time.
	key := allKeys(m)[0]
	h, err := s.KeyHistory(key)
	if err != nil {
		t.Fatal(err)
	}
	var wantRevs []int64
	for i, rev := range m.revs {
		if slices.Contains(m.changes[rev], key) {
			wantRevs = append(wantRevs, rev)
			e := h[len(wantRevs)-1]
			if e.Revision != rev || e.Author == nil || e.Author.User != m.authors[i].User || !e.Time.Equal(m.times[i]) {
				t.Fatalf("history of %s: %+v, want revision %d by %s at %v", key, e, rev, m.authors[i].User, m.times[i])
			}
			if w, ok := m.states[i][key]; ok != !e.Deleted || !bytes.Equal(w, e.Value) {
				t.Fatalf("history of %s at %d: deleted %v %s, want %s", key, rev, e.Deleted, e.Value, w)
			}
		}
	}
	if len(h) != len(wantRevs) {
		t.Fatalf("history of %s: %d changes, want %d", key, len(h), len(wantRevs))
	}

	// Changes in a window, in revision order.
	from, to := m.revs[100], m.revs[150]
	var seen []int64
	err = s.Changes("/registry/secrets/", from, to, func(e Entry) error {
		seen = append(seen, e.Revision)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var wantSeen []int64
	for _, rev := range m.revs {
		if rev > from && rev <= to && strings.HasPrefix(m.changes[rev][0], "/registry/secrets/") {
			wantSeen = append(wantSeen, rev)
		}
	}
	if !slices.Equal(seen, wantSeen) {
		t.Errorf("changes: %v, want %v", seen, wantSeen)
	}

	// Time to revision.
	for i := range m.revs {
		got, err := s.RevisionAt(m.times[i].Add(500 * time.Millisecond))
		if err != nil || got != m.revs[i] {
			t.Fatalf("revision at %v: %d %v, want %d", m.times[i], got, err, m.revs[i])
		}
	}
	if _, err := s.RevisionAt(m.times[0].Add(-time.Second)); !errors.Is(err, ErrNotRetained) {
		t.Errorf("revision before the first: %v, want ErrNotRetained", err)
	}
	if _, err := s.Get(key, s.Recorded()+1); !errors.Is(err, ErrNotRecorded) {
		t.Errorf("get after recorded: %v, want ErrNotRecorded", err)
	}
}

// Trimming keeps every key's state at the cutoff and every change after
// it, refuses reads before it, and drops the rest.
func TestStoreTrim(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	m := newModel()
	rng := rand.New(rand.NewPCG(3, 4))
	workload(t, s, m, rng, 10, 400)
	cutoff := m.revs[250] + 1 // between two changes: the state at it is revs[250]'s
	dropped, err := s.Trim(cutoff)
	if err != nil {
		t.Fatal(err)
	}
	if dropped < 200 {
		t.Errorf("trim dropped %d records, want most of 250", dropped)
	}
	if s.Oldest() != cutoff {
		t.Errorf("oldest %d, want %d", s.Oldest(), cutoff)
	}
	check(t, s, m, cutoff)
	if _, err := s.Get("/registry/configmaps/ns/k01", cutoff-1); !errors.Is(err, ErrNotRetained) {
		t.Errorf("get before the cutoff: %v, want ErrNotRetained", err)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	// Appending after a trim still patches correctly.
	workload(t, s, m, rng, m.revs[len(m.revs)-1]+2, 50)
	check(t, s, m, cutoff)
}

// A gap refuses reads inside it; the state found after it reads back.
func TestStoreGap(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	now := time.Now()
	err := s.Append([]Revision{{Rev: 5, Time: now, Changes: []Change{{Key: "/a", Value: []byte(`{"v":1}`), CreateRevision: 5}, {Key: "/b", Value: []byte(`{"v":1}`), CreateRevision: 5}}}})
	if err != nil {
		t.Fatal(err)
	}
	found := []Revision{
		{Rev: 12, Time: now, Changes: []Change{{Key: "/a", Value: []byte(`{"v":2}`), CreateRevision: 5}}},
		{Rev: 21, Time: now, Changes: []Change{{Key: "/b", Delete: true, InGap: true}}},
	}
	if err := s.AddGap(Gap{From: 6, To: 20, Found: now}, found); err != nil {
		t.Fatal(err)
	}
	var ge *GapError
	if _, err := s.Get("/a", 12); !errors.As(err, &ge) || ge.Gap.From != 6 {
		t.Errorf("get in the gap: %v, want a GapError", err)
	}
	if e, err := s.Get("/a", 21); err != nil || string(e.Value) != `{"v":2}` {
		t.Errorf("get after the gap: %s %v", e.Value, err)
	}
	if _, err := s.Get("/b", 21); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("a key deleted in the gap: %v, want not found", err)
	}
	h, err := s.KeyHistory("/b")
	if err != nil || len(h) != 2 || !h[1].Deleted || !h[1].InGap {
		t.Errorf("history of a key deleted in the gap: %+v %v", h, err)
	}
	if s.Recorded() != 21 || len(s.Gaps()) != 1 {
		t.Errorf("recorded %d, gaps %v", s.Recorded(), s.Gaps())
	}
}

// A reader woken by the revisions a gap's relist found already sees the
// gap (and a reader woken by a new store's first revisions, where the
// history starts): otherwise it would take the relist's sparse revisions
// for the whole history of the gap, as a watch resumed on a restarted
// server once did.
func TestStoreGapVisibleBeforeItsRevisions(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	now := time.Now()
	seen := make(chan string, 1)
	watch := func(rev int64, what func() string) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.WaitRecorded(ctx, rev); err != nil {
				seen <- err.Error()
				return
			}
			seen <- what()
		}()
	}
	watch(9, func() string { return fmt.Sprintf("oldest %d", s.Oldest()) })
	time.Sleep(50 * time.Millisecond) // let it wait
	err := s.Start(10, []Revision{{Rev: 9, Time: now, Changes: []Change{{Key: "/a", Value: []byte(`{"v":1}`), CreateRevision: 9}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got != "oldest 10" {
		t.Errorf("a reader woken by the first revisions saw %s, want oldest 10", got)
	}
	watch(30, func() string { return fmt.Sprintf("gaps %+v", s.Gaps()) })
	time.Sleep(50 * time.Millisecond)
	found := []Revision{{Rev: 35, Time: now, Changes: []Change{{Key: "/a", Value: []byte(`{"v":2}`), CreateRevision: 9}}}}
	if err := s.AddGap(Gap{From: 11, To: 39, Found: now}, found); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; !strings.Contains(got, "From:11") {
		t.Errorf("a reader woken by a gap's revisions saw %s, want the gap", got)
	}
}

// A damaged block is found by Verify (or by Open), never read as data.
func TestStoreCorruption(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	m := newModel()
	workload(t, s, m, rand.New(rand.NewPCG(5, 6)), 10, 200)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no table files after a flush")
	}
	for _, f := range ssts {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i := 100; i < len(b)/2; i += 97 {
			b[i] ^= 0x5a
		}
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(dir, Options{})
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("open of a damaged database: %v, want ErrCorrupt", err)
		}
		return
	}
	defer s.Close()
	if err := s.Verify(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("verify of a damaged database: %v, want ErrCorrupt", err)
	}
	if s.HoldsCompaction(time.Hour) {
		t.Error("a damaged store still holds etcd's compaction back")
	}
}

func FuzzDecodeRecord(f *testing.F) {
	for _, r := range []record{
		{kind: kindFull, created: 5, time: time.Unix(0, 12345), payload: []byte(`{"a":1}`)},
		{kind: kindDelta, created: 1 << 40, author: &Author{User: "u", Groups: []string{"g"}}, payload: fdelta.Create([]byte(`{"a":1,"b":2}`), []byte(`{"b":2}`))},
		{kind: kindDelete, inGap: true},
	} {
		b, err := r.encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err != nil {
			return
		}
		again, err := r.encode()
		if err != nil {
			t.Fatal(err)
		}
		r2, err := decodeRecord(again)
		if err != nil {
			t.Fatalf("a decoded record does not decode again: %v", err)
		}
		if r2.kind != r.kind || r2.created != r.created || !r2.time.Equal(r.time) || !bytes.Equal(r2.payload, r.payload) || r2.inGap != r.inGap || (r.author == nil) != (r2.author == nil) {
			t.Fatalf("round trip: %+v, then %+v", r, r2)
		}
	})
}

// Without etcd's previous values and without a cache of the last ones,
// the writer rebuilds each delta's base from the database: the records
// are deltas all the same, and every revision reads back.
func TestStoreDeltasWithoutPreviousValues(t *testing.T) {
	s, err := Open(t.TempDir(), Options{ValueCache: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	cur := map[string][]byte{}
	written := map[int64][]byte{}
	keys := map[int64]string{}
	for rev := int64(10); rev < 310; rev++ {
		key := fmt.Sprintf("/registry/configmaps/ns/k%d", rng.IntN(5))
		v := edit(rng, cur[key])
		cur[key], written[rev], keys[rev] = v, v, key
		r := Revision{Rev: rev, Time: time.Unix(rev, 0), Changes: []Change{{Key: key, Value: v}}} // no Prev
		if err := s.Append([]Revision{r}); err != nil {
			t.Fatal(err)
		}
	}
	for rev, v := range written {
		e, err := s.Get(keys[rev], rev)
		if err != nil || !bytes.Equal(e.Value, v) {
			t.Fatalf("%s at %d: %s %v, want %s", keys[rev], rev, e.Value, err, v)
		}
	}
	counts := map[kind]int{}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{spaceRev}, UpperBound: []byte{spaceRev + 1}})
	if err != nil {
		t.Fatal(err)
	}
	for it.First(); it.Valid(); it.Next() {
		counts[kind(it.Value()[0])]++
	}
	it.Close()
	if counts[kindDelta] < 3*counts[kindFull] {
		t.Errorf("records by kind %v: want mostly deltas", counts)
	}
	if len(s.values.m) != 0 {
		t.Errorf("%d values cached with no room for any", len(s.values.m))
	}
}
