package watchcache

import (
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkSnapshotMemory measures what the snapshots of one write each
// cost beyond the live tree, at 1,000 to 100,000 objects: the heap held
// by MaxSnapshots snapshots (each after an update of one random object,
// the objects themselves shared) divided by their number.
//
//	go test -run '^$' -bench SnapshotMemory -benchtime 1x ./storage/watchcache/
func BenchmarkSnapshotMemory(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			const snaps = 10000
			for b.Loop() {
				c := New(Config{Prefix: "/p/", MaxSnapshots: snaps})
				objs := make([]*Object, n)
				for i := range objs {
					objs[i] = &Object{Key: fmt.Sprintf("/p/ns%d/o%06d", i%10, i)}
					c.objects.ReplaceOrInsert(objs[i])
				}
				c.mu.Lock()
				c.resetSnapshots_locked()
				c.mu.Unlock()
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for r := range snaps {
					o := objs[(r*7919)%n]
					c.mu.Lock()
					c.objects.ReplaceOrInsert(o) // the same object: only the tree's nodes count
					c.rev = int64(r + 2)
					c.wrote_locked(c.rev)
					if _, err := c.snapshot_locked(c.rev); err != nil { // as a list would
						b.Fatal(err)
					}
					c.mu.Unlock()
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				if got, _ := c.Snapshots(); got != snaps {
					b.Fatalf("%d snapshots, want %d", got, snaps)
				}
				b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/snaps, "B/snapshot")
				runtime.KeepAlive(c)
			}
		})
	}
}

// BenchmarkCountFrom: what a page's remainingItemCount costs when no
// earlier page of the walk remembered it (the first page of a namespace at
// a new revision): a walk over the range, here 100,000 objects.
//
//	go test -run '^$' -bench CountFrom ./storage/watchcache/
func BenchmarkCountFrom(b *testing.B) {
	const n = 100000
	c := New(Config{Prefix: "/p/"})
	for i := range n {
		c.objects.ReplaceOrInsert(&Object{Key: fmt.Sprintf("/p/ns/o%06d", i)})
	}
	for b.Loop() {
		s := &snapshot{tree: c.objects}
		if got := s.countFrom("/p/", "/p/ns/", "/p/ns/"); got != n {
			b.Fatalf("countFrom = %d, want %d", got, n)
		}
	}
}
