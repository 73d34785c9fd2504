package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestFollowParent(t *testing.T) {
	var ppid atomic.Int64
	ppid.Store(100)
	gone := make(chan struct{})
	wait := followParent(context.Background(), 100, func() int { return int(ppid.Load()) }, time.Millisecond, func() { close(gone) })
	select {
	case <-gone:
		t.Fatal("gone called while the parent is there")
	case <-time.After(20 * time.Millisecond):
	}
	ppid.Store(1) // re-parented to init
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("gone not called 5 s after the parent changed")
	}
	wait()

	ctx, cancel := context.WithCancel(context.Background())
	wait = followParent(ctx, 100, func() int { return 100 }, time.Millisecond, func() { t.Error("gone called for a living parent") })
	cancel()
	wait() // returns once ctx ends
}

// serveChildEnv names the data directory of TestServeChild's server.
const serveChildEnv = "OBJWATCH_TEST_SERVE_CHILD"

// TestServeChild is the server TestServeExitsWithParent starts in a
// process of its own; it does nothing in a normal test run.
func TestServeChild(t *testing.T) {
	dir := os.Getenv(serveChildEnv)
	if dir == "" {
		t.Skip("run by TestServeExitsWithParent")
	}
	code := Main([]string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--compaction-interval", "0", "--exit-with-parent"})
	fmt.Println("serve exited with", code)
}

// TestServeExitsWithParent: a server started with --exit-with-parent (as
// under go run) by a shell shuts down when the shell is killed with a
// plain SIGTERM, which the shell does not pass on, as the go tool does
// not; and it printed its own PID.
func TestServeExitsWithParent(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no sh, no SIGTERM")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sh := exec.Command("sh", "-c", `"$0" -test.run='^TestServeChild$' -test.count=1 & echo "child $!"; wait`, os.Args[0])
	sh.Env = append(os.Environ(), serveChildEnv+"="+filepath.Join(t.TempDir(), "data"))
	sh.Stdout, sh.Stderr = w, w
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	lines := make(chan string, 100)
	go func() { // ends at EOF: when the shell and the server have exited
		defer close(lines)
		s := bufio.NewScanner(r)
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	var out strings.Builder
	next := func(what string, match func(string) bool) string {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("output ended before %s:\n%s", what, out.String())
				}
				out.WriteString(l + "\n")
				if match(l) {
					return l
				}
			case <-timeout:
				t.Fatalf("no %s in 60 s:\n%s", what, out.String())
			}
		}
	}
	first := next("the child's PID", func(l string) bool { return strings.HasPrefix(l, "child ") })
	pid, err := strconv.Atoi(strings.TrimPrefix(first, "child "))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // if the test failed before it exited
	next("the usage line with the server's PID", func(l string) bool {
		return strings.Contains(l, fmt.Sprintf("objwatch (pid %d) is serving on https://127.0.0.1:", pid))
	})
	if err := sh.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = sh.Wait()
	next("the shutdown", func(l string) bool { return strings.Contains(l, "parent process exited; shutting down") })
	next("serve's return", func(l string) bool { return l == "serve exited with 0" })
	for range lines { // EOF: the server's process has ended
	}
	// The kernel closes an exiting process's files before it marks it a
	// zombie, so the end of the output can come a moment before the end
	// of the process: wait a little for it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); err != nil || zombie(pid) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server (pid %d) still runs 10 s after its output ended", pid)
		}
	}
}

// zombie reports whether pid has exited and waits for its parent (init,
// re-parented) to reap it.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	return ok && strings.HasPrefix(rest, "Z")
}
