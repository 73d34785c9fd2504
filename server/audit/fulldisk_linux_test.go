package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"golang.org/x/sys/unix"
)

// SmallFS mounts a tmpfs of size bytes on a new directory for the test
// (unmounted when it ends), or skips the test where mounting is not
// allowed (not root, no CAP_SYS_ADMIN).
func SmallFS(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("a full file system needs a small tmpfs, and mounting one failed (%v): run as root to test it", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file in dir until the file system is full, and returns
// its path (removing it frees the space).
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			return p
		}
	}
}

// Without headroom, a batch that no longer fits is taken back whole: its
// waiters get the error, the file has no torn record and its chain
// verifies, and once space returns the log writes again, no restart.
func TestFullDiskTakesTheBatchBack(t *testing.T) {
	dir := SmallFS(t, 1<<20)
	path := filepath.Join(dir, "audit.log")
	l, stop := runLog(t, Config{Path: path, JournalSize: 64 << 10, Headroom: -1, Log: quiet})
	defer stop()
	record := func(i int) error {
		ev := &auditv1.Event{Level: auditv1.LevelMetadata, AuditID: "x", Stage: auditv1.StageResponseComplete,
			Verb: "create", User: userInfo(ServerUser), RequestURI: fmt.Sprintf("/r/%d", i),
			StageTimestamp: metav1.NowMicro(), Annotations: map[string]string{"pad": strings.Repeat("p", 20_000)}}
		return l.append(ev, nil, true).Wait()
	}
	for i := range 5 {
		if err := record(i); err != nil {
			t.Fatalf("record %d before the disk filled: %v", i, err)
		}
	}
	filler := fill(t, dir)
	failed := 0
	for i := 5; i < 10; i++ {
		if err := record(i); err != nil {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("every record was written on a full file system")
	}
	if got := l.takenBack.Load(); got == 0 {
		t.Error("no batch was taken back")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := record(100); err != nil {
		t.Fatalf("a record once space returned: %v", err)
	}
	if _, err := Verify([]string{path}, nil); err != nil {
		t.Fatalf("verify after the full disk: %v", err)
	}
	if n := len(lines(t, path)); n != 5+(5-failed)+1 {
		t.Errorf("%d records in the file, want %d", n, 5+(5-failed)+1)
	}
}
