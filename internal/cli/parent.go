package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// serve's --exit-with-parent: `go run ./cmd/objwatch serve` runs the
// server as a child of the go tool, which does not pass SIGTERM on, so a
// plain `kill` of the PID a shell or a script knows (the go tool's) would
// leave the server running, holding its port and etcd's data directory.
// The server therefore watches its parent and shuts down, as on SIGTERM,
// once the parent is gone.
//
// It polls getppid instead of asking Linux for a signal on the parent's
// death (PR_SET_PDEATHSIG): polling works on every Unix, and the signal
// comes when the parent's forking thread exits, not the parent process.
// A process whose parent died is re-parented (to init or a subreaper), so
// a different getppid means the parent is gone.

// parentPollInterval is how often the parent is checked: a quarter second
// of delay on a shutdown that takes longer itself.
const parentPollInterval = 250 * time.Millisecond

// startedByGoRun reports whether the executable is one `go run` built: it
// lies in the go tool's temporary build directory (go-build*).
func startedByGoRun() bool {
	exe, err := os.Executable()
	if err != nil {
		return false
	}
	return strings.Contains(filepath.ToSlash(exe), "/go-build")
}

// followParent calls gone once getppid no longer returns ppid, checking
// every interval until ctx ends. Its goroutine is the caller's: wait
// returns once it has ended, which it does when ctx ends or after gone.
func followParent(ctx context.Context, ppid int, getppid func() int, interval time.Duration, gone func()) (wait func()) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if getppid() != ppid {
				gone()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return wg.Wait
}
