package e2e_test

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pyProc is a Python client script run by a test: it prints one line per
// step, which expect reads; stdin is the script's.
type pyProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *strings.Builder
}

// startPython runs testdata/script with py and args (for at most two
// minutes); the test's cleanup closes its stdin and waits for it.
func startPython(ctx context.Context, t *testing.T, py, script string, args ...string) *pyProc {
	t.Helper()
	path, _ := filepath.Abs(filepath.Join("testdata", script))
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	cmd := exec.CommandContext(pctx, py, append([]string{path}, args...)...)
	p := &pyProc{t: t, cmd: cmd, lines: make(chan string), stderr: &strings.Builder{}}
	p.stdin, _ = cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stdin.Close()
		cmd.Wait()
		cancel()
	})
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		io.Copy(io.Discard, stdout)
	}()
	return p
}

// expect returns the script's next line, which must start with prefix.
func (p *pyProc) expect(prefix string) string {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.cmd.Wait()
			p.t.Fatalf("the Python client ended before %s; stderr:\n%s", prefix, p.stderr.String())
		}
		if !strings.HasPrefix(l, prefix) {
			p.t.Fatalf("Python client: %q, want %s ...; stderr:\n%s", l, prefix, p.stderr.String())
		}
		return l
	case <-time.After(60 * time.Second):
		p.t.Fatalf("Python client: no %s within a minute; stderr:\n%s", prefix, p.stderr.String())
	}
	return ""
}
