package history

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/objwatch/objwatch/server/jsonenc"
)

// object is a ConfigMap-like object of about size bytes, as objwatch
// stores one: metadata with managedFields, then data.
func object(name string, size, version int) map[string]any {
	data := map[string]any{}
	for i := 0; 40*i < size; i++ {
		data[fmt.Sprintf("key-%03d", i)] = strings.Repeat(string(rune('a'+i%26)), 28)
	}
	data["mode"] = fmt.Sprintf("v%d", version)
	return map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{
			"name": name, "namespace": "bench", "uid": "6a1f3c2e-0000-4000-8000-" + fmt.Sprintf("%012d", len(name)),
			"creationTimestamp": "2026-12-04T09:00:00Z",
			"managedFields": []any{map[string]any{
				"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kubectl", "operation": "Update",
				"time":     time.Date(2026, 12, 4, 9, 0, version, 0, time.UTC).Format(time.RFC3339),
				"fieldsV1": map[string]any{"f:data": map[string]any{".": map[string]any{}, "f:mode": map[string]any{}}},
			}},
		},
		"data": data,
	}
}

func encode(b testing.TB, v map[string]any) []byte {
	out, ok := jsonenc.Append(nil, v)
	if !ok {
		b.Fatal("encode")
	}
	return out
}

