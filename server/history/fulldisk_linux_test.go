package history

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The store on a file system that fills up: appends are refused with
// ErrDiskFull before Pebble runs out of space (which would panic the
// process), nothing is damaged, what was recorded reads back, and once
// space returns appends go on. Needs a small tmpfs (root).
func TestStoreOnAFullDisk(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=512m"); err != nil {
		t.Skipf("a full file system needs a small tmpfs, and mounting one failed (%v): run as root to test it", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	s, err := Open(filepath.Join(dir, "h"), Options{DiskReserve: 1}) // the least reserve
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A filler leaves the reserve and 40 MiB free; removing it gives
	// space back.
	filler := filepath.Join(dir, "filler")
	free, err := freeBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filler, make([]byte, free-s.opts.DiskReserve-40<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	key := func(i int) string { return fmt.Sprintf("/registry/x/obj-%06d", i) }
	value := func(i int) []byte { return encode(t, object(fmt.Sprintf("obj-%06d", i), 4<<10, i)) }
	var refused error
	last := 0
	for i := 1; i < 100_000 && refused == nil; i++ {
		err := s.Append([]Revision{{Rev: int64(i), Time: time.Now(), Changes: []Change{{Key: key(i), Value: value(i), CreateRevision: int64(i)}}}})
		switch {
		case err == nil:
			last = i
		case errors.Is(err, ErrDiskFull):
			refused = err
		default:
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if refused == nil {
		t.Fatal("the disk never filled")
	}
	if free, _ := freeBytes(dir); free < s.opts.DiskReserve/4 {
		t.Errorf("%d bytes left free when the store refused, of a reserve of %d", free, s.opts.DiskReserve)
	}
	if s.Recorded() != int64(last) || s.Damaged() || s.Stalled() == 0 {
		t.Errorf("recorded %d (want %d), damaged %v, stalled %v", s.Recorded(), last, s.Damaged(), s.Stalled())
	}
	if e, err := s.Get(key(last), int64(last)); err != nil || string(e.Value) != string(value(last)) {
		t.Errorf("the last recorded value: %v", err)
	}
	if err := s.Sync(); err != nil {
		t.Errorf("sync on the full disk: %v", err)
	}
	if !s.HoldsCompaction(time.Hour) || s.HoldsCompaction(0) {
		t.Errorf("a store stalled for %v: holds compaction within an hour %v (want true), past 0 %v (want false)",
			s.Stalled(), s.HoldsCompaction(time.Hour), s.HoldsCompaction(0))
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	next := last + 1
	if err := s.Append([]Revision{{Rev: int64(next), Time: time.Now(), Changes: []Change{{Key: key(next), Value: value(next), CreateRevision: int64(next)}}}}); err != nil {
		t.Fatalf("append once space returned: %v", err)
	}
	if s.Stalled() != 0 || s.Recorded() != int64(next) || !s.HoldsCompaction(0) {
		t.Errorf("after space returned: stalled %v, recorded %d", s.Stalled(), s.Recorded())
	}
	t.Logf("%d revisions of 4 KiB recorded before the reserve; %v", last, refused)

}