// fill appends keys×updates one-field updates (data.mode and the
// managedFields time) of objects of size bytes, in batches as the
// recorder writes them, and returns the bytes of JSON written.
func fill(b testing.TB, s *Store, keys, updates, size int) (written int64) {
	prev := make([][]byte, keys)
	prevRev := make([]int64, keys)
	rev := int64(1)
	var batch []Revision
	now := time.Now().Add(-2 * time.Hour)
	for u := range updates {
		for k := range keys {
			v := encode(b, object(fmt.Sprintf("obj-%05d", k), size, u))
			batch = append(batch, Revision{Rev: rev, Time: now.Add(time.Duration(rev) * time.Millisecond), Author: &Author{User: "alice", Groups: []string{"system:authenticated"}, Verb: "patch", Manager: "kubectl-edit", Server: "server-1"},
				Changes: []Change{{Key: fmt.Sprintf("/registry/core/configmaps/bench/obj-%05d", k), Value: v, Prev: prev[k], PrevRevision: prevRev[k], CreateRevision: 1 + int64(k)}}})
			prev[k], prevRev[k] = v, rev
			written += int64(len(v))
			rev++
			if len(batch) == 64 {
				if err := s.Append(batch); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
	}
	if err := s.Append(batch); err != nil {
		b.Fatal(err)
	}
	return written
}

// BenchmarkStoreBytesPerRevision reports the store's size on disk per
// recorded revision of one-field updates, over the object's JSON size
// (after a flush and compaction, as the store settles).
func BenchmarkStoreBytesPerRevision(b *testing.B) {
	for _, size := range []int{1 << 10, 40 << 10} {
		b.Run(fmt.Sprintf("object=%dKiB", size>>10), func(b *testing.B) {
			keys, updates := 200, 50
			if size > 4<<10 {
				keys, updates = 20, 50
			}
			for b.Loop() {
				s, err := Open(b.TempDir(), Options{})
				if err != nil {
					b.Fatal(err)
				}
				written := fill(b, s, keys, updates, size)
				if err := s.db.Flush(); err != nil {
					b.Fatal(err)
				}
				if err := s.compact(); err != nil {
					b.Fatal(err)
				}
				revs := float64(keys * updates)
				b.ReportMetric(float64(s.Size())/revs, "disk-B/rev")
				b.ReportMetric(float64(s.Size())/float64(written), "disk/json")
				s.Close()
			}
		})
	}
}

// BenchmarkStoreGetPast reads random keys at random past revisions of a
// store of 10k objects × 100 one-field updates (1M revisions), and
// reports the p99 latency.
func BenchmarkStoreGetPast(b *testing.B) {
	keys, updates := 10_000, 100
	if testing.Short() {
		keys = 1000
	}
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	fill(b, s, keys, updates, 1<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	var lat []time.Duration
	for b.Loop() {
		key := fmt.Sprintf("/registry/core/configmaps/bench/obj-%05d", rng.IntN(keys))
		start := time.Now()
		if _, err := s.Get(key, 1+rng.Int64N(s.Recorded())); err != nil && !strings.Contains(err.Error(), "not found") {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkStoreAppend measures the recorder's writes: one-field updates
// of 1 KiB objects (deltas against the previous values) in batches of 64,
// as revisions per second. prev=store is the recorder's case: the changes
// come without etcd's previous values and the store uses its own (in
// memory, or rebuilt from the database with cache=none); prev=etcd gives
// them.
func BenchmarkStoreAppend(b *testing.B) {
	keys, updates := 500, 20
	for _, c := range []struct {
		name  string
		prev  bool
		cache int
	}{{"prev=etcd", true, 0}, {"prev=store", false, 0}, {"prev=store,cache=none", false, -1}} {
		b.Run(c.name, func(b *testing.B) {
			var revs []Revision
			prev := make([][]byte, keys)
			prevRev := make([]int64, keys)
			rev := int64(1)
			for u := range updates {
				for k := range keys {
					v := encode(b, object(fmt.Sprintf("obj-%05d", k), 1<<10, u))
					ch := Change{Key: fmt.Sprintf("/registry/core/configmaps/bench/obj-%05d", k), Value: v, CreateRevision: 1 + int64(k)}
					if c.prev {
						ch.Prev, ch.PrevRevision = prev[k], prevRev[k]
					}
					revs = append(revs, Revision{Rev: rev, Time: time.Now(), Author: &Author{User: "alice", Verb: "patch"}, Changes: []Change{ch}})
					prev[k], prevRev[k] = v, rev
					rev++
				}
			}
			var n int
			var spent time.Duration
			for b.Loop() {
				s, err := Open(b.TempDir(), Options{ValueCache: c.cache})
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				for batch := range slices.Chunk(revs, 64) {
					if err := s.Append(batch); err != nil {
						b.Fatal(err)
					}
				}
				spent += time.Since(start)
				n += len(revs)
				s.Close()
			}
			b.ReportMetric(float64(n)/spent.Seconds(), "rev/s")
		})
	}
}

// BenchmarkStoreListPast lists a namespace of 10k objects (1 KiB, each
// updated 10 times: 100k revisions) at a revision in the middle of the
// history, every value rebuilt.
func BenchmarkStoreListPast(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	fill(b, s, 10_000, 10, 1<<10)
	mid := s.Recorded() / 2
	for b.Loop() {
		l, _, err := s.List("/registry/core/configmaps/bench/", "", mid, 0)
		if err != nil || len(l) != 10_000 {
			b.Fatalf("%d objects, %v", len(l), err)
		}
	}
}

// BenchmarkStoreChanges walks the changes of 100k revisions (10k objects
// of 1 KiB, each updated 10 times), every value rebuilt.
func BenchmarkStoreChanges(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	fill(b, s, 10_000, 10, 1<<10)
	for b.Loop() {
		n := 0
		if err := s.Changes("/registry/", 0, 0, func(Entry) error { n++; return nil }); err != nil || n != 100_000 {
			b.Fatalf("%d changes, %v", n, err)
		}
	}
}

// BenchmarkStoreSustainedCPU appends what a create-then-update load
// writes (50k new 1 KiB objects, then one update of each: 100k
// revisions, values encoded beforehand), flushes, and waits for Pebble's
// compactions to end: cpu-µs/rev is the process's CPU time (user and
// system, every goroutine: the commit, the log, flushes, compactions)
// per revision, the cost the recorder adds to a server's writes.
func BenchmarkStoreSustainedCPU(b *testing.B) {
	const keys = 50_000
	var revs []Revision
	rev := int64(1)
	for u := range 2 {
		for k := range keys {
			v := encode(b, object(fmt.Sprintf("obj-%05d-%08x", k, rand.Uint32()), 1<<10, u))
			revs = append(revs, Revision{Rev: rev, Time: time.Now(), Author: &Author{User: "alice", Verb: "create", Manager: "bench"},
				Changes: []Change{{Key: fmt.Sprintf("/registry/core/configmaps/bench/obj-%05d", k), Value: v, CreateRevision: 1 + int64(k)}}})
			rev++
		}
	}
	var cpu, wall time.Duration
	var n int
	for b.Loop() {
		s, err := Open(b.TempDir(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		c0, t0 := cpuTime(b), time.Now()
		for batch := range slices.Chunk(revs, 64) {
			if err := s.Append(batch); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.db.Flush(); err != nil {
			b.Fatal(err)
		}
		for s.db.Metrics().Compact.NumInProgress > 0 {
			time.Sleep(time.Millisecond)
		}
		cpu += cpuTime(b) - c0
		wall += time.Since(t0)
		n += len(revs)
		s.Close()
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/rev")
	b.ReportMetric(float64(n)/wall.Seconds(), "rev/s")
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
